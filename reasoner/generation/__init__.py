"""Sampling completions: one interface, a Hugging Face backend (`hf.py`) and a vLLM one (`vllm.py`, where
a GPU has it).

`generate(prompts, n, params)` returns, for each prompt, n `Sample`s with the response's token ids, its
text, the per-token log-probs under the sampling distribution (logits / temperature) and why it stopped.
With `tools="python"` the backend is wrapped in `tools.ToolGenerator`: a sample may run Python in the
sandbox mid-answer, and the tool's output tokens are part of its `token_ids` with `loss_mask` 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

import torch

from reasoner.config import SamplingConfig, SamplingParams

log = logging.getLogger(__name__)


@dataclass
class Sample:
    token_ids: list[int]  # the response, ending with the stop token (`stop_token_ids`) when it stopped by itself
    text: str  # the response decoded, without the stop token
    logprobs: list[float]  # log-prob of each response token under the sampling distribution
    finish_reason: str  # "stop" (end of sequence) or "length" (hit max_new_tokens)
    # With tools (tools.py): 1 on each token the policy sampled, 0 on each a tool wrote (no loss, KL, entropy
    # or ratio); the tool's output as text is in `text`, not in `policy_text`, which verifiers grade.
    loss_mask: list[int] | None = None  # None: every token sampled
    policy_text: str | None = None  # None: `text`
    tool_calls: list = field(default_factory=list)  # a tools.ToolCall per code block run

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def graded_text(self) -> str:
        """What a verifier grades: the policy's own text, without the output of its tool calls."""
        return self.text if self.policy_text is None else self.policy_text


class Generator(Protocol):
    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]: ...

    def load_weights(self, model: torch.nn.Module) -> None: ...


def stop_token_ids(model: torch.nn.Module, tokenizer) -> frozenset[int]:
    """The ids that end a response: the tokenizer's end-of-sequence token and each id of the model's
    `generation_config.eos_token_id` (one id or a list). Chat models often have several (an end of turn
    and an end of text); both backends stop on any of them (README: A real model on the CPU)."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = {tokenizer.eos_token_id, *([configured] if isinstance(configured, int) else configured or [])}
    ids.discard(None)
    if not ids:
        raise ValueError("the model has no end-of-sequence token (neither the tokenizer's eos_token nor "
                         "generation_config.eos_token_id is set), so no response could stop; set one")
    return frozenset(ids)


def make_generator(backend: str, model: torch.nn.Module, tokenizer, sampling: SamplingConfig | None = None,
                   **kwargs) -> Generator:
    """The generation backend by name (vLLM is imported only when chosen), in `sampling.sampler_processes`
    processes where that is more than one, wrapped for tool calls when `sampling.tools` is "python"."""
    sampling = sampling or SamplingConfig()
    tools, processes = sampling.tools, sampling.sampler_processes
    if tools not in ("none", "python"):
        raise ValueError(f"unknown --tools {tools!r}; choose 'none' or 'python'")
    if tools == "python" and backend != "hf":
        raise ValueError(f"--tools python needs --backend hf (the {backend} backend cannot pause a sample yet)")
    if processes < 1:
        raise ValueError(f"--sampler-processes must be at least 1, got {processes}")
    if processes > 1 and backend != "hf":
        raise ValueError(f"--sampler-processes {processes} needs --backend hf (the {backend} backend batches on "
                         f"its own device)")
    if backend == "hf":
        if processes > 1:
            from reasoner.generation.processes import ProcessGenerator, shared_memory_problem

            problem = shared_memory_problem(model, kwargs.get("dtype"))
            if problem:
                log.warning("sampling in this process, not in %d: %s", processes, problem)
                processes = 1
        if processes > 1:
            generator = ProcessGenerator(model, tokenizer, processes, **kwargs)
        else:
            from reasoner.generation.hf import HFGenerator

            generator = HFGenerator(model, tokenizer, **kwargs)
        if tools == "python":
            from reasoner.generation.tools import ToolGenerator

            return ToolGenerator(generator, tokenizer, sampling.max_tool_calls)
        return generator
    if backend == "vllm":
        from reasoner.generation.vllm import VLLMGenerator

        return VLLMGenerator(model, tokenizer, **kwargs)
    raise ValueError(f"unknown generation backend {backend!r}; choose 'hf' or 'vllm'")
