"""The vLLM generation backend (the `vllm` extra; it needs a CUDA GPU), behind the same interface as
the Hugging Face one. Imported only when `--backend vllm` is chosen.

The engine is colocated with training: it shares the GPU (a fraction of its memory) and after each
optimiser step the policy's weights are pushed into it, so every rollout samples the current policy.

Departures to know about: vLLM reports log-probs of its processed distribution only where its
`logprobs_mode` allows it (newer releases); elsewhere they are the raw model's, so with a temperature
other than 1 the trainer recomputes old log-probs itself (it does whenever `epochs_per_batch` > 1).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Iterator

import torch

from reasoner.config import SamplingParams
from reasoner.generation import Sample, stop_token_ids
from reasoner.modeling import render_prompt

log = logging.getLogger(__name__)

# Prefixes that wrappers put in front of a Hugging Face parameter name: DeepSpeed / DDP, PEFT, torch.compile.
WRAPPER_PREFIXES = ("module.", "base_model.model.", "_orig_mod.")


def vllm_sampling_kwargs(params: SamplingParams, n: int, eos_ids: Collection[int]) -> dict:
    """Our sampling parameters as the keyword arguments of `vllm.SamplingParams`; `eos_ids` (from
    `stop_token_ids`) end a sample as the Hugging Face backend's do."""
    return {
        "n": n,
        "temperature": max(0.0, params.temperature),
        "top_p": params.top_p,
        "max_tokens": params.max_new_tokens,
        "seed": params.seed,
        "logprobs": 0,  # the sampled token's log-prob only
        "skip_special_tokens": True,
        "stop_token_ids": sorted(eos_ids),
    }


def hf_weight_name(name: str, tied_embeddings: bool) -> str | None:
    """The Hugging Face name vLLM's `load_weights` expects, or None for a weight it must not receive."""
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix):], True
    if tied_embeddings and name == "lm_head.weight":
        return None  # vLLM ties it to the embedding itself
    return name


def weights_for_vllm(state: Iterable[tuple[str, torch.Tensor]], tied_embeddings: bool) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in state:
        mapped = hf_weight_name(name, tied_embeddings)
        if mapped is not None:
            yield mapped, tensor.detach()


def sample_from_completion(completion, eos_ids: Collection[int], eos_token_id: int) -> Sample:
    """One vLLM `CompletionOutput` as our `Sample`. vLLM sets `stop_reason` to the id of a stop token it
    stopped on (None for the tokenizer's end of sequence, `eos_token_id`)."""
    ids = list(completion.token_ids)
    logprobs = []
    for token, entry in zip(ids, completion.logprobs or []):
        value = entry[token]
        logprobs.append(float(getattr(value, "logprob", value)))
    stopped = completion.finish_reason == "stop"
    if stopped and (not ids or ids[-1] not in eos_ids):
        # where vLLM drops the end-of-sequence token from its output: training needs it
        ids.append(completion.stop_reason if completion.stop_reason in eos_ids else eos_token_id)
        logprobs.append(0.0)
    return Sample(ids, completion.text, logprobs, "stop" if stopped else "length")


def _model_of(llm):
    """The torch module inside a vLLM engine, across the releases that moved it."""
    paths = ("llm_engine.model_executor.driver_worker.model_runner.model",
             "llm_engine.model_executor.driver_worker.worker.model_runner.model")
    for path in paths:
        obj = llm
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    return None


class VLLMGenerator:
    def __init__(self, model: torch.nn.Module, tokenizer, gpu_memory_utilization: float = 0.3,
                 dtype: torch.dtype | None = None, **_):
        import vllm  # the optional extra; only here

        self.tokenizer = tokenizer
        self.eos_ids = stop_token_ids(model, tokenizer)
        self.tied = bool(getattr(model.config, "tie_word_embeddings", False))
        dtype = dtype or next(model.parameters()).dtype  # vLLM casts the weights it is sent into its own dtype
        self.llm = vllm.LLM(model=model.name_or_path, dtype=str(dtype).split(".")[-1],
                            gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=True)
        self._vllm = vllm

    def load_weights(self, model: torch.nn.Module) -> None:
        weights = weights_for_vllm(model.state_dict().items(), self.tied)
        inner = _model_of(self.llm)
        if inner is not None:
            inner.load_weights(weights)
        else:  # the V1 engine: run the load in its workers
            state = dict(weights)
            self.llm.collective_rpc(lambda worker: worker.model_runner.model.load_weights(state.items()))
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached prompt states belong to the old weights

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        sampling = self._vllm.SamplingParams(**vllm_sampling_kwargs(params, n, self.eos_ids))
        texts = [render_prompt(self.tokenizer, p) for p in prompts]
        outputs = self.llm.generate(texts, sampling, use_tqdm=False)
        eos = self.tokenizer.eos_token_id
        return [[sample_from_completion(c, self.eos_ids, eos) for c in out.outputs] for out in outputs]
