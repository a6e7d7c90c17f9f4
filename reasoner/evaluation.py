"""Evaluation: the unbiased pass@k of verified samples (`reasoner.sampling.sample_and_verify`), and reports.

pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code") is the probability that
at least one of k samples drawn without replacement from the n taken is correct:
1 - C(n-c, k) / C(n, k), computed as a product so that large n never overflows.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from reasoner.monitoring.metrics import tool_stats
from reasoner.sampling import TaskResult

log = logging.getLogger(__name__)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - prod_{i=n-c+1}^{n} (1 - k / i)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def bootstrap_interval(values: Sequence[float], rounds: int = 1000, level: float = 0.95, seed: int = 0):
    """Percentile bootstrap confidence interval of the mean of per-task values, resampling tasks."""
    if len(values) == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=float)
    means = arr[rng.integers(0, len(arr), size=(rounds, len(arr)))].mean(axis=1)
    alpha = (1 - level) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def per_task_change(start_rows: list[dict], final_rows: list[dict], key: str) -> dict[str, float]:
    """Task id -> final minus start value of `key` (e.g. "pass@1"), from the `tasks` rows of two `summarise`
    reports of the same tasks."""
    start = {row["id"]: row[key] for row in start_rows}
    final = {row["id"]: row[key] for row in final_rows}
    if start.keys() != final.keys():
        raise ValueError(f"{key} change: the two evaluations cover different tasks "
                         f"({len(start.keys() ^ final.keys())} ids in only one)")
    return {task: final[task] - start[task] for task in start}


def paired_change(start_rows: list[dict], final_rows: list[dict], key: str) -> dict:
    """The mean change in `key` from one evaluation to another of the same tasks, with a bootstrap 95%
    interval that resamples tasks in pairs (the same task before and after).

    The interval covers which tasks and samples the evaluations drew, not what a different training seed
    would have given: two runs' changes can differ by more than their intervals suggest.
    """
    differences = list(per_task_change(start_rows, final_rows, key).values())
    return {key: float(np.mean(differences)) if differences else float("nan"),
            f"{key}_ci95": list(bootstrap_interval(differences))}


def majority_correct(result: TaskResult) -> bool:
    """maj@n: is the most common extracted answer (among those found) a correct one?"""
    answers = Counter(v.extracted for v in result.verdicts if v.extracted is not None)
    if not answers:
        return False
    top, _ = answers.most_common(1)[0]
    return any(v.correct for v in result.verdicts if v.extracted == top)


def summarise(results: list[TaskResult], ks: list[int]) -> dict:
    """The `reasoner eval` report (README, "What `reasoner run` does"): per-task n, c and pass@k, the overall
    means, and breakdowns by group."""
    ks = [k for k in ks if all(k <= r.n for r in results)]
    rows = []
    for r in results:
        row = {"id": r.task.id, "family": r.task.family, "n": r.n, "c": r.c}
        row.update({f"pass@{k}": pass_at_k(r.n, r.c, k) for k in ks})
        row["maj@n"] = float(majority_correct(r))
        rows.append(row)

    def aggregate(subset: list[dict]) -> dict:
        out: dict = {"tasks": len(subset)}
        for k in ks:
            values = [row[f"pass@{k}"] for row in subset]
            out[f"pass@{k}"] = float(np.mean(values))
            out[f"pass@{k}_ci95"] = list(bootstrap_interval(values))
        out["maj@n"] = float(np.mean([row["maj@n"] for row in subset]))
        return out

    by: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row, r in zip(rows, results):
        by["family"][r.task.family].append(row)
        for key in ("subject", "level", "kind"):
            if key in r.task.meta:
                by[key][str(r.task.meta[key])].append(row)
    breakdowns = {key: {name: aggregate(sub) for name, sub in sorted(groups.items())} for key, groups in by.items()}
    stops = Counter(s.finish_reason for r in results for s in r.samples)
    lengths = [len(s.token_ids) for r in results for s in r.samples]
    report = {
        "tasks": rows,
        "overall": aggregate(rows),
        "by": breakdowns,
        "samples": {"total": len(lengths), "truncated": stops.get("length", 0),
                    "response_length_mean": float(np.mean(lengths)) if lengths else 0.0},
    }
    if results and results[0].samples and results[0].samples[0].loss_mask is not None:  # sampled with --tools python
        def tools_of(part: list[TaskResult]) -> dict:
            correct = np.array([v.correct for r in part for v in r.verdicts])
            return tool_stats([s.tool_calls for r in part for s in r.samples], correct)

        report["tools"] = tools_of(results)
        for family in breakdowns.get("family", {}):
            breakdowns["family"][family]["tools"] = tools_of([r for r in results if r.task.family == family])
    return report


def sample_records(results: list[TaskResult]) -> list[dict]:
    """Every sample with its verdict, one JSON object each (with the status of each tool call, with tools)."""
    return [
        {"id": r.task.id, "sample": j, "response": s.text, "finish_reason": s.finish_reason,
         "tokens": len(s.token_ids), "correct": v.correct, "reward": v.reward, "reason": v.reason,
         "extracted": v.extracted, **({"tool_calls": [c.status for c in s.tool_calls]} if s.loss_mask is not None else {})}
        for r in results for j, (s, v) in enumerate(zip(r.samples, r.verdicts))
    ]
