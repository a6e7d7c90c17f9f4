"""Pieces every policy-gradient loss shares: KL estimators, loss aggregation, the clipped surrogate.

Shapes: B sequences, T response tokens. `mask` is 1.0 on real response tokens and 0.0 on padding.
Aggregators take the sizes of the whole batch (not the micro-batch) so that gradient accumulation over
micro-batches and ranks sums to exactly the full-batch loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


# ------------------------------------------------------------------------------------ KL estimators
# Schulman, "Approximating KL divergence" (2020): unbiased k1, low-variance k2, unbiased and positive k3,
# estimating KL(pi || pi_ref) from samples of pi. log_ratio = logp - ref_logp.

def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


# ------------------------------------------------------------------------------------ aggregation

@dataclass(frozen=True)
class BatchSizes:
    """Denominators of the whole optimiser batch, across micro-batches and ranks."""

    tokens: int  # response tokens in the batch
    sequences: int  # responses in the batch
    max_new_tokens: int  # the generation length cap, Dr. GRPO's constant


def token_mean(loss: torch.Tensor, mask: torch.Tensor, sizes: BatchSizes) -> torch.Tensor:
    """Every token weighs the same (DAPO, Yu et al. 2025): long answers are not diluted."""
    return (loss * mask).sum() / sizes.tokens


def sequence_mean(loss: torch.Tensor, mask: torch.Tensor, sizes: BatchSizes) -> torch.Tensor:
    """Mean over sequences of each sequence's token mean (original GRPO, Shao et al. 2024)."""
    per_sequence = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]
    return per_sequence.sum() / sizes.sequences


def constant_normaliser(loss: torch.Tensor, mask: torch.Tensor, sizes: BatchSizes) -> torch.Tensor:
    """Sum over tokens divided by sequences x max length (Dr. GRPO, Liu et al. 2025): no length bias."""
    return (loss * mask).sum() / (sizes.sequences * sizes.max_new_tokens)


AGGREGATIONS = {"token_mean": token_mean, "sequence_mean": sequence_mean, "dr_grpo": constant_normaliser}


# ------------------------------------------------------------------------------------ clipped surrogate

def clipped_policy_loss(
    logp: torch.Tensor,  # [B, T] log-probs of the sampled tokens under the current policy
    old_logp: torch.Tensor,  # [B, T] the same under the policy that sampled them
    advantages: torch.Tensor,  # [B, T] or [B, 1]
    mask: torch.Tensor,  # [B, T]
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate per token (Schulman et al. 2017), with DAPO's asymmetric range."""
    ratio = torch.exp(logp - old_logp)  # [B, T]
    unclipped = ratio * advantages  # [B, T]
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages  # [B, T]
    loss = -torch.minimum(unclipped, clipped)  # [B, T]
    stats = {
        "clip_frac_low": masked_mean(((ratio < 1.0 - clip_low) & (advantages < 0)).float(), mask).detach(),
        "clip_frac_high": masked_mean(((ratio > 1.0 + clip_high) & (advantages > 0)).float(), mask).detach(),
        "ratio_mean": masked_mean(ratio, mask).detach(),
    }
    return loss, stats


# ------------------------------------------------------------------------------------ reward shaping
# Applied to the verifier's rewards [G, n] before advantages, given which samples hit the length cap and
# every sample's length [G, n]; each returns (rewards [G, n], keep [G, n] bool).

def keep_truncated(rewards, truncated, lengths, penalty: float, max_new_tokens: int, buffer: int):
    """Over-long samples are scored like any other (the paper's GRPO)."""
    return rewards, torch.ones_like(truncated, dtype=torch.bool)


def mask_truncated(rewards, truncated, lengths, penalty: float, max_new_tokens: int, buffer: int):
    """Over-long samples get no loss at all (DAPO's overlong filtering, Yu et al. 2025)."""
    return rewards, ~truncated


def punish_truncated(rewards, truncated, lengths, penalty: float, max_new_tokens: int, buffer: int):
    """Over-long samples lose `penalty` from their reward (a flat form of DAPO's soft overlong punishment)."""
    return rewards - penalty * truncated.to(rewards.dtype), torch.ones_like(truncated, dtype=torch.bool)


def soft_overlong_penalty(lengths: torch.Tensor, max_new_tokens: int, buffer: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025), added to the reward: 0 up to max_new_tokens - buffer
    tokens, then falling linearly to -1 at max_new_tokens: lengths [N] -> penalties [N]."""
    start = max_new_tokens - buffer
    return torch.clamp((start - lengths.float()) / buffer, min=-1.0, max=0.0)  # [N]


def soft_punish_truncated(rewards, truncated, lengths, penalty: float, max_new_tokens: int, buffer: int):
    """Every sample longer than max_new_tokens - buffer loses up to `penalty`, linearly in its length
    (DAPO's soft overlong punishment, `soft_overlong_penalty`, scaled by `penalty`)."""
    if not 0 < buffer <= max_new_tokens:
        raise ValueError(f"--overlong-buffer {buffer} must be in 1..max_new_tokens ({max_new_tokens})")
    return (rewards + penalty * soft_overlong_penalty(lengths, max_new_tokens, buffer),
            torch.ones_like(truncated, dtype=torch.bool))


TRUNCATION = {"keep": keep_truncated, "mask": mask_truncated, "punish": punish_truncated,
              "soft": soft_punish_truncated}


def kl_penalised_rewards(rewards: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, beta: float) -> torch.Tensor:
    """KL in the reward rather than the loss: r - beta * sum_t kl_t, per sequence: [N] (as veRL's use_kl_in_reward)."""
    return rewards - beta * (kl * mask).sum(-1)
