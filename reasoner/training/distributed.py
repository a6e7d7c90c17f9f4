"""Processes and the optimiser: plain PyTorch in one process, DeepSpeed (ZeRO 2 or 3) across several.

The trainer talks to an engine with four verbs, `backward(loss, last)`, `step()`, `save(dir)` and
`load(dir)`, so the loop reads the same on one CPU and on many GPUs. Losses are normalised by sizes of
the whole global batch; DeepSpeed averages gradients over ranks, so the engine multiplies each rank's loss
by the world size to make the update the same as one process taking the whole batch.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def launched_distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init() -> None:
    """Join the process group the DeepSpeed launcher set up (gloo on the CPU, nccl on GPUs)."""
    if launched_distributed() and not dist.is_initialized():
        import deepspeed

        deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def shutdown() -> None:
    """Leave the process group together, after a successful run only (a rank that failed would leave the
    others waiting). A rank that exits with the group alive now and then aborts as gloo's threads are torn
    down ("terminate called without an active exception", pytorch/pytorch#190489)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def all_reduce(values: list[float], op: str = "sum") -> list[float]:
    """Sum (or max) a few numbers over ranks."""
    if not dist.is_initialized():
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor.tolist()


def all_gather_objects(obj: Any) -> list[Any]:
    if not dist.is_initialized():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum each parameter's gradient over ranks; a rank without one adds zeros (so every rank joins)."""
    if not dist.is_initialized():
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)


def device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def lr_factor(step: int, warmup: int, decay_steps: int = 0, floor: float = 0.1) -> float:
    """The learning rate of `step` over the peak: linear warm-up over `warmup` steps, then constant
    (`decay_steps` 0) or a cosine from 1 down to `floor` at step `decay_steps`."""
    if step < warmup:
        return (step + 1) / warmup
    if decay_steps <= 0:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, decay_steps - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def lr_schedule(optimizer: torch.optim.Optimizer, warmup: int, decay_steps: int = 0):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, warmup, decay_steps))


class LearningRateSchedule:
    """The learning-rate schedule every engine steps once per training step, whatever its optimiser steps."""

    scheduler: torch.optim.lr_scheduler.LambdaLR

    def schedule(self) -> None:
        self.scheduler.step()

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]


class TorchEngine(LearningRateSchedule):
    """Plain PyTorch: AdamW, `lr_factor`'s schedule, gradient clipping. The policy's engine in one process;
    with several ranks, a small module trained beside the DeepSpeed engine (PPO's value head), its gradients
    summed over ranks before the step (each rank's loss is its share of the global loss)."""

    def __init__(self, model: torch.nn.Module, lr: float, warmup_steps: int, grad_clip: float,
                 weight_decay: float = 0.0, decay_steps: int = 0):
        self.module, self.grad_clip = model, grad_clip
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay)
        self.scheduler = lr_schedule(self.optimizer, warmup_steps, decay_steps)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def step(self) -> float:
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        sum_gradients(params)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(grad_norm)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def save(self, directory: Path) -> None:
        torch.save(self.state_dict(), directory / "optimizer.pt")

    def load(self, directory: Path) -> None:
        self.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=False))

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return self.module.state_dict()


class DeepSpeedEngine(LearningRateSchedule):
    """Several processes: DeepSpeed ZeRO stage 2 or 3, bf16 on GPUs and fp32 on the CPU."""

    def __init__(self, model: torch.nn.Module, lr: float, warmup_steps: int, grad_clip: float,
                 zero_stage: int = 2, offload: bool = False, weight_decay: float = 0.0, decay_steps: int = 0):
        import deepspeed

        cuda = torch.cuda.is_available()
        zero: dict[str, Any] = {"stage": zero_stage}
        if offload:
            zero["offload_optimizer"] = {"device": "cpu"}
        config = {
            "train_micro_batch_size_per_gpu": 1,  # the trainer does its own micro-batching and normalisation
            "gradient_accumulation_steps": 1,
            "gradient_clipping": grad_clip,
            "zero_optimization": zero,
            "bf16": {"enabled": cuda},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9,
        }
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        # Our own schedule, stepped once per training step whatever the number of optimiser steps in it.
        self.scheduler = lr_schedule(optimizer, warmup_steps, decay_steps)
        self.module = model
        self.zero_stage = zero_stage
        self.backwards_since_step = 0

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        # Gradients are reduced over ranks only at the boundary; every rank runs the same number of
        # micro-batches, so the boundaries line up.
        if self.zero_stage == 3 and self.backwards_since_step:
            # Measured with DeepSpeed 0.19 (tests/test_distributed.py): under ZeRO 3 a second backward
            # before the step loses gradient (a third of the weights took a different Adam step).
            raise RuntimeError("ZeRO 3 takes one micro-batch per rank per step here: set --micro-batch-size to at "
                               "least the samples each rank trains on per step (prompts_per_step x group_size / "
                               "processes), or use --zero-stage 2")
        self.backwards_since_step += 1
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss * world_size())

    def step(self) -> float:
        self.backwards_since_step = 0
        self.engine.set_gradient_accumulation_boundary(True)
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def save(self, directory: Path) -> None:
        # collective: every rank writes its part of the optimizer state
        self.engine.save_checkpoint(str(directory), tag="deepspeed",
                                    client_state={"scheduler": self.scheduler.state_dict()})

    def load(self, directory: Path) -> None:
        _, client_state = self.engine.load_checkpoint(str(directory), tag="deepspeed")
        self.scheduler.load_state_dict(client_state["scheduler"])

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on every rank (ZeRO 3 gathers its partitions)."""
        if self.zero_stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(self.module.parameters()), modifier_rank=None):
                return {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        return self.module.state_dict()


def make_engine(model: torch.nn.Module, lr: float, warmup_steps: int, grad_clip: float, zero_stage: int = 2,
                offload: bool = False, decay_steps: int = 0):
    """DeepSpeed when this process is one of several, plain PyTorch otherwise. `decay_steps` > 0: the learning
    rate falls on a cosine to a tenth of `lr` by then (`lr_factor`)."""
    if dist.is_initialized() and world_size() > 1:
        return DeepSpeedEngine(model, lr, warmup_steps, grad_clip, zero_stage, offload, decay_steps=decay_steps)
    return TorchEngine(model, lr, warmup_steps, grad_clip, decay_steps=decay_steps)


def frozen_copy(model: torch.nn.Module, zero_stage: int = 2) -> torch.nn.Module:
    """A frozen copy of the model (the reference policy); under ZeRO 3 its weights are partitioned too."""
    import copy

    reference = copy.deepcopy(model).eval().requires_grad_(False)
    if dist.is_initialized() and world_size() > 1 and zero_stage == 3:
        import deepspeed

        engine, *_ = deepspeed.initialize(model=reference, config={
            "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3},
            "bf16": {"enabled": torch.cuda.is_available()}})
        return engine.module
    return reference


def gathered_parameters(model: torch.nn.Module, zero_stage: int):
    """Context in which a ZeRO-3 model holds all its weights (for generation); a no-op otherwise."""
    import contextlib

    if dist.is_initialized() and world_size() > 1 and zero_stage == 3:
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None)
    return contextlib.nullcontext()
