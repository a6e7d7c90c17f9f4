"""REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models").

No critic and no per-group statistics: the KL to the reference is paid on every token inside the reward,
the verifier's score arrives on the last token, the return-to-go (gamma = 1) is each token's advantage,
and the advantages are whitened over the whole batch's tokens, not within a prompt's group. The
`-baseline` variant (the paper's later version, for reasoning tasks with several samples per prompt)
first subtracts the group's mean score, then whitens over the batch in the same way.

Departures from the paper: the clipped surrogate is the one shared with GRPO; the advantages are whitened
over the batch this function is given.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reasoner.algorithms.ppo import token_rewards, whiten


def returns_to_go(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """G_t = sum over s >= t of r_s (gamma = 1): [B, T] -> [B, T], 0 on padding."""
    return (rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask  # [B, T]


def reinforce_pp_advantages(
    score: torch.Tensor,  # [B] the verifier's reward of each response
    kl: torch.Tensor | None,  # [B, T] per-token KL estimate to the reference, None without a reference
    mask: torch.Tensor,  # [B, T]
    beta: float,
    moments: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> torch.Tensor:
    """Whitened returns-to-go of r_t = -beta * kl_t (+ the score on the last token): [B, T]. `moments(x, mask)`
    gives the mean and variance to whiten with (default: those of this batch's tokens; several processes
    pass their global ones)."""
    returns = returns_to_go(token_rewards(score, kl, mask, beta), mask)  # [B, T]
    return whiten(returns, mask, 1e-8, *moments(returns, mask)) if moments else whiten(returns, mask)  # [B, T]


def group_baseline_scores(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE++-baseline's first step: each score minus its group's mean, [G, n] -> [G, n]."""
    return rewards - rewards.mean(dim=-1, keepdim=True)  # [G, n]
