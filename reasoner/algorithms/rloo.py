"""RLOO: REINFORCE with a leave-one-out baseline (Kool et al. 2019; Ahmadian et al. 2024, "Back to Basics").

Each of a prompt's n samples is scored against the mean reward of the other n - 1, an unbiased baseline
that uses no critic. Since the others' mean is (n * mean - r_i) / (n - 1), the advantage is exactly
n / (n - 1) times GRPO's centred reward (r_i - mean), with no division by the group's standard deviation.

Departures from the paper: the loss is the clipped surrogate shared with GRPO (`grpo_loss`), which equals
plain REINFORCE on the first and only epoch over a batch (the ratio is 1); the paper's KL sits in the
reward, here it is a knob as for GRPO.
"""

from __future__ import annotations

import torch


def leave_one_out_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A_i = r_i - mean of the other samples of the group: rewards [G, n] -> advantages [G, n] (n >= 2)."""
    n = rewards.shape[-1]
    if n < 2:
        raise ValueError("RLOO needs at least two samples per prompt")
    others_mean = (rewards.sum(dim=-1, keepdim=True) - rewards) / (n - 1)  # [G, n]
    return rewards - others_mean  # [G, n]
