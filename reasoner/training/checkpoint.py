"""Checkpoints that survive a kill: written under a temporary name, then renamed into place.

A checkpoint holds the weights (Hugging Face format), the optimizer and scheduler, every RNG state and
the trainer's own state (step, data cursor). Resuming cuts `metrics.jsonl` back to the steps before the
checkpoint (`data.records.keep_steps_before`), so a run killed between checkpoints neither repeats nor skips
a step.
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

from reasoner.training import distributed

PREFIX = "step-"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(directory: Path, step: int, engine, tokenizer, trainer_state: dict, save_extra=None) -> Path:
    """Write checkpoint `step` (the number of steps completed) atomically; keep only the newest two.

    Every rank calls this (the optimizer state is written by each rank); rank 0 writes the rest and renames
    the finished directory into place. `save_extra(dir)` writes an algorithm's own files (PPO's value head).
    """
    final = directory / f"{PREFIX}{step:06d}"
    tmp = directory / f".{PREFIX}{step:06d}.tmp"
    if distributed.is_main():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    distributed.barrier()
    engine.save(tmp)
    torch.save(rng_state(), tmp / f"rng-{distributed.rank()}.pt")
    weights = engine.full_state_dict()
    if distributed.is_main():
        engine.module.save_pretrained(tmp, state_dict=weights)
        tokenizer.save_pretrained(tmp)
        if save_extra is not None:
            save_extra(tmp)
        (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **trainer_state}))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in list_checkpoints(directory)[:-2]:
            shutil.rmtree(old, ignore_errors=True)
    distributed.barrier()
    return final


def list_checkpoints(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.startswith(PREFIX) and (p / "trainer_state.json").is_file())


def latest_checkpoint(directory: Path) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def load_checkpoint(checkpoint: Path, engine) -> dict:
    """Restore the optimizer, scheduler and this rank's RNG states; return the trainer state."""
    engine.load(checkpoint)
    rng = checkpoint / f"rng-{distributed.rank()}.pt"
    set_rng_state(torch.load(rng if rng.is_file() else checkpoint / "rng-0.pt", weights_only=False))
    return json.loads((checkpoint / "trainer_state.json").read_text())
