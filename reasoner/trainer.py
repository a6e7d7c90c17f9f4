"""The RL training loop: sample groups, verify, compute advantages, update the policy, log, checkpoint.

One step: draw `prompts_per_step` tasks, sample `group_size` responses each with the current policy,
verify them, turn rewards into advantages, and take one optimiser step (or `epochs_per_batch` of them
over micro-batches). Everything a step needs is derived from (seed, step), so a resumed run replays the
same prompts and samples it would have without the interruption. Prompts come from a `PromptPool`
(data/online.py): all-equal groups are replaced by fresh prompts, solved prompts retire and are
re-estimated every `reestimate_every` steps (reasoner/online.py).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from data.online import PromptPool
from data.records import Task
from reasoner.alarms import AlarmMonitor
from reasoner.algorithms.common import KL_ESTIMATORS, TRUNCATION, BatchSizes, kl_penalised_rewards
from reasoner.algorithms.grpo import group_advantages, grpo_loss, weight_negatives
from reasoner import distributed
from reasoner.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, truncate_metrics
from reasoner.config import TrainConfig, to_dict
from reasoner.generation import SamplingParams, make_generator
from reasoner.loggers import ScalarLoggers
from reasoner.metrics import MetricsWriter, length_stats, progress
from reasoner.online import curate_step, reestimate_retired
from reasoner.rollout import (Rollout, encode_prompts, micro_batches, pad_batch, response_logprobs, trim_padding,
                              verify_groups)

log = logging.getLogger(__name__)


def step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step * 7919) % (2**31)


@dataclass
class Algorithm:
    """What the loop asks of an algorithm; GRPO's by default. PPO brings its critic in through these."""

    update: Callable[..., dict] = None  # (config, model, reference, tokenizer, engine, rollout) -> stats
    param_groups: list[dict] = field(default_factory=list)  # trained beside the policy (a value head)
    save: Callable[[Path], None] = lambda directory: None  # its files, into each checkpoint and the final model
    load: Callable[[Path], None] = lambda directory: None  # ... and back from a checkpoint on resume
    # Dynamic sampling refills all-equal groups because group-relative advantages vanish there; an
    # algorithm with a critic learns from those groups too and skips the refills.
    refills_equal_groups: bool = True


