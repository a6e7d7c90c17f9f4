"""Curation by pass rate: keep the prompts the current policy sometimes solves.

GRPO learns nothing from a group whose rewards are all equal, so prompts the policy always or never
solves are wasted compute. The pass rate of each prompt is estimated from k samples, with a Wilson score
interval to say how sure the estimate is.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

from data.records import Task


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (Wilson 1927); sane at 0/n and n/n, unlike Wald's."""
    if n == 0:
        return (0.0, 1.0)
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def select_band(tasks: list[Task], pass_rates: list[float], low: float, high: float, max_prompts: int = 0,
                seed: int = 0) -> list[Task]:
    """Tasks whose pass rate is in [low, high]; with a cap, an equal share per family (the rest refilled)."""
    kept_by_family: dict[str, list[Task]] = defaultdict(list)
    for task, rate in zip(tasks, pass_rates):
        if low <= rate <= high:
            kept_by_family[task.family].append(task)
    if not max_prompts:
        return [t for group in kept_by_family.values() for t in group]
    rng = random.Random(seed)
    pools = {fam: rng.sample(group, len(group)) for fam, group in sorted(kept_by_family.items())}
    chosen: list[Task] = []
    while len(chosen) < max_prompts and any(pools.values()):
        for fam in list(pools):  # round-robin over families keeps them balanced while each lasts
            if pools[fam] and len(chosen) < max_prompts:
                chosen.append(pools[fam].pop())
    return chosen


def balanced_subset(tasks: list[Task], count: int, seed: int = 0) -> list[Task]:
    """At most `count` tasks drawn at random, an equal share per family while each family lasts."""
    if not count or count >= len(tasks):
        return list(tasks)
    return select_band(tasks, [0.0] * len(tasks), 0.0, 0.0, max_prompts=count, seed=seed)


def histogram(pass_rates: list[float], bins: int = 10) -> list[dict]:
    """Counts of pass rates in equal-width bins over [0, 1] (the last bin includes 1.0)."""
    counts = [0] * bins
    for rate in pass_rates:
        counts[min(bins - 1, int(rate * bins))] += 1
    return [{"low": i / bins, "high": (i + 1) / bins, "count": c} for i, c in enumerate(counts)]


def format_histogram(rows: list[dict], width: int = 40) -> str:
    top = max(1, max(r["count"] for r in rows))
    return "\n".join(f"  [{r['low']:.1f}, {r['high']:.1f}{']' if r['high'] >= 1 else ')'} "
                     f"{'#' * round(width * r['count'] / top):<{width}} {r['count']}" for r in rows)
