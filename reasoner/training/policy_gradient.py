"""The policy-gradient update steps without a critic: GRPO, RLOO, REINFORCE++ (and its -baseline), GSPO,
CISPO. Each is an advantage estimator and a policy loss, picked by name from `VARIANTS`:

    --algo                 advantage                                          loss
    grpo                   (r - group mean) / group std                       clipped surrogate per token
    rloo                   r - mean of the group's other samples              clipped surrogate per token
    reinforce++            returns-to-go of r - beta * kl_t, whitened over    clipped surrogate per token
                           the batch's tokens (all-equal groups train too)
    reinforce++-baseline   the same, from r - group mean                      clipped surrogate per token
    gspo                   as grpo                                            clipped sequence-level ratio
    cispo                  as grpo                                            REINFORCE, clipped IS weight

The math is in `reasoner/algorithms/`; the loop (`loop.py`) samples the groups (`groups.py`) and calls
`policy_gradient_update` once per step. Every loss can be corrected for the gap between the sampler and
the trainer (`--tis-cap`), and every update records that gap (`rollout_logprob_kl`, `rollout_ratio_max`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from data.records import Task
from reasoner.algorithms.cispo import cispo_loss
from reasoner.algorithms.common import AGGREGATIONS, KL_ESTIMATORS, kl_penalised_rewards, masked_mean
from reasoner.algorithms.grpo import group_advantages, grpo_loss, weight_negatives
from reasoner.algorithms.gspo import gspo_loss
from reasoner.algorithms.mismatch import truncated_importance_weights, truncated_sequence_weights
from reasoner.algorithms.reinforce_pp import group_baseline_scores, reinforce_pp_advantages
from reasoner.algorithms.rloo import leave_one_out_advantages
from reasoner.config import TrainConfig
from reasoner.training import distributed
from reasoner.training.batches import (add_shares, global_moments, mismatch_shares, prepare_update, reduce_sums,
                                       rollout_batch, shaped_rewards)
from reasoner.training.groups import GroupPlan, GroupSource
from reasoner.training.loop import Algorithm, Learner
from reasoner.training.rollout import Rollout, micro_batches, response_logprobs


@dataclass(frozen=True)
class Variant:
    advantage: str  # key of ADVANTAGES
    loss: str  # key of LOSSES
    group_relative: bool  # an all-equal group has zero advantages: skipped, and refilled by dynamic sampling


VARIANTS = {
    "grpo": Variant("group", "clip", True),
    "rloo": Variant("leave_one_out", "clip", True),
    "reinforce++": Variant("batch_returns", "clip", False),
    "reinforce++-baseline": Variant("group_baseline_returns", "clip", True),
    "gspo": Variant("group", "gspo", True),
    "cispo": Variant("group", "cispo", True),
}
TOKEN_LEVEL = ("batch_returns", "group_baseline_returns")  # advantages [N, T], KL paid in the reward


@dataclass(frozen=True)
class Settings:
    """What a policy-gradient update reads, taken from the training config once (`Settings.of`)."""

    variant: Variant
    temperature: float
    max_new_tokens: int
    micro_batch_size: int
    epochs: int
    truncation: str
    truncation_penalty: float
    overlong_buffer: int
    skip_equal_groups: bool
    scale_by_std: bool
    negative_weight: float
    beta: float
    kl_estimator: str
    kl_in_reward: bool
    clip_low: float
    clip_high: float
    gspo_clip_low: float
    gspo_clip_high: float
    aggregation: str
    tis_cap: float

    @classmethod
    def of(cls, algo: str, c: TrainConfig) -> Settings:
        return cls(VARIANTS[algo], c.sampling.temperature, c.sampling.max_new_tokens, c.micro_batch_size,
                   c.epochs_per_batch, c.truncation, c.truncation_penalty, c.overlong_buffer, c.skip_equal_groups,
                   c.scale_by_std, c.negative_weight, c.beta, c.kl_estimator, c.kl_in_reward, c.clip_low, c.clip_high,
                   c.gspo_clip_low, c.gspo_clip_high, c.aggregation, c.tis_cap)

    @property
    def kl_in_loss(self) -> float:
        """The KL weight in the loss: 0 where the KL is paid in the reward instead."""
        return 0.0 if self.kl_in_reward or self.variant.advantage in TOKEN_LEVEL else self.beta


EMPTY = {"loss": 0.0, "kl": 0.0, "entropy": float("nan"), "grad_norm": 0.0, "train_tokens": 0}


# ------------------------------------------------------------------------------------ advantages
# Each: (settings, rewards [G, n] after truncation shaping and KL-in-reward, the rows that train [N],
# the batch [N, T] with old_logp / ref_logp where the estimator needs them, global sizes) -> [N] or [N, T].

def group_relative(s: Settings, rewards, rows, batch, sizes):
    return weight_negatives(group_advantages(rewards, s.scale_by_std), s.negative_weight).flatten()[rows]


def leave_one_out(s: Settings, rewards, rows, batch, sizes):
    return weight_negatives(leave_one_out_advantages(rewards), s.negative_weight).flatten()[rows]


def batch_returns(s: Settings, rewards, rows, batch, sizes):
    mask = batch["response_mask"]
    kl = KL_ESTIMATORS[s.kl_estimator](batch["old_logp"], batch["ref_logp"]) if "ref_logp" in batch else None
    return reinforce_pp_advantages(rewards.flatten()[rows], kl, mask, s.beta,
                                   lambda x, m: global_moments(x, m, sizes.tokens))


def group_baseline_returns(s: Settings, rewards, rows, batch, sizes):
    return batch_returns(s, group_baseline_scores(rewards), rows, batch, sizes)


ADVANTAGES = {"group": group_relative, "leave_one_out": leave_one_out, "batch_returns": batch_returns,
              "group_baseline_returns": group_baseline_returns}


# ------------------------------------------------------------------------------------ losses
# Each: (settings, micro-batch with log-probs, importance weights or None, sizes) -> (loss, stats).

def clip_loss(s: Settings, mb: dict, logp, old_logp, weights, sizes):
    return grpo_loss(logp, old_logp, mb.get("ref_logp"), mb["advantages"], mb["response_mask"], sizes, s.clip_low,
                     s.clip_high, s.kl_in_loss, s.kl_estimator, s.aggregation, weights)


def with_kl(s: Settings, mb: dict, logp, sizes, loss, stats):
    """GSPO's and CISPO's loss plus beta times the aggregated KL to the reference (where there is one)."""
    if "ref_logp" not in mb:
        return loss, stats
    kl = KL_ESTIMATORS[s.kl_estimator](logp, mb["ref_logp"])  # [B, T]
    stats["kl"] = masked_mean(kl, mb["response_mask"]).detach()
    return loss + s.kl_in_loss * AGGREGATIONS[s.aggregation](kl, mb["response_mask"], sizes), stats


def sequence_clip_loss(s: Settings, mb: dict, logp, old_logp, weights, sizes):
    mask = mb["response_mask"]
    if weights is not None:
        weights = truncated_sequence_weights(old_logp, mb["sampler_logp"], mask, s.tis_cap)
    loss, stats = gspo_loss(logp, old_logp, mb["advantages"], mask, sizes, s.gspo_clip_low, s.gspo_clip_high, weights)
    return with_kl(s, mb, logp, sizes, loss, stats)


def clipped_weight_loss(s: Settings, mb: dict, logp, old_logp, weights, sizes):
    loss, stats = cispo_loss(logp, old_logp, mb["advantages"], mb["response_mask"], sizes, 1.0, s.clip_high, weights)
    return with_kl(s, mb, logp, sizes, loss, stats)


LOSSES = {"clip": clip_loss, "gspo": sequence_clip_loss, "cispo": clipped_weight_loss}


# ------------------------------------------------------------------------------------ the update step

def policy_gradient_update(s: Settings, learner: Learner, rollout: Rollout) -> dict:
    """One update on this rank's rollout; returns detached statistics of the whole (global) batch."""
    v = s.variant
    rewards, keep = shaped_rewards(rollout, s.truncation, s.truncation_penalty, s.max_new_tokens,
                                   s.overlong_buffer)  # [G, n], [G * n]
    if s.skip_equal_groups and v.group_relative:
        keep = keep & (rewards.std(dim=-1) > 0).repeat_interleave(rollout.group_size)
    if s.kl_in_reward and learner.reference is not None and v.advantage not in TOKEN_LEVEL:
        kl, kl_mask = rollout_kl(learner, rollout, s.micro_batch_size, s.temperature, s.kl_estimator)  # [G * n, T]
        rewards = kl_penalised_rewards(rewards.flatten(), kl, kl_mask, s.beta).view_as(rewards)
    prepared = prepare_update(learner.tokenizer, rollout, keep, s.micro_batch_size, s.max_new_tokens)
    if prepared.empty:
        return dict(EMPTY)
    batch, sizes = prepared.batch, prepared.sizes
    with torch.no_grad():
        pieces = prepared.pieces()
        if learner.reference is not None:
            batch["ref_logp"] = prepared.join(response_logprobs(learner.reference, mb, s.temperature, dtype=learner.autocast)[0] for mb in pieces)
        if v.advantage in TOKEN_LEVEL and learner.reference is not None:  # the advantages pay the KL
            batch["old_logp"] = prepared.join(response_logprobs(learner.model, mb, s.temperature, dtype=learner.autocast)[0] for mb in pieces)
    batch["advantages"] = ADVANTAGES[v.advantage](s, rewards, prepared.rows, batch, sizes)
    pieces = prepared.pieces()

    learner.model.train()
    totals: dict[str, float] = {"kl": 0.0, "entropy": 0.0}
    ratio_max = 0.0
    for epoch in range(s.epochs):
        for i, mb in enumerate(pieces):
            mask = mb["response_mask"]
            logp, entropy = response_logprobs(learner.model, mb, s.temperature, epoch == 0, learner.autocast)
            if "old_logp" not in mb:  # the first epoch's log-probs: the trainer before this update, kept for the next
                mb["old_logp"] = logp.detach()
            old_logp = mb["old_logp"]
            share = mask.sum().item() / sizes.tokens
            if epoch == 0:
                mismatch, worst = mismatch_shares(old_logp, mb["sampler_logp"], mask, sizes.tokens)
                add_shares(totals, mismatch, 1.0)
                ratio_max = max(ratio_max, worst)
            weights = truncated_importance_weights(old_logp, mb["sampler_logp"], s.tis_cap) if s.tis_cap else None
            loss, stats = LOSSES[v.loss](s, mb, logp, old_logp, weights, sizes)
            learner.engine.backward(loss, last=i == len(pieces) - 1)
            totals["loss"] = totals.get("loss", 0.0) + loss.item() / s.epochs
            add_shares(totals, stats, share / s.epochs)
            if entropy is not None:
                totals["entropy"] += float((entropy * mask).sum()) / sizes.tokens
        grad_norm = learner.engine.step()
    learner.model.eval()
    totals = reduce_sums(totals)  # shares of the global batch: their sums over ranks are the global values
    return {**totals, "rollout_ratio_max": distributed.all_reduce([ratio_max], "max")[0], "grad_norm": grad_norm,
            "train_tokens": float(batch["response_mask"].sum()) * s.epochs}


