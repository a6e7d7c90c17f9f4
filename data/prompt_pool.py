"""Online curation: the pool of training prompts, kept in step with what the policy can already do.

Offline curation (`reasoner curate`) picks prompts with mid-range pass rates once; as the policy improves,
prompts it now always solves give all-equal groups and no gradient. The pool follows it:

- each prompt's pass rate is tracked from its training groups (the latest group's c of n);
- a prompt whose group was all correct retires: it is no longer drawn;
- every few steps the trainer re-estimates the retired prompts with a few fresh samples, and those below
  `return_below` return to the pool;
- the trainer replaces all-equal groups by groups for fresh prompts (dynamic sampling, as in DAPO), which
  draws them with `next` like any other prompt.

The pool is plain data: its whole state is a JSON-able dict saved in each checkpoint. Every rank holds the
same pool and feeds it the same (gathered) observations in the same order, so every rank draws the same
prompts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from data.records import Task


@dataclass
class PromptPool:
    """Endless shuffled passes over the active (not retired) tasks; `state()` is everything to resume."""

    tasks: list[Task]
    seed: int
    retire_solved: bool = True
    epoch: int = 0
    position: int = 0
    pass_rates: dict[str, list[int]] = field(default_factory=dict)  # id -> [c, n] of the latest observation
    retired: dict[str, int] = field(default_factory=dict)  # id -> step at which it retired (or was re-checked)

    def _order(self) -> list[int]:
        return random.Random(f"{self.seed}/{self.epoch}").sample(range(len(self.tasks)), len(self.tasks))

    @property
    def active(self) -> int:
        return len(self.tasks) - len(self.retired)

    def next(self, count: int) -> list[Task]:
        """The next `count` active tasks in this epoch's order (all tasks if every one has retired)."""
        skip_retired = self.active > 0
        picked: list[Task] = []
        order = self._order()
        while len(picked) < count:
            if self.position >= len(order):
                self.epoch, self.position = self.epoch + 1, 0
                order = self._order()
            task = self.tasks[order[self.position]]
            self.position += 1
            if not (skip_retired and task.id in self.retired):
                picked.append(task)
        return picked

    def observe(self, results: list[tuple[str, int, int]], step: int) -> int:
        """Record (task id, correct, samples) of training groups; retire the all-correct. Returns how many retired."""
        newly = 0
        for task_id, correct, n in results:
            self.pass_rates[task_id] = [correct, n]
            if self.retire_solved and n > 0 and correct == n and task_id not in self.retired:
                self.retired[task_id] = step
                newly += 1
        return newly

    def due_for_check(self, limit: int) -> list[Task]:
        """Up to `limit` retired tasks, those retired (or re-checked) longest ago first."""
        by_id = {t.id: t for t in self.tasks}
        ids = sorted(self.retired, key=lambda i: (self.retired[i], i))
        return [by_id[i] for i in ids[:limit] if i in by_id]

    def reestimate(self, results: list[tuple[str, int, int]], return_below: float, step: int) -> int:
        """Fresh estimates of retired tasks: those with pass rate below `return_below` return. Returns how many."""
        returned = 0
        for task_id, correct, n in results:
            self.pass_rates[task_id] = [correct, n]
            if task_id not in self.retired:
                continue
            if n and correct / n < return_below:
                del self.retired[task_id]
                returned += 1
            else:
                self.retired[task_id] = step
        return returned

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position,
                "pool": {"pass_rates": dict(self.pass_rates), "retired": dict(self.retired)}}

    def load_state(self, state: dict) -> None:
        """Restore from `state()` (a checkpoint's trainer state; older ones have only epoch and position)."""
        self.epoch, self.position = state.get("epoch", 0), state.get("position", 0)
        pool = state.get("pool") or {}
        self.pass_rates = {k: list(v) for k, v in pool.get("pass_rates", {}).items()}
        self.retired = dict(pool.get("retired", {}))


def refill_plan(equal_by_rank: list[list[bool]], fresh: list[Task]) -> dict[int, dict[int, Task]]:
    """Which fresh task replaces which all-equal group: {rank: {local group index: task}}.

    Rank r holds the groups at global positions r, r + W, r + 2W, ... (the trainer's `[rank::world]`);
    the all-equal groups, in global order, take the fresh tasks in order.
    """
    world = len(equal_by_rank)
    equal = sorted(r + world * i for r, flags in enumerate(equal_by_rank) for i, flag in enumerate(flags) if flag)
    plan: dict[int, dict[int, Task]] = {r: {} for r in range(world)}
    for position, task in zip(equal, fresh):
        plan[position % world][position // world] = task
    return plan
