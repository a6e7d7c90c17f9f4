"""GSPO: Group Sequence Policy Optimization (Zheng et al. 2025, Qwen team).

GRPO weights each token by its own importance ratio, whose noise grows with length and which a token-level
clip handles poorly; GSPO uses one ratio per sequence, the length-normalised likelihood ratio
s_i = (pi(y_i | x) / pi_old(y_i | x)) ^ (1 / |y_i|) = exp(mean_t log ratio), and clips it per sequence:
J = mean_i min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i), with GRPO's group advantages. The
paper's clip range is far narrower than GRPO's (3e-4 / 4e-4), since s_i is a geometric mean.

Departures from the paper: none in the loss; the sequence mean is over the whole batch's sequences.
"""

from __future__ import annotations

import torch

from reasoner.algorithms.common import BatchSizes, masked_mean


def gspo_loss(
    logp: torch.Tensor,  # [B, T] current policy
    old_logp: torch.Tensor,  # [B, T] policy that sampled
    advantages: torch.Tensor,  # [B]
    mask: torch.Tensor,  # [B, T]
    sizes: BatchSizes,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    is_weights: torch.Tensor | None = None,  # [B] detached per-sequence importance weights (TIS), None: all 1
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    log_s = ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B] mean log-ratio
    s = torch.exp(log_s)  # [B] sequence importance ratio
    clipped = torch.clamp(s, 1.0 - clip_low, 1.0 + clip_high)  # [B]
    per_sequence = -torch.minimum(s * advantages, clipped * advantages)  # [B]
    real = (mask.sum(-1) > 0).to(per_sequence.dtype)  # [B]; a fully masked row (padding of a micro-batch) is no sequence
    if is_weights is not None:
        per_sequence = per_sequence * is_weights
    loss = (per_sequence * real).sum() / sizes.sequences
    clipped_out = ((s < 1.0 - clip_low) | (s > 1.0 + clip_high)).to(s.dtype)  # [B]
    stats = {"clip_frac": masked_mean(clipped_out, real).detach(), "ratio_mean": masked_mean(s, real).detach(),
             "token_ratio_mean": masked_mean(torch.exp(logp - old_logp), mask).detach()}
    return loss, stats
