"""CISPO: Clipped IS-weight Policy Optimization (MiniMax-M1, MiniMax 2025).

PPO's clip drops the gradient of every token whose ratio leaves the trust region, which on reasoning tasks
are often the rare tokens that open a new line of thought ("However", "Wait"). CISPO keeps every token's
REINFORCE gradient and clips only its importance weight, detached:
J = sum_{i,t} sg(clip(r_{i,t}, 1 - eps_low, 1 + eps_high)) * A_i * log pi(y_{i,t}) / sum_i |y_i|.
The paper sets no lower bound in practice (a large eps_low) and tunes eps_high.

Departures from the paper: none in the loss; the token normaliser is the whole batch's token count.
"""

from __future__ import annotations

import torch

from reasoner.algorithms.common import BatchSizes, masked_mean


def cispo_loss(
    logp: torch.Tensor,  # [B, T] current policy
    old_logp: torch.Tensor,  # [B, T] policy that sampled
    advantages: torch.Tensor,  # [B]
    mask: torch.Tensor,  # [B, T]
    sizes: BatchSizes,
    clip_low: float = 1.0,  # 1.0: no lower bound (a weight is never below 0)
    clip_high: float = 0.28,
    is_weights: torch.Tensor | None = None,  # [B, T] detached importance weights (TIS), None: all 1
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ratio = torch.exp(logp - old_logp)  # [B, T]
    weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high).detach()  # [B, T] sg(clipped r)
    if is_weights is not None:
        weight = weight * is_weights
    per_token = -weight * advantages[:, None] * logp  # [B, T]
    loss = (per_token * mask).sum() / sizes.tokens
    stats = {"clip_frac": masked_mean(((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)).float(), mask).detach(),
             "ratio_mean": masked_mean(ratio, mask).detach()}
    return loss, stats
