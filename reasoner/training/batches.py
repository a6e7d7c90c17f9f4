"""Preparing an update: from this rank's samples to micro-batches whose loss sums to the global loss.

Every update step (GRPO, PPO, DPO) trains on micro-batches of padded rows. To make two ranks take exactly
the update one process would, three things must be global rather than per rank, and this module is the
one place that makes them so:
- the loss denominators (`BatchSizes`: response tokens, sequences), summed over ranks;
- the number of micro-batches, the maximum over ranks: every rank runs as many forward/backward passes,
  a rank with fewer rows runs fully masked copies (DeepSpeed reduces gradients at the same boundaries);
- a rank with no row to train on runs one masked row, so that it still joins every collective.
Statistics are summed as each row's share of the global batch and then summed over ranks (`reduce_sums`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from reasoner.training import distributed
from reasoner.algorithms.common import TRUNCATION, BatchSizes
from reasoner.algorithms.mismatch import rollout_mismatch
from reasoner.training.rollout import Rollout, encode_prompts, micro_batches, pad_batch, trim_padding


def rollout_batch(tokenizer, rollout: Rollout, rows: list[int] | None = None) -> dict:
    """The padded batch of the rollout's samples (all of them, or the given rows), with the log-prob the
    sampler gave each response token (`sampler_logp` [B, R])."""
    rows = range(len(rollout.samples)) if rows is None else rows
    prompt_ids = encode_prompts(tokenizer, rollout.tasks)
    batch = pad_batch([prompt_ids[i // rollout.group_size] for i in rows],
                      [rollout.samples[i].token_ids for i in rows], tokenizer.pad_token_id,
                      [rollout.samples[i].loss_mask for i in rows])
    batch["sampler_logp"] = torch.zeros_like(batch["response_mask"])  # [B, R]: what the sampler saw, per token
    for row, i in enumerate(rows):
        logprobs = rollout.samples[i].logprobs
        batch["sampler_logp"][row, :len(logprobs)] = torch.tensor(logprobs, dtype=torch.float32)
    return batch


def shaped_rewards(rollout: Rollout, truncation: str, penalty: float, max_new_tokens: int,
                   overlong_buffer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The verifier's rewards [G, n] after the `--truncation` rule, and which samples train [G * n]."""
    truncated = torch.tensor([s.truncated for s in rollout.samples]).view(-1, rollout.group_size)  # [G, n]
    lengths = torch.tensor(rollout.lengths).view(-1, rollout.group_size)  # [G, n]
    rewards, keep = TRUNCATION[truncation](rollout.rewards, truncated, lengths, penalty, max_new_tokens,
                                           overlong_buffer)  # [G, n]
    return rewards, keep.flatten()


def global_micro_count(rows: int, micro_batch_size: int) -> int:
    """Micro-batches every rank runs: the most any rank needs for its rows (at least one)."""
    return int(distributed.all_reduce([math.ceil(max(1, rows) / micro_batch_size)], "max")[0])


def pad_to_count(pieces: list[dict], count: int, mask_key: str = "response_mask") -> list[dict]:
    """`pieces` followed by fully masked copies of the last one, `count` in all."""
    blank = {**pieces[-1], mask_key: torch.zeros_like(pieces[-1][mask_key])}
    return pieces + [blank] * (count - len(pieces))


@dataclass
class UpdateBatch:
    """This rank's rows of a rollout, padded, sorted by length, with the global sizes of the update."""

    batch: dict  # padded tensors of the kept rows; one masked row when this rank kept none
    rows: list[int]  # indices of the kept samples in the rollout, shortest first ([0] when none was kept)
    sizes: BatchSizes  # global: tokens and sequences summed over ranks
    micro_count: int  # global: the micro-batches every rank runs
    micro_batch_size: int

    @property
    def empty(self) -> bool:
        """No rank has a token to train on (every rank sees the same answer)."""
        return self.sizes.tokens == 0

    def pieces(self) -> list[dict]:
        """Trimmed micro-batches of `batch`, padded with masked copies up to the global count."""
        pieces = [trim_padding(mb) for mb in micro_batches(self.batch, self.micro_batch_size)]
        return pad_to_count(pieces, self.micro_count)

    def join(self, outputs) -> torch.Tensor:
        """Per-token outputs [b, R'] of `pieces()`, in order, back as one [N, R] tensor of `batch`'s rows
        (the masked copies' outputs dropped, trimmed columns padded with zeros)."""
        width, rows = self.batch["response_mask"].shape[1], len(self.rows)
        parts = [torch.nn.functional.pad(x, (0, width - x.shape[1])) for x in outputs]
        return torch.cat(parts)[:rows]


def prepare_update(tokenizer, rollout: Rollout, keep: torch.Tensor, micro_batch_size: int,
                   max_new_tokens: int) -> UpdateBatch:
    """The kept samples [G * n] of this rank's rollout as an `UpdateBatch` (a collective: every rank calls it)."""
    rows = keep.nonzero().squeeze(-1).tolist()
    rows.sort(key=lambda i: len(rollout.samples[i].token_ids))  # micro-batches of similar lengths pad little
    batch = rollout_batch(tokenizer, rollout, rows or [0])  # a rank with nothing to learn runs one masked row
    if not rows:
        batch["response_mask"].zero_()
    tokens, sequences = distributed.all_reduce([float(batch["response_mask"].sum()), float(len(rows))])
    sizes = BatchSizes(tokens=int(tokens), sequences=int(sequences), max_new_tokens=max_new_tokens)
    return UpdateBatch(batch, rows or [0], sizes, global_micro_count(len(rows), micro_batch_size), micro_batch_size)


def reduce_sums(totals: dict[str, float]) -> dict[str, float]:
    """Sum each statistic over ranks (each rank holds its share of the global value)."""
    keys = sorted(totals)
    return dict(zip(keys, distributed.all_reduce([totals[k] for k in keys])))


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum())


def global_moments(x: torch.Tensor, mask: torch.Tensor, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of x [N, T] over the real tokens of every rank (`tokens` of them in all)."""
    mean = distributed.all_reduce([masked_sum(x, mask)])[0] / tokens
    var = distributed.all_reduce([masked_sum((x - mean) ** 2, mask)])[0] / tokens
    return torch.tensor(mean, dtype=x.dtype), torch.tensor(var, dtype=x.dtype)


def mismatch_shares(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                    tokens: int) -> tuple[dict[str, float], float]:
    """The sampler/trainer gap of these rows (`rollout_mismatch`) as shares of the global batch's `tokens`
    (sum them over micro-batches and ranks), and their largest token ratio (take the maximum)."""
    stats = rollout_mismatch(trainer_logp, sampler_logp, mask)
    share = float(mask.sum()) / tokens
    return ({key: float(stats[key]) * share for key in ("rollout_logprob_kl", "rollout_ratio_mean")},
            float(stats["rollout_ratio_max"]))


def add_shares(totals: dict[str, float], stats: dict, share: float) -> None:
    """Accumulate per-token statistics weighted by this micro-batch's share of the global tokens."""
    for key, value in stats.items():
        totals[key] = totals.get(key, 0.0) + float(value) * share
