"""The Hugging Face generation backend (`--backend hf`, the default).

The backend is a plain KV-cache loop: each prompt is encoded once and its cache repeated n
times, rows that have ended are dropped from the batch (a few at a time: each drop copies the cache), and
tokens are drawn by inverse CDF with one explicitly seeded `torch.Generator` per call, so a (seed,
prompts) pair always gives the same samples. A Llama-architecture model is stepped by a lean decoder with
a preallocated cache, any other by its own forward (`llama_decode.py`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from reasoner.config import SamplingParams
from reasoner.generation import Sample, stop_token_ids
from reasoner.generation.llama_decode import HFDecoder, StaticCacheDecoder, supports
from reasoner.modeling import render_prompt


def sample_tokens(logits: torch.Tensor, params: SamplingParams, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; return (token ids [B], their log-probs [B]) under the sampled distribution."""
    logprobs = torch.log_softmax(logits.float() / max(params.temperature, 1e-5), dim=-1)  # [B, V]
    if params.temperature <= 1e-5:
        tokens = logprobs.argmax(-1)
    else:
        probs = logprobs.exp()
        if params.top_p < 1.0:
            sorted_probs, order = probs.sort(-1, descending=True)
            outside = sorted_probs.cumsum(-1) - sorted_probs > params.top_p  # keep the smallest set reaching top_p
            sorted_probs = sorted_probs.masked_fill(outside, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        # Inverse-CDF draw: one uniform per row, searched in the cumulative sum. The same distribution as
        # torch.multinomial, which costs ~7 ms per call on a [128, 768] batch on the CPU, ~10% of generation.
        # u stays strictly below the total, so a token of zero probability is never drawn.
        cdf = probs.cumsum(-1)  # [B, V]
        u = torch.rand(len(cdf), 1, generator=rng, device=cdf.device) * cdf[:, -1:] * (1 - 1e-6)  # [B, 1]
        tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


class HFGenerator:
    """Batched sampling with a KV cache on a Hugging Face causal LM."""

    def __init__(self, model: torch.nn.Module, tokenizer, batch_size: int = 256, drop_fraction: float = 1 / 16,
                 dtype: torch.dtype | None = None):
        self.tokenizer, self.batch_size = tokenizer, batch_size
        # In another dtype than the policy's (`--rollout-dtype`; by default that of the training forwards'
        # mixed precision), the sampler is a copy of the policy in that dtype, refreshed after every update.
        self.dtype = dtype if dtype is not None and dtype != next(model.parameters()).dtype else None
        self.model = copy.deepcopy(model).to(self.dtype) if self.dtype else model
        # Dropping ended rows copies the whole KV cache, so it waits until this fraction of the batch has
        # ended (0: at every end); until then ended rows ride along and their tokens are ignored.
        self.drop_fraction = drop_fraction

    def load_weights(self, model: torch.nn.Module) -> None:
        if self.dtype:
            self.model.load_state_dict(model.state_dict())  # cast into the sampler's dtype
        else:
            self.model = model  # the policy itself: nothing to copy

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        texts = [render_prompt(self.tokenizer, p) for p in prompts]
        return self.generate_ids(self.tokenizer(texts, add_special_tokens=False).input_ids, n, params)

    def generate_ids(self, contexts: list[list[int]], n: int, params: SamplingParams,
                     stop: Callable[[list[int]], bool] | None = None) -> list[list[Sample]]:
        """n samples continuing each token sequence. `stop(tokens)`, asked with a row's tokens after each
        token it samples, ends that row when true (finish reason "paused": how tool calls interrupt)."""
        rng = torch.Generator().manual_seed(params.seed)
        per_chunk = max(1, self.batch_size // n)
        results: list[list[Sample]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(contexts), per_chunk):
                results.extend(self._generate_chunk(contexts[start:start + per_chunk], n, params, rng, stop))
        finally:
            self.model.train(was_training)
        return results

    @torch.inference_mode()
    def _generate_chunk(self, contexts: list[list[int]], n: int, params: SamplingParams, rng: torch.Generator,
                        stop: Callable[[list[int]], bool] | None):
        device = next(self.model.parameters()).device
        eos_ids = stop_token_ids(self.model, self.tokenizer)  # every id that ends a response
        eos_tensor = torch.tensor(sorted(eos_ids), device=device)
        enc = self.tokenizer.pad({"input_ids": contexts}, return_tensors="pt").to(device)  # left-padded
        positions = (enc.attention_mask.cumsum(-1) - 1).clamp(min=0)  # [P, L]
        decoder = StaticCacheDecoder(self.model) if supports(self.model) else HFDecoder(self.model)
        logits = decoder.prefill(enc.input_ids, enc.attention_mask, positions,
                                 enc.input_ids.shape[1] + params.max_new_tokens)  # [P, V]
        # Encode each prompt once, then give every one of its n samples a copy of its cache.
        decoder.repeat_interleave(n)
        logits = logits.repeat_interleave(n, 0)  # [B, V], B = P * n
        next_position = positions[:, -1:].repeat_interleave(n, 0) + 1  # [B, 1]
        rows = torch.arange(len(contexts) * n, device=device)  # which sample each live row belongs to
        tokens: list[list[int]] = [[] for _ in range(len(contexts) * n)]
        logps: list[list[float]] = [[] for _ in range(len(contexts) * n)]
        stopped = [False] * (len(contexts) * n)
        paused_rows: set[int] = set()
        live = torch.ones(len(rows), dtype=torch.bool, device=device)  # [rows]: still generating
        for step in range(params.max_new_tokens):
            new, new_logp = sample_tokens(logits, params, rng)
            for row, tok, lp, on in zip(rows.tolist(), new.tolist(), new_logp.tolist(), live.tolist()):
                if on:
                    tokens[row].append(tok)
                    logps[row].append(lp)
                    stopped[row] = tok in eos_ids
            live = live & ~torch.isin(new, eos_tensor)
            paused = [] if stop is None else [i for i, (row, on) in enumerate(zip(rows.tolist(), live.tolist()))
                                              if on and stop(tokens[row])]
            for i in paused:
                live[i] = False
                paused_rows.add(int(rows[i]))
            if not live.any() or step == params.max_new_tokens - 1:
                break
            if (~live).sum() > self.drop_fraction * len(live):  # drop ended rows: the loop costs what still runs
                keep = live.nonzero().squeeze(-1)
                decoder.select(keep)
                rows, new, next_position, live = rows[keep], new[keep], next_position[keep], live[keep]
            logits = decoder.step(new, next_position)
            next_position = next_position + 1
        samples = []
        for row in range(len(contexts) * n):
            ids = tokens[row]
            text = self.tokenizer.decode(ids[:-1] if stopped[row] else ids, skip_special_tokens=True)
            reason = "stop" if stopped[row] else "paused" if row in paused_rows else "length"
            samples.append(Sample(ids, text, logps[row], reason))
        return [samples[i * n:(i + 1) * n] for i in range(len(contexts))]