@torch.no_grad()
def rollout_kl(learner: Learner, rollout: Rollout, micro_batch_size: int, temperature: float,
               estimator: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token KL estimate [N, T] of every sample to the reference, and the response mask [N, T]."""
    batch = rollout_batch(learner.tokenizer, rollout)
    pieces = list(micro_batches(batch, micro_batch_size))
    logp = torch.cat([response_logprobs(learner.model, mb, temperature, dtype=learner.autocast)[0] for mb in pieces])
    ref_logp = torch.cat([response_logprobs(learner.reference, mb, temperature, dtype=learner.autocast)[0] for mb in pieces])
    return KL_ESTIMATORS[estimator](logp, ref_logp), batch["response_mask"]


def policy_gradient_algorithm(algo: str, config: TrainConfig, model, tasks: list[Task]) -> Algorithm:
    """A critic-free policy-gradient algorithm for the loop: sampled groups (with dynamic sampling where the
    advantage is group-relative) and `policy_gradient_update`."""
    settings = Settings.of(algo, config)
    return Algorithm(algo, GroupSource(GroupPlan.of(config, algo, settings.variant.group_relative), tasks),
                     lambda learner, rollout: policy_gradient_update(settings, learner, rollout),
                     needs_reference=config.beta > 0, expected_steps=config.steps)
