"""The training loop every algorithm shares: resume, step cursor, metrics, alarms, checkpoints, held-out
checks, final save. Rank 0 alone writes files; every rank runs every collective.

An algorithm plugs in as two parts (an `Algorithm`):
- a source of batches: `GroupSource` (groups.py: sampled and verified groups, the prompt pool, dynamic
  sampling) for GRPO and PPO, `PairSource` (dpo.py: rounds of verified (right, wrong) pairs) for DPO;
- an update step: `update(learner, batch) -> stats`, a few dozen lines each (grpo.py, ppo.py, dpo.py),
  on top of the pure loss functions of `reasoner/algorithms/`.

A step's data is derived from (seed, step), so a resumed run replays exactly what it would have done
without the interruption: the checkpoint holds the weights, the optimiser, the RNG states and the
source's own cursor (`state()`), and `metrics.jsonl` is cut back to the checkpoint's step.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from data.records import Task, keep_steps_before
from reasoner.training import distributed
from reasoner.monitoring.alarms import AlarmMonitor
from reasoner.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from reasoner.config import TrainConfig, to_dict
from reasoner.generation import make_generator
from reasoner.precision import autocast_dtype
from reasoner.monitoring.loggers import ScalarLoggers
from reasoner.monitoring.metrics import MetricsWriter, progress, relative_drift
from reasoner.training.rollout import verify_groups

log = logging.getLogger("reasoner.train")


def step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step * 7919) % (2**31)


@dataclass
class Learner:
    """The policy being trained and what trains it: what every update step is handed."""

    model: torch.nn.Module
    tokenizer: Any
    engine: Any  # distributed.TorchEngine or DeepSpeedEngine: backward(loss, last), step()
    reference: torch.nn.Module | None  # the frozen starting policy, when the algorithm needs one
    autocast: torch.dtype | None = None  # mixed precision of training forwards (`--precision`), None: off


class Source(Protocol):
    """Where each step's batch comes from; its `state()` goes into every checkpoint."""

    def start(self, learner: Learner, generator, state: dict | None) -> None: ...
    def finished(self, step: int) -> bool: ...
    def next(self, step: int) -> tuple[Any, dict]: ...  # (this rank's batch, the step's global metrics)
    def state(self) -> dict: ...


@dataclass
class Algorithm:
    """What the loop asks of an algorithm: a source of batches and an update step."""

    name: str
    source: Source
    update: Callable[[Learner, Any], dict]  # (learner, batch) -> detached statistics of the global batch
    needs_reference: bool = False
    expected_steps: int | None = None  # for the progress bar
    save: Callable[[Path], None] = lambda directory: None  # its own files, into checkpoints and final/
    load: Callable[[Path], None] = lambda directory: None  # ... and back from a checkpoint on resume


