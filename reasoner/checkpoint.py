"""Checkpoints that survive a kill: written under a temporary name, then renamed into place.

A checkpoint holds the weights (Hugging Face format), the optimizer and scheduler, every RNG state and
the trainer's own state (step, data cursor). Resuming truncates `metrics.jsonl` to the steps before the
checkpoint, so a run killed between checkpoints neither repeats nor skips a step.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

PREFIX = "step-"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(directory: Path, step: int, model, tokenizer, optimizer, scheduler, trainer_state: dict,
                    save_extra=None) -> Path:
    """Write checkpoint `step` (the number of steps completed) atomically; keep only the newest two.

    `save_extra(dir)` writes an algorithm's own files (PPO's value head) into the checkpoint before it is renamed.
    """
    final = directory / f"{PREFIX}{step:06d}"
    tmp = directory / f".{PREFIX}{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()},
               tmp / "trainer.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **trainer_state}))
    if final.exists():
        shutil.rmtree(final)
    if save_extra is not None:
        save_extra(tmp)
    os.replace(tmp, final)
    for old in list_checkpoints(directory)[:-2]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.startswith(PREFIX) and (p / "trainer_state.json").is_file())


def latest_checkpoint(directory: Path) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def load_trainer_state(checkpoint: Path, optimizer, scheduler) -> dict:
    blob = torch.load(checkpoint / "trainer.pt", weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    set_rng_state(blob["rng"])
    return json.loads((checkpoint / "trainer_state.json").read_text())


def truncate_metrics(path: Path, before_step: int) -> None:
    """Keep only metric lines with step < before_step (those logged after the checkpoint are redone)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] < before_step]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)
