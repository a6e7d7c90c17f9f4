"""benchmarks/compare_gains.py: each run's held-out gain and the second's minus the first's, over paired tasks."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fake_run(directory: Path, start: list[float], final: list[float]) -> Path:
    (directory / "eval").mkdir(parents=True)
    for name, values in (("start", start), ("final", final)):
        rows = [{"id": f"math/{i}", "family": "math", "pass@1": v} for i, v in enumerate(values)]
        rows.append({"id": "code/0", "family": "code", "pass@1": 1.0 if name == "final" else 0.0})  # not math
        (directory / "eval" / f"{name}.json").write_text(json.dumps({"tasks": rows}))
    return directory


def compare(*runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_gains.py"), *map(str, runs)],
                          capture_output=True, text=True)


def test_gains_and_their_difference_over_the_same_tasks(tmp_path):
    start = [0.1 * (i % 10) for i in range(100)]
    before = fake_run(tmp_path / "before", start, [min(1.0, s + 0.10) for s in start])
    after = fake_run(tmp_path / "after", start, [min(1.0, s + 0.15) for s in start])
    result = compare(before, after)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    gain_before, gain_after = (sum(min(1.0, s + d) - s for s in start) / 100 for d in (0.10, 0.15))
    assert lines[1].split(": ")[1].startswith(f"{gain_before:+.3f} [")
    assert lines[2].split(": ")[1].startswith(f"{gain_after:+.3f} [")
    low, high = (float(x) for x in lines[3].split("[")[1].rstrip("]").split(", "))
    assert 0 < low <= gain_after - gain_before <= high  # the same shift on every task: clearly positive


def test_runs_over_different_tasks_are_refused(tmp_path):
    one = fake_run(tmp_path / "one", [0.0] * 10, [0.5] * 10)
    other = fake_run(tmp_path / "other", [0.0] * 11, [0.5] * 11)
    result = compare(one, other)
    assert result.returncode != 0 and "different tasks" in result.stderr
    assert compare(one).returncode != 0  # an odd number of runs
