"""The gap between the engine that sampled and the trainer (Yao et al. 2025, "Your Efficient RL Framework
Secretly Brings You Off-Policy RL Training").

A sampler (vLLM, bf16, another kernel) and the trainer give the same tokens different probabilities, so
samples from the sampler's policy train the trainer's as if they were its own. These measure the gap from
the log-probs both assign to the sampled tokens, and correct for it with truncated importance sampling:
each token's loss weighed by min(pi_trainer / pi_sampler, C), detached.
"""

from __future__ import annotations

import torch

from reasoner.algorithms.common import kl_k3, masked_mean


def rollout_mismatch(
    trainer_logp: torch.Tensor,  # [B, T] log-probs of the sampled tokens under the trainer, before the update
    sampler_logp: torch.Tensor,  # [B, T] the same as the sampler computed them
    mask: torch.Tensor,  # [B, T]
) -> dict[str, torch.Tensor]:
    """KL(sampler || trainer) estimated on the samples (k3, unbiased and positive) and the largest and mean
    per-token ratio pi_trainer / pi_sampler."""
    log_ratio = (trainer_logp - sampler_logp) * mask  # [B, T]
    return {
        "rollout_logprob_kl": masked_mean(kl_k3(sampler_logp, trainer_logp), mask).detach(),
        "rollout_ratio_max": torch.exp(log_ratio.masked_fill(mask == 0, float("-inf")).max()).detach(),
        "rollout_ratio_mean": masked_mean(torch.exp(log_ratio), mask).detach(),
    }


def truncated_importance_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """w_t = min(pi_trainer / pi_sampler, C), detached: [B, T] (TIS; C = 2 in the paper's experiments)."""
    return torch.exp(trainer_logp - sampler_logp).clamp(max=cap).detach()  # [B, T]


def truncated_sequence_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                               cap: float) -> torch.Tensor:
    """The same for a sequence-level loss (GSPO): min(exp(mean_t log(pi_trainer / pi_sampler)), C), detached: [B]."""
    mean_log_ratio = ((trainer_logp - sampler_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]
    return torch.exp(mean_log_ratio).clamp(max=cap).detach()  # [B]