def train(config: TrainConfig, model, tokenizer, tasks: list[Task], heldout: list[Task] | None = None,
          algorithm: Algorithm | None = None) -> Path:
    """Run GRPO from the last checkpoint in `config.output` (or from scratch); return the final model path.

    With several processes each rank samples its share of the step's prompts (a group never spans ranks),
    the update is reduced over ranks by the engine, and rank 0 alone writes files. With `heldout` tasks, a
    fixed subset of them is checked every `heldout_every` steps (`heldout_accuracy`).
    """
    rank, world = distributed.rank(), distributed.world_size()
    if config.prompts_per_step % world:
        raise ValueError(f"train: prompts-per-step {config.prompts_per_step} must be a multiple of the "
                         f"{world} processes, so that every group stays on one rank")
    output = Path(config.output)
    checkpoints = output / "checkpoints"
    metrics = MetricsWriter(Path(config.metrics or output / "metrics.jsonl"))
    torch.manual_seed(config.seed + rank)
    algorithm = algorithm or Algorithm(update=grpo_update)
    curation_config = config if algorithm.refills_equal_groups else dataclasses.replace(config, dynamic_sampling_rounds=0)
    sampler = PromptPool(tasks, config.seed, config.retire_solved)  # online curation: data/online.py
    start_step = 0
    checkpoint = latest_checkpoint(checkpoints)
    if checkpoint is not None:
        model.load_state_dict(type(model).from_pretrained(checkpoint).state_dict())
    reference = distributed.frozen_copy(model, config.zero_stage) if config.beta > 0 else None
    engine = distributed.make_engine(model, config.lr, config.warmup_steps, config.grad_clip,
                                     algorithm.param_groups, config.zero_stage, config.offload)
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, engine)
        algorithm.load(checkpoint)
        start_step = state["step"]
        sampler.load_state(state)
        log.info("train: resuming from %s (step %d)", checkpoint, start_step)
    if distributed.is_main():
        truncate_metrics(metrics.path, start_step)
    distributed.barrier()
    generator = make_generator(config.backend, model, tokenizer)
    baseline_steps = config.alarms.alarm_baseline_steps
    baseline = [m["response_length_mean"] for m in metrics.read()[:baseline_steps]]
    monitor = AlarmMonitor(config.alarms, metrics.path.with_name("alarms.jsonl") if distributed.is_main() else None,
                           metrics.read())
    loggers = ScalarLoggers(metrics.path.parent, config.tensorboard and distributed.is_main(),
                            config.wandb_project if distributed.is_main() else "", to_dict(config))
    heldout = random.Random(config.seed).sample(heldout, min(len(heldout), config.heldout_size)) if heldout else []

    bar = progress(range(start_step, config.steps), desc=f"train {config.algo}", unit="step", initial=start_step,
                   total=config.steps, disable=not distributed.is_main())
    for step in bar:
        t0 = time.time()
        params = SamplingParams(config.sampling.max_new_tokens, config.sampling.temperature, config.sampling.top_p,
                                step_seed(config.seed, step) + rank)
        pool_stats = {}
        if config.reestimate_every > 0 and step > 0 and step % config.reestimate_every == 0:
            pool_stats = reestimate_retired(config, generator, model, sampler, step, params)
        batch_tasks = sampler.next(config.prompts_per_step)[rank::world]  # the same draw on every rank
        with distributed.gathered_parameters(model, config.zero_stage):
            groups = generator.generate([t.prompt for t in batch_tasks], config.group_size, params)
        t_generate = time.time()
        rollout = verify_groups(batch_tasks, groups)
        rollout, curation = curate_step(curation_config, generator, model, sampler, rollout, step, params)
        t_verify = time.time()
        stats = algorithm.update(config, model, reference, tokenizer, engine, rollout)
        engine.schedule()
        generator.load_weights(model)
        t_train = time.time()

        everyone = merge_rollouts(distributed.all_gather_objects(rollout))
        record = {"step": step, **step_metrics(everyone), **curation, **pool_stats, **stats, "lr": engine.lr}
        if len(baseline) < baseline_steps:
            baseline.append(record["response_length_mean"])
        record["length_drift"] = record["response_length_mean"] / max(1e-9, float(np.mean(baseline))) - 1.0
        train_tokens = distributed.all_reduce([stats.pop("train_tokens", 0)])[0]
        record.pop("train_tokens", None)
        record.update({
            "time_generate_s": t_generate - t0, "time_verify_s": t_verify - t_generate,
            "time_train_s": t_train - t_verify, "time_step_s": t_train - t0,
            "generate_tokens_per_s": int(everyone.lengths.sum()) / max(1e-9, t_generate - t0),
            "train_tokens_per_s": train_tokens / max(1e-9, t_train - t_verify),
        })
        if heldout and config.heldout_every > 0 and (step % config.heldout_every == 0 or step + 1 == config.steps):
            record["heldout_accuracy"] = heldout_accuracy(config, generator, heldout)
            record["time_heldout_s"] = time.time() - t_train
        if distributed.is_main():
            metrics.write(record)
            loggers.log(record)
            bar.set_postfix(reward=f"{record['reward_mean']:.2f}", len=f"{record['response_length_mean']:.0f}",
                            refresh=False)
            log.info("step %d reward %.3f length %.1f (p90 %.0f) trunc %.2f kl %.4f entropy %.3f %.1fs",
                     step, record["reward_mean"], record["response_length_mean"], record["response_length_p90"],
                     record["truncation_rate"], record["kl"], record["entropy"], record["time_step_s"])
        monitor.check(record)
        done = step + 1
        if done % config.checkpoint_every == 0 or done == config.steps:
            save_checkpoint(checkpoints, done, engine, tokenizer, sampler.state(), algorithm.save)
    loggers.close()
    final = output / "final"
    weights = engine.full_state_dict()
    if distributed.is_main():
        model.save_pretrained(final, state_dict=weights)
        algorithm.save(final)
        tokenizer.save_pretrained(final)
    distributed.barrier()
    return final


def merge_rollouts(parts: list[Rollout]) -> Rollout:
    """The rollouts of every rank as one (for metrics that must be global)."""
    if len(parts) == 1:
        return parts[0]
    return Rollout([t for r in parts for t in r.tasks], [s for r in parts for s in r.samples],
                   [v for r in parts for v in r.verdicts], parts[0].group_size)


def heldout_accuracy(config: TrainConfig, generator, tasks: list[Task]) -> float:
    """Pass rate of the current policy on held-out tasks; the same sampling seed at every check."""
    params = SamplingParams(config.sampling.max_new_tokens, config.sampling.temperature, config.sampling.top_p,
                            step_seed(config.seed, -1))
    rollout = verify_groups(tasks, generator.generate([t.prompt for t in tasks], config.heldout_samples, params))
    return float(np.mean([v.correct for v in rollout.verdicts]))


def step_metrics(rollout: Rollout) -> dict:
    correct = np.array([v.correct for v in rollout.verdicts])
    truncated = np.array([s.truncated for s in rollout.samples])
    rewards = rollout.rewards
    return {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "accuracy": float(correct.mean()),
        **length_stats(rollout.lengths, correct, truncated),
        "equal_reward_groups": float((rewards.std(dim=-1) == 0).float().mean()),
        "verifier_timeout_rate": float(np.mean([v.timed_out for v in rollout.verdicts])),
        "no_answer_rate": float(np.mean([v.no_answer for v in rollout.verdicts])),
    }


