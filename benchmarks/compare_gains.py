"""Is one run's held-out gain really lower than another's? Paired intervals for `reasoner run` directories.

    python benchmarks/compare_gains.py runs/before/seed0 runs/after/seed0 [--family math] [--key pass@1]
    python benchmarks/compare_gains.py --pairs runs/before/seed{0,1,2} runs/after/seed{0,1,2}

Each directory is a run directory (its `eval/start.json` and `eval/final.json`), or any directory holding
a `start.json` and a `final.json` written by `reasoner eval` (a re-evaluation with a larger `--n`, say).
For each run it prints the gain (final minus start, in `--key` over the `--family` tasks) with a bootstrap
95% interval that resamples tasks in pairs, as `summary.json`'s `change` does. For the second run of each
pair it also prints its gain minus the first's, with an interval that resamples tasks once for both (the
two runs must have evaluated the same tasks, as runs of one seed do).

What the intervals cover: which held-out tasks and which samples the evaluations drew. Not what another
training seed would have given: the spread between seeds is measured by running seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reasoner.evaluation import bootstrap_interval, per_task_change  # noqa: E402


def evaluations(directory: Path) -> tuple[Path, Path]:
    """(start report, final report) of a run directory or of a directory of two `reasoner eval` reports."""
    for base in (directory / "eval", directory):
        if (base / "start.json").is_file() and (base / "final.json").is_file():
            return base / "start.json", base / "final.json"
    raise SystemExit(f"{directory}: no eval/start.json and eval/final.json (nor start.json and final.json)")


def per_task_gain(directory: Path, family: str, key: str) -> dict[str, float]:
    """Task id -> final minus start value of `key`, over the tasks of `family`."""
    start, final = (json.loads(path.read_text()) for path in evaluations(directory))
    of_family = lambda report: [row for row in report["tasks"] if row["family"] == family]
    try:
        gains = per_task_change(of_family(start), of_family(final), key)
    except ValueError as error:
        raise SystemExit(f"{directory}: {error}")
    if not gains:
        raise SystemExit(f"{directory}: no {family} tasks")
    return gains


def interval(values: list[float]) -> str:
    low, high = bootstrap_interval(values)
    return f"{sum(values) / len(values):+.3f} [{low:+.3f}, {high:+.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories: first, second (or, with --pairs, "
                        "every first, then every second)")
    parser.add_argument("--pairs", action="store_true", help="the first half of RUNS are the baselines of the "
                        "second half, in order")
    parser.add_argument("--family", default="math")
    parser.add_argument("--key", default="pass@1")
    args = parser.parse_args()
    if len(args.runs) % 2:
        raise SystemExit("give an even number of run directories: baselines and runs to compare with them")
    half = len(args.runs) // 2
    pairs = list(zip(args.runs[:half], args.runs[half:])) if args.pairs else list(zip(args.runs[::2], args.runs[1::2]))
    print(f"{args.family} {args.key} gain (final - start), bootstrap 95% interval over tasks resampled in pairs")
    for base, other in pairs:
        gains = {run: per_task_gain(run, args.family, args.key) for run in (base, other)}
        if gains[base].keys() != gains[other].keys():
            raise SystemExit(f"{base} and {other} evaluated different tasks: compare runs of one seed")
        for run, gain in gains.items():
            print(f"  {run}: {interval(list(gain.values()))}")
        difference = [gains[other][task] - gains[base][task] for task in gains[base]]
        print(f"  second minus first: {interval(difference)}")


if __name__ == "__main__":
    main()
