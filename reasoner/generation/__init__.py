"""Sampling completions: one interface, a Hugging Face backend (`hf.py`) and a vLLM one (`vllm.py`, where
a GPU has it).

`generate(prompts, n, params)` returns, for each prompt, n `Sample`s with the response's token ids, its
text, the per-token log-probs under the sampling distribution (logits / temperature) and why it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from reasoner.config import SamplingParams


@dataclass
class Sample:
    token_ids: list[int]  # the response, ending with the stop token (`stop_token_ids`) when it stopped by itself
    text: str  # the response decoded, without the stop token
    logprobs: list[float]  # log-prob of each response token under the sampling distribution
    finish_reason: str  # "stop" (end of sequence) or "length" (hit max_new_tokens)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


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


def make_generator(backend: str, model: torch.nn.Module, tokenizer, **kwargs) -> Generator:
    """The generation backend by name; vLLM is imported only when chosen."""
    if backend == "hf":
        from reasoner.generation.hf import HFGenerator

        return HFGenerator(model, tokenizer, **kwargs)
    if backend == "vllm":
        from reasoner.generation.vllm import VLLMGenerator

        return VLLMGenerator(model, tokenizer, **kwargs)
    raise ValueError(f"unknown generation backend {backend!r}; choose 'hf' or 'vllm'")
