"""A training run killed with SIGKILL mid-way resumes from its last checkpoint: the steps in metrics.jsonl
are contiguous, none repeated, and the run finishes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data.records import write_tasks
from data.synthetic import generate
from reasoner.training.distributed import lr_factor

ROOT = Path(__file__).resolve().parents[1]


def _records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _steps(path: Path) -> list[int]:
    return [record["step"] for record in _records(path)]


@pytest.mark.slow
def test_sigkill_then_resume_gives_contiguous_steps(micro_model, tmp_path):
    write_tasks(tmp_path / "train.jsonl", generate("math", "train", 16) + generate("code", "train", 8))
    command = [sys.executable, "-m", "pipelines.cli", "train", "--model", str(micro_model), "--data",
               str(tmp_path / "train.jsonl"), "--output", str(tmp_path / "run"), "--steps", "12",
               "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "6", "--checkpoint-every", "3",
               "--no-skip-equal-groups", "--lr", "1e-4", "--warmup-steps", "2", "--lr-schedule", "cosine"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    metrics = tmp_path / "run" / "metrics.jsonl"
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while len(_steps(metrics)) < 5 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = _steps(metrics)
    assert 5 <= len(killed_at) < 12, f"the run was not killed mid-training: {killed_at}"
    subprocess.run(command, env=env, cwd=ROOT, check=True, timeout=600, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    assert _steps(metrics) == list(range(12))
    # The schedule resumes where it stopped: warm-up, then a cosine towards a tenth of the peak by the end.
    rates = [record["lr"] for record in _records(metrics)]
    assert rates == pytest.approx([1e-4 * lr_factor(step, 2, 12) for step in range(12)])
    assert rates[0] == pytest.approx(5e-5) and rates[1] == pytest.approx(1e-4)
    assert 1e-5 < rates[-1] < 1.5e-5 and rates == sorted(rates[:2]) + sorted(rates[2:], reverse=True)
    assert (tmp_path / "run" / "final" / "config.json").is_file()
    assert not list((tmp_path / "run" / "checkpoints").glob(".*.tmp"))
