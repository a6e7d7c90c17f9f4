"""Dynamic sampling in the training loop: all-equal groups replaced by spare groups sampled with the batch, then
by fresh ones; retired prompts re-estimated.

The pool itself (which prompts are drawn, which retired, the state saved in checkpoints) is
`data.prompt_pool.PromptPool`; this module does the generation and verification it needs. Whatever changes the
pool is gathered from every rank first and applied in rank order, so the pool stays identical on all ranks.
"""

from __future__ import annotations

import torch

from data.prompt_pool import PromptPool, refill_plan
from reasoner.training import distributed
from reasoner.config import SamplingParams
from reasoner.training.rollout import Rollout, verify_groups

ROUND_SEED_STRIDE = 104_729  # a refill round's sampling seed: the step's seed plus round x this


def group_results(rollout: Rollout | None) -> list[tuple[str, int, int]]:
    """(task id, correct, samples) of each group."""
    if rollout is None:
        return []
    n = rollout.group_size
    return [(t.id, sum(v.correct for v in rollout.verdicts[g * n:(g + 1) * n]), n) for g, t in enumerate(rollout.tasks)]


def gathered_results(rollout: Rollout | None) -> list[tuple[str, int, int]]:
    """`group_results` of every rank, in rank order (the same list on every rank)."""
    return [row for part in distributed.all_gather_objects(group_results(rollout)) for row in part]


def sample_groups(generator, model, zero_stage: int, tasks, n: int, params: SamplingParams) -> Rollout | None:
    """Generate and verify n samples per task. Every rank calls it (ZeRO-3 gathers weights collectively),
    with or without tasks of its own."""
    with distributed.gathered_parameters(model, zero_stage):
        groups = generator.generate([t.prompt for t in tasks], n, params) if tasks else []
    return verify_groups(tasks, groups) if tasks else None


def equal_flags(rollout: Rollout) -> list[bool]:
    """Which groups have all-equal rewards (no gradient for a group-relative advantage)."""
    return (rollout.rewards.std(dim=-1) == 0).tolist()


def select_groups(rollout: Rollout, groups: list[int]) -> Rollout:
    """The rollout of the given groups, in that order."""
    n = rollout.group_size
    return Rollout([rollout.tasks[g] for g in groups], [s for g in groups for s in rollout.samples[g * n:(g + 1) * n]],
                   [v for g in groups for v in rollout.verdicts[g * n:(g + 1) * n]], n)


def replace_groups(rollout: Rollout, fresh: Rollout, slots: list[int]) -> Rollout:
    """The rollout with group slots[j] replaced by fresh group j."""
    n = rollout.group_size
    tasks, samples, verdicts = list(rollout.tasks), list(rollout.samples), list(rollout.verdicts)
    for j, g in enumerate(slots):
        tasks[g] = fresh.tasks[j]
        samples[g * n:(g + 1) * n] = fresh.samples[j * n:(j + 1) * n]
        verdicts[g * n:(g + 1) * n] = fresh.verdicts[j * n:(j + 1) * n]
    return Rollout(tasks, samples, verdicts, n)


def take_spares(rollout: Rollout, spare: Rollout) -> tuple[Rollout, int]:
    """The rollout with its all-equal groups replaced, in order, by the spare groups that are not all-equal
    (in draw order); and how many were used."""
    slots = [g for g, equal in enumerate(equal_flags(rollout)) if equal]
    usable = [g for g, equal in enumerate(equal_flags(spare)) if not equal][:len(slots)]
    if not usable:
        return rollout, 0
    return replace_groups(rollout, select_groups(spare, usable), slots[:len(usable)]), len(usable)


def refill_equal_groups(generator, model, pool: PromptPool, rollout: Rollout, step: int, params: SamplingParams,
                        rounds: int, zero_stage: int = 2, spare: Rollout | None = None) -> tuple[Rollout, dict]:
    """Track pass rates and retire solved prompts from this step's groups (and the spare groups drawn with
    them), replace all-equal groups by spare groups that are not, then by groups for fresh prompts, for up
    to `rounds` rounds (DAPO's dynamic sampling). Returns the rollout to train on and the step's pool
    metrics. Spares stay on their rank; with spares, every rank passes a rollout (maybe of no groups)."""
    rank = distributed.rank()
    retired = pool.observe(gathered_results(rollout), step)
    equal_by_rank = distributed.all_gather_objects(equal_flags(rollout))
    first_equal = sum(map(sum, equal_by_rank)) / max(1, sum(map(len, equal_by_rank)))
    spares_used = 0
    if spare is not None:
        retired += pool.observe(gathered_results(spare), step)
        rollout, used = take_spares(rollout, spare)
        spares_used = sum(distributed.all_gather_objects(used))
    refills = 0
    for round_ in range(1, rounds + 1):
        equal_by_rank = distributed.all_gather_objects(equal_flags(rollout))
        count = sum(map(sum, equal_by_rank))
        if count == 0:
            break
        plan = refill_plan(equal_by_rank, pool.next(count))[rank]
        slots = sorted(plan)
        round_params = params.with_seed(params.seed + round_ * ROUND_SEED_STRIDE)
        fresh = sample_groups(generator, model, zero_stage, [plan[g] for g in slots], rollout.group_size, round_params)
        retired += pool.observe(gathered_results(fresh), step)
        if fresh is not None:
            rollout = replace_groups(rollout, fresh, slots)
        refills += count
    return rollout, {"dynamic_refills": refills, "equal_reward_groups_drawn": first_equal, "spare_groups_used": spares_used,
                     "pool_retired_now": retired, "pool_active": pool.active, "pool_retired": len(pool.retired)}


@torch.no_grad()
def reestimate_retired(generator, model, pool: PromptPool, step: int, params: SamplingParams, prompts: int,
                       samples: int, return_below: float, zero_stage: int = 2) -> dict:
    """`samples` fresh samples of each of the `prompts` retired prompts checked longest ago; those whose
    pass rate is below `return_below` return to the pool."""
    due = pool.due_for_check(prompts)
    if not due:
        return {}
    rank, world = distributed.rank(), distributed.world_size()
    fresh = sample_groups(generator, model, zero_stage, due[rank::world], samples, params)
    returned = pool.reestimate(gathered_results(fresh), return_below, step)
    return {"pool_reestimated": len(due), "pool_returned": returned}
