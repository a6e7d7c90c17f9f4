"""GRPO (Shao et al. 2024, "DeepSeekMath"), with the variants later papers proposed.

Departures from the paper, each a knob (defaults in brackets):
- loss aggregation: per-sequence mean of token means as in the paper, token mean as in DAPO, or the
  constant normaliser of Dr. GRPO [token_mean];
- advantages are (r - mean) / std within the group as in the paper, or r - mean as in Dr. GRPO [std];
- clipping may be asymmetric, eps_low / eps_high, as in DAPO [0.2 / 0.2];
- the KL to the reference may use k1, k2 or k3 [k3, the paper's], and sit in the loss (the paper) or be
  subtracted from the reward (as PPO-style RLHF does) [loss]; beta = 0 loads no reference model.
- over-long (truncated) samples may be kept, left out of the loss (DAPO's overlong filtering) or have a
  penalty taken from their reward (a flat form of DAPO's soft overlong punishment) [keep];
  `common.TRUNCATION` and `common.kl_penalised_rewards` shape the rewards before `group_advantages`.
"""

from __future__ import annotations

import torch

from reasoner.algorithms.common import AGGREGATIONS, KL_ESTIMATORS, BatchSizes, clipped_policy_loss, masked_mean


def group_advantages(rewards: torch.Tensor, scale_by_std: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """Advantage of each sample relative to its group: rewards [G, n] -> advantages [G, n]."""
    centred = rewards - rewards.mean(dim=-1, keepdim=True)  # [G, n]
    if not scale_by_std:
        return centred
    return centred / (rewards.std(dim=-1, keepdim=True) + eps)  # [G, n]; std is the unbiased one


def weight_negatives(advantages: torch.Tensor, negative_weight: float) -> torch.Tensor:
    """Negative advantages times `negative_weight`: 1 is plain GRPO, 0 learns from the verified-right samples
    alone (positive sample reinforcement in Zhu et al. 2025's split; rejection-sampling fine-tuning)."""
    return torch.where(advantages < 0, advantages * negative_weight, advantages)


def grpo_loss(
    logp: torch.Tensor,  # [B, T] current policy
    old_logp: torch.Tensor,  # [B, T] policy that sampled (equal to logp.detach() with one epoch per batch)
    ref_logp: torch.Tensor | None,  # [B, T] reference policy, None when beta == 0
    advantages: torch.Tensor,  # [B] per sequence, or [B, T] per token
    mask: torch.Tensor,  # [B, T]
    sizes: BatchSizes,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    aggregation: str = "token_mean",
    is_weights: torch.Tensor | None = None,  # [B, T] detached importance weights (TIS), None: all 1
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    per_token, stats = clipped_policy_loss(logp, old_logp, advantages if advantages.dim() == 2 else advantages[:, None],
                                           mask, clip_low, clip_high)
    if is_weights is not None:
        per_token = per_token * is_weights
    if ref_logp is not None:
        kl = KL_ESTIMATORS[kl_estimator](logp, ref_logp)  # [B, T]
        stats["kl"] = masked_mean(kl, mask).detach()
        if beta:
            per_token = per_token + beta * kl
    loss = AGGREGATIONS[aggregation](per_token, mask, sizes)
    return loss, stats
