"""GRPO's and PPO's batches: groups of samples of the current policy, verified, with the pool kept current.

A step draws `prompts_per_step` prompts from the `PromptPool` (data/prompt_pool.py), each rank takes its
share (a group never spans ranks), samples `group_size` responses per prompt and verifies them, with
`spare_prompts` more drawn and sampled alongside. All-equal groups are then replaced by spare groups that
are not, then by fresh ones (dynamic sampling, `dynamic_sampling.py`), and every
`reestimate_every` steps the retired prompts are re-estimated. Every seed derives from (seed, step).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from data.prompt_pool import PromptPool
from data.records import Task
from reasoner.training import distributed
from reasoner.config import SamplingConfig, TrainConfig
from reasoner.monitoring.metrics import length_stats, tool_stats
from reasoner.training.rollout import Rollout, verify_groups
from reasoner.training.dynamic_sampling import reestimate_retired, refill_equal_groups, select_groups
from reasoner.training.loop import Learner, step_seed

log = logging.getLogger("reasoner.train")


@dataclass(frozen=True)
class GroupPlan:
    """What a `GroupSource` reads, taken from the training config once (`GroupPlan.of`)."""

    steps: int
    prompts_per_step: int
    group_size: int
    sampling: SamplingConfig
    seed: int
    retire_solved: bool
    refill_rounds: int  # dynamic sampling's rounds (0: off)
    spare_prompts: int  # drawn and sampled beyond prompts_per_step, to replace all-equal groups
    reestimate_every: int
    reestimate_prompts: int
    reestimate_samples: int
    return_below: float
    zero_stage: int

    @classmethod
    def of(cls, c: TrainConfig, algo: str, dynamic_sampling: bool) -> GroupPlan:
        """With `dynamic_sampling` false (an algorithm that learns from all-equal groups too) no spare is
        drawn and no group refilled, whatever the config says (and the log says so)."""
        if not dynamic_sampling and (c.dynamic_sampling_rounds or c.spare_prompts):
            log.info("train: %s learns from all-equal groups too: dynamic sampling off (--dynamic-sampling-rounds "
                     "%d and --spare-prompts %d given, 0 used)", algo, c.dynamic_sampling_rounds, c.spare_prompts)
        return cls(c.steps, c.prompts_per_step, c.group_size, c.sampling, c.seed, c.retire_solved,
                   c.dynamic_sampling_rounds if dynamic_sampling else 0, c.spare_prompts if dynamic_sampling else 0,
                   c.reestimate_every, c.reestimate_prompts, c.reestimate_samples, c.return_below, c.zero_stage)


class GroupSource:
    """The loop's `Source` for on-policy algorithms: this rank's `Rollout` of each step."""

    def __init__(self, plan: GroupPlan, tasks: list[Task]):
        self.plan = plan
        self.pool = PromptPool(tasks, plan.seed, plan.retire_solved)

    def start(self, learner: Learner, generator, state: dict | None) -> None:
        world = distributed.world_size()
        if self.plan.spare_prompts < 0:
            raise ValueError(f"train: --spare-prompts must be 0 or more, got {self.plan.spare_prompts}")
        if self.plan.prompts_per_step % world:
            raise ValueError(f"train: prompts-per-step {self.plan.prompts_per_step} must be a multiple of the "
                             f"{world} processes, so that every group stays on one rank")
        self.model, self.generator = learner.model, generator
        if state is not None:
            self.pool.load_state(state)

    def finished(self, step: int) -> bool:
        return step >= self.plan.steps

    def state(self) -> dict:
        return self.pool.state()

    def next(self, step: int) -> tuple[Rollout, dict]:
        c, rank, world = self.plan, distributed.rank(), distributed.world_size()
        t0 = time.time()
        params = c.sampling.params(step_seed(c.seed, step) + rank)
        pool_stats = {}
        if c.reestimate_every > 0 and step > 0 and step % c.reestimate_every == 0:
            pool_stats = reestimate_retired(self.generator, self.model, self.pool, step, params, c.reestimate_prompts,
                                            c.reestimate_samples, c.return_below, c.zero_stage)
        drawn = self.pool.next(c.prompts_per_step + c.spare_prompts)  # the same draw on every rank
        tasks, spares = drawn[:c.prompts_per_step][rank::world], drawn[c.prompts_per_step:][rank::world]
        with distributed.gathered_parameters(self.model, c.zero_stage):
            groups = self.generator.generate([t.prompt for t in tasks + spares], c.group_size, params)
        t_generate = time.time()
        both = verify_groups(tasks + spares, groups)
        rollout = select_groups(both, list(range(len(tasks))))
        spare = select_groups(both, list(range(len(tasks), len(both.tasks)))) if c.spare_prompts else None
        rollout, refills = refill_equal_groups(self.generator, self.model, self.pool, rollout, step, params,
                                               c.refill_rounds, c.zero_stage, spare)
        t_verify = time.time()
        everyone = merge_rollouts(distributed.all_gather_objects(rollout))
        generated = distributed.all_reduce([float(both.lengths.sum())])[0]  # the spares' tokens too
        return rollout, {**rollout_metrics(everyone), **refills, **pool_stats,
                         "time_generate_s": t_generate - t0, "time_verify_s": t_verify - t_generate,
                         "generate_tokens_per_s": generated / max(1e-9, t_generate - t0)}


def merge_rollouts(parts: list[Rollout]) -> Rollout:
    """The rollouts of every rank as one (for metrics that must be global)."""
    if len(parts) == 1:
        return parts[0]
    return Rollout([t for r in parts for t in r.tasks], [s for r in parts for s in r.samples],
                   [v for r in parts for v in r.verdicts], parts[0].group_size)


def rollout_metrics(rollout: Rollout) -> dict:
    """Rewards, lengths, truncation and verifier health of a step's groups (and tool use, with tools)."""
    correct = np.array([v.correct for v in rollout.verdicts])
    truncated = np.array([s.truncated for s in rollout.samples])
    rewards = rollout.rewards
    with_tools = rollout.samples[0].loss_mask is not None  # the tool generator marks every sample
    return {
        **(tool_stats([s.tool_calls for s in rollout.samples], correct) if with_tools else {}),
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "accuracy": float(correct.mean()),
        **length_stats(rollout.lengths, correct, truncated),
        "equal_reward_groups": float((rewards.std(dim=-1) == 0).float().mean()),
        "verifier_timeout_rate": float(np.mean([v.timed_out for v in rollout.verdicts])),
        "no_answer_rate": float(np.mean([v.no_answer for v in rollout.verdicts])),
    }
