"""GRPO's update step: group-relative advantages, then the clipped surrogate over micro-batches.

The math is in `reasoner/algorithms/grpo.py`; the loop (`loop.py`) samples the groups (`groups.py`) and
calls `update` once per step.
"""

from __future__ import annotations

import torch

from data.records import Task
from reasoner.algorithms.common import KL_ESTIMATORS, kl_penalised_rewards
from reasoner.algorithms.grpo import group_advantages, grpo_loss, weight_negatives
from reasoner.config import TrainConfig
from reasoner.training.rollout import Rollout, micro_batches, response_logprobs
from reasoner.training.batches import add_shares, prepare_update, reduce_sums, rollout_batch, shaped_rewards
from reasoner.training.groups import GroupSource
from reasoner.training.loop import Algorithm, Learner

EMPTY = {"loss": 0.0, "kl": 0.0, "entropy": float("nan"), "clip_frac_low": 0.0, "clip_frac_high": 0.0,
         "grad_norm": 0.0, "train_tokens": 0}


def grpo_update(config: TrainConfig, learner: Learner, rollout: Rollout) -> dict:
    """One GRPO update on this rank's rollout; returns detached statistics of the whole (global) batch."""
    rewards, keep = shaped_rewards(rollout, config.truncation, config.truncation_penalty)  # [G, n], [G * n]
    if config.skip_equal_groups:
        keep = keep & (rewards.std(dim=-1) > 0).repeat_interleave(rollout.group_size)
    if config.kl_in_reward and learner.reference is not None:
        kl, kl_mask = rollout_kl(learner, rollout, config.micro_batch_size, config.sampling.temperature,
                                 config.kl_estimator)  # [G * n, T]
        rewards = kl_penalised_rewards(rewards.flatten(), kl, kl_mask, config.beta).view_as(rewards)
    advantages = weight_negatives(group_advantages(rewards, config.scale_by_std), config.negative_weight).flatten()
    prepared = prepare_update(learner.tokenizer, rollout, keep, config.micro_batch_size,
                              config.sampling.max_new_tokens)
    if prepared.empty:
        return dict(EMPTY)
    prepared.batch["advantages"] = advantages[prepared.rows]
    sizes, temperature, epochs = prepared.sizes, config.sampling.temperature, config.epochs_per_batch
    pieces = prepared.pieces()
    with torch.no_grad():
        for mb in pieces:
            if learner.reference is not None:
                mb["ref_logp"] = response_logprobs(learner.reference, mb, temperature)[0]
            if epochs > 1:
                mb["old_logp"] = response_logprobs(learner.model, mb, temperature)[0]
    learner.model.train()
    totals: dict[str, float] = {"kl": 0.0, "entropy": 0.0}
    for epoch in range(epochs):
        for i, mb in enumerate(pieces):
            logp, entropy = response_logprobs(learner.model, mb, temperature, with_entropy=epoch == 0)
            old_logp = mb["old_logp"] if "old_logp" in mb else logp.detach()
            loss, stats = grpo_loss(logp, old_logp, mb.get("ref_logp"), mb["advantages"], mb["response_mask"], sizes,
                                    config.clip_low, config.clip_high, 0.0 if config.kl_in_reward else config.beta,
                                    config.kl_estimator, config.aggregation)
            learner.engine.backward(loss, last=i == len(pieces) - 1)
            totals["loss"] = totals.get("loss", 0.0) + loss.item() / epochs
            add_shares(totals, stats, mb["response_mask"].sum().item() / sizes.tokens / epochs)
            if entropy is not None:
                totals["entropy"] += float((entropy * mb["response_mask"]).sum()) / sizes.tokens
        grad_norm = learner.engine.step()
    learner.model.eval()
    totals = reduce_sums(totals)  # shares of the global batch: their sums over ranks are the global values
    return {**totals, "grad_norm": grad_norm,
            "train_tokens": float(prepared.batch["response_mask"].sum()) * epochs}


@torch.no_grad()
def rollout_kl(learner: Learner, rollout: Rollout, micro_batch_size: int, temperature: float,
               estimator: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token KL estimate [N, T] of every sample to the reference, and the response mask [N, T]."""
    batch = rollout_batch(learner.tokenizer, rollout)
    pieces = list(micro_batches(batch, micro_batch_size))
    logp = torch.cat([response_logprobs(learner.model, mb, temperature)[0] for mb in pieces])
    ref_logp = torch.cat([response_logprobs(learner.reference, mb, temperature)[0] for mb in pieces])
    return KL_ESTIMATORS[estimator](logp, ref_logp), batch["response_mask"]


def grpo_algorithm(config: TrainConfig, model, tasks: list[Task]) -> Algorithm:
    """GRPO for the loop: sampled groups with dynamic sampling, and `grpo_update`."""
    return Algorithm("grpo", GroupSource(config, tasks, config.dynamic_sampling_rounds),
                     lambda learner, rollout: grpo_update(config, learner, rollout), needs_reference=config.beta > 0,
                     expected_steps=config.steps)