def train(config: TrainConfig, model, tokenizer, algorithm: Algorithm, heldout: list[Task] | None = None) -> Path:
    """Train from the last checkpoint in `config.output` (or from scratch); return the final model's path.

    With several processes each rank trains on its share of every step's batch, the update is reduced
    over ranks by the engine, and rank 0 alone writes files. With `heldout` tasks, a fixed subset of them
    is checked every `heldout_every` steps and at the last step (`heldout_accuracy`).
    """
    rank, main = distributed.rank(), distributed.is_main()
    output = Path(config.output)
    checkpoints = output / "checkpoints"
    metrics = MetricsWriter(Path(config.metrics or output / "metrics.jsonl"))
    torch.manual_seed(config.seed + rank)
    reference = distributed.frozen_copy(model, config.zero_stage) if algorithm.needs_reference else None
    checkpoint = latest_checkpoint(checkpoints)  # the reference stays the starting policy on resume
    if checkpoint is not None:
        model.load_state_dict(type(model).from_pretrained(checkpoint).state_dict())
    engine = distributed.make_engine(model, config.lr, config.warmup_steps, config.grad_clip, config.zero_stage,
                                     config.offload, config.steps if config.lr_schedule == "cosine" else 0)
    learner = Learner(model, tokenizer, engine, reference, autocast_dtype(config.precision, model))
    state, start_step = None, 0
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, engine)
        algorithm.load(checkpoint)
        start_step = state["step"]
        log.info("train: resuming from %s (step %d)", checkpoint, start_step)
    if main:
        keep_steps_before(metrics.path, start_step)
    distributed.barrier()
    generator = make_generator(config.backend, model, tokenizer, config.sampling,
                               dtype=rollout_dtype(config.rollout_dtype, config.zero_stage, learner.autocast))
    algorithm.source.start(learner, generator, state)
    history = metrics.read()
    monitor = AlarmMonitor(config.alarms, metrics.path.with_name("alarms.jsonl") if main else None, history)
    lengths = [m["response_length_mean"] for m in history]
    loggers = ScalarLoggers(metrics.path.parent, config.tensorboard and main, config.wandb_project if main else "",
                            to_dict(config))
    heldout = random.Random(config.seed).sample(heldout, min(len(heldout), config.heldout_size)) if heldout else []

    bar = progress(desc=f"train {algorithm.name}", unit="step", initial=start_step, total=algorithm.expected_steps,
                   disable=not main)
    step = start_step
    while not algorithm.source.finished(step):
        t0 = time.time()
        batch, record = algorithm.source.next(step)
        t_data = time.time()
        stats = algorithm.update(learner, batch)
        lr = engine.lr  # the rate this step's update used
        engine.schedule()
        generator.load_weights(model)
        t_train = time.time()
        train_tokens = distributed.all_reduce([stats.pop("train_tokens", 0)])[0]
        record = {"step": step, **record, **stats, "lr": lr}
        lengths.append(record["response_length_mean"])
        record["length_drift"] = relative_drift(lengths[-1], lengths[:config.alarms.alarm_baseline_steps])
        record.update({"time_train_s": t_train - t_data, "time_step_s": t_train - t0,
                       "train_tokens_per_s": train_tokens / max(1e-9, t_train - t_data)})
        done = step + 1
        last = algorithm.source.finished(done)
        if heldout and config.heldout_every > 0 and (step % config.heldout_every == 0 or last):
            record["heldout_accuracy"] = heldout_accuracy(generator, heldout, config.heldout_samples,
                                                          config.sampling.params(step_seed(config.seed, -1)))
            record["time_heldout_s"] = time.time() - t_train
        if main:
            metrics.write(record)
            loggers.log(record)
            bar.update(1)
            bar.set_postfix(reward=f"{record['reward_mean']:.2f}", len=f"{record['response_length_mean']:.0f}",
                            refresh=False)
            log.info("step %d reward %.3f length %.1f (p90 %.0f) trunc %.2f kl %.4f entropy %.3f %.1fs",
                     step, record["reward_mean"], record["response_length_mean"], record["response_length_p90"],
                     record["truncation_rate"], record["kl"], record["entropy"], record["time_step_s"])
        monitor.check(record)
        if done % config.checkpoint_every == 0 or last:
            save_checkpoint(checkpoints, done, engine, tokenizer, algorithm.source.state(), algorithm.save)
        step = done
    bar.close()
    loggers.close()
    return save_final(output / "final", engine, tokenizer, algorithm.save)


def rollout_dtype(name: str, zero_stage: int, autocast: torch.dtype | None) -> torch.dtype | None:
    """The sampler's dtype for `--rollout-dtype` (None: the policy's own). `auto` samples in the training
    forwards' precision (`autocast`, from `--precision`), unless ZeRO 3 splits the policy over ranks."""
    whole_copy_impossible = zero_stage == 3 and distributed.world_size() > 1
    if name == "auto":
        return None if whole_copy_impossible else autocast
    if whole_copy_impossible:
        raise ValueError(f"train: --rollout-dtype {name} samples from a whole copy of the policy, which ZeRO 3 "
                         f"splits over ranks; use it with --zero-stage 2")
    return getattr(torch, name)


def save_final(final: Path, engine, tokenizer, save_extra: Callable[[Path], None]) -> Path:
    """The trained model in Hugging Face format (with the algorithm's own files), written by rank 0."""
    weights = engine.full_state_dict()
    if distributed.is_main():
        engine.module.save_pretrained(final, state_dict=weights)
        save_extra(final)
        tokenizer.save_pretrained(final)
    distributed.barrier()
    return final


def heldout_accuracy(generator, tasks: list[Task], samples: int, params) -> float:
    """Pass rate of the current policy on held-out tasks; the same sampling seed at every check."""
    rollout = verify_groups(tasks, generator.generate([t.prompt for t in tasks], samples, params))
    return float(np.mean([v.correct for v in rollout.verdicts]))