def grpo_update(config: TrainConfig, model, reference, tokenizer, engine, rollout: Rollout) -> dict:
    """One GRPO update on this rank's rollout; returns detached statistics of the whole (global) batch."""
    truncated = torch.tensor([s.truncated for s in rollout.samples]).view(-1, rollout.group_size)  # [G, n]
    rewards, keep = TRUNCATION[config.truncation](rollout.rewards, truncated, config.truncation_penalty)  # [G, n]
    keep = keep.flatten()  # [G * n]
    if config.skip_equal_groups:
        keep = keep & (rewards.std(dim=-1) > 0).repeat_interleave(rollout.group_size)
    if config.kl_in_reward and reference is not None:
        kl, kl_mask = rollout_kl(config, model, reference, tokenizer, rollout)  # [G * n, T]
        rewards = kl_penalised_rewards(rewards.flatten(), kl, kl_mask, config.beta).view_as(rewards)
    advantages = weight_negatives(group_advantages(rewards, config.scale_by_std), config.negative_weight).flatten()
    rows = keep.nonzero().squeeze(-1).tolist()
    rows.sort(key=lambda i: len(rollout.samples[i].token_ids))  # micro-batches of similar lengths pad little
    batch = rollout_batch(tokenizer, rollout, rows or [0])  # a rank with nothing to learn runs one masked row
    if not rows:
        batch["response_mask"].zero_()
    batch["advantages"] = advantages[rows or [0]]
    mask = batch["response_mask"]
    # Denominators and the number of micro-batches are global: every rank runs the same number of
    # forward/backward passes, and the loss sums over ranks to the single-process loss.
    tokens, sequences = distributed.all_reduce([float(mask.sum()), float(len(rows))])
    micro_count = int(distributed.all_reduce([math.ceil(len(rows or [0]) / config.micro_batch_size)], "max")[0])
    if tokens == 0:
        return {"loss": 0.0, "kl": 0.0, "entropy": float("nan"), "clip_frac_low": 0.0, "clip_frac_high": 0.0,
                "grad_norm": 0.0, "train_tokens": 0}
    sizes = BatchSizes(tokens=int(tokens), sequences=int(sequences), max_new_tokens=config.sampling.max_new_tokens)
    temperature = config.sampling.temperature
    pieces = [trim_padding(mb) for mb in micro_batches(batch, config.micro_batch_size)]
    pieces += [{**pieces[-1], "response_mask": torch.zeros_like(pieces[-1]["response_mask"])}] * (micro_count - len(pieces))
    with torch.no_grad():
        if reference is not None:
            ref_logp = [response_logprobs(reference, mb, temperature)[0] for mb in pieces]
            for mb, value in zip(pieces, ref_logp):
                mb["ref_logp"] = value
        if config.epochs_per_batch > 1:
            for mb in pieces:
                mb["old_logp"] = response_logprobs(model, mb, temperature)[0]
    model.train()
    totals: dict[str, float] = {}
    for epoch in range(config.epochs_per_batch):
        for i, mb in enumerate(pieces):
            logp, entropy = response_logprobs(model, mb, temperature, with_entropy=epoch == 0)
            old_logp = mb["old_logp"] if "old_logp" in mb else logp.detach()
            loss, stats = grpo_loss(logp, old_logp, mb.get("ref_logp"), mb["advantages"], mb["response_mask"], sizes,
                                    config.clip_low, config.clip_high, 0.0 if config.kl_in_reward else config.beta,
                                    config.kl_estimator, config.aggregation)
            engine.backward(loss, last=i == len(pieces) - 1)
            share = mb["response_mask"].sum().item() / sizes.tokens / config.epochs_per_batch
            totals["loss"] = totals.get("loss", 0.0) + loss.item() / config.epochs_per_batch
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + float(value) * share
            if entropy is not None:
                totals["entropy"] = totals.get("entropy", 0.0) + float((entropy * mb["response_mask"]).sum()) / sizes.tokens
        grad_norm = engine.step()
    model.eval()
    totals.setdefault("kl", 0.0)
    totals.setdefault("entropy", 0.0)
    keys = sorted(totals)
    totals = dict(zip(keys, distributed.all_reduce([totals[k] for k in keys])))  # shares are global: sums
    totals["grad_norm"] = grad_norm
    totals["train_tokens"] = float(mask.sum()) * config.epochs_per_batch
    return totals


def rollout_batch(tokenizer, rollout: Rollout, rows: list[int] | None = None) -> dict:
    """The padded batch of the rollout's samples (all of them, or the given rows)."""
    rows = range(len(rollout.samples)) if rows is None else rows
    prompt_ids = encode_prompts(tokenizer, rollout.tasks)
    return pad_batch([prompt_ids[i // rollout.group_size] for i in rows], [rollout.samples[i].token_ids for i in rows],
                     tokenizer.pad_token_id)


@torch.no_grad()
def rollout_kl(config: TrainConfig, model, reference, tokenizer, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token KL estimate [N, T] of every sample to the reference, and the response mask [N, T]."""
    batch = rollout_batch(tokenizer, rollout)
    pieces = list(micro_batches(batch, config.micro_batch_size))
    logp = torch.cat([response_logprobs(model, mb, config.sampling.temperature)[0] for mb in pieces])
    ref_logp = torch.cat([response_logprobs(reference, mb, config.sampling.temperature)[0] for mb in pieces])
    return KL_ESTIMATORS[config.kl_estimator](logp, ref_logp), batch["response_mask"]
