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

ROOT = Path(__file__).resolve().parents[1]


def _steps(path: Path) -> list[int]:
    if not path.is_file():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_sigkill_then_resume_gives_contiguous_steps(micro_model, tmp_path):
    write_tasks(tmp_path / "train.jsonl", generate("math", "train", 16) + generate("code", "train", 8))
    command = [sys.executable, "-m", "pipelines.cli", "train", "--model", str(micro_model), "--data",
               str(tmp_path / "train.jsonl"), "--output", str(tmp_path / "run"), "--steps", "12",
               "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "6", "--checkpoint-every", "3",
               "--no-skip-equal-groups"]
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
    assert (tmp_path / "run" / "final" / "config.json").is_file()
    assert not list((tmp_path / "run" / "checkpoints").glob(".*.tmp"))
