"""Mixed precision for training forwards: the model's body in bfloat16, its output layer in float32.

Weights, gradients and optimiser state stay in the model's own dtype (float32 for the built-in model);
only the matrix products of a forward (and so of its backward) run in bfloat16, through `torch.autocast`,
as every GPU trainer does. The output layer is kept in float32 because log-probs are what RL differences:
a bfloat16 logit of 10 is only known to 0.06, an error larger than most per-token ratios a clip acts on.
Attention runs as plain matrix products ("eager") inside the block: PyTorch's fused CPU attention is 4x
slower in bfloat16 than in float32 on its backward, which cost more than the matrix products saved.

`--precision auto` takes bfloat16 where the hardware multiplies it natively (a CUDA GPU that supports it,
or a CPU with AVX512-BF16 or AMX, which oneDNN uses: 1.5x to 3x faster matrix products on the 2-core
development machine, see benchmarks/README.md) and float32 elsewhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from reasoner.config import PRECISIONS


def bfloat16_native(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 matrices natively."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def autocast_dtype(precision: str, model: torch.nn.Module) -> torch.dtype | None:
    """The dtype `precision` runs `model`'s forwards in, or None for the model's own."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choices: {', '.join(PRECISIONS)}")
    parameter = next(model.parameters())
    if precision == "float32" or parameter.dtype != torch.float32:
        return None
    if precision == "auto" and not bfloat16_native(parameter.device):
        return None
    return torch.bfloat16


@contextlib.contextmanager
def mixed_precision(model: torch.nn.Module, dtype: torch.dtype | None) -> Iterator[None]:
    """Forwards of `model` inside this block run in `dtype` (None: unchanged), except its output layer."""
    if dtype is None:
        yield
        return
    device = next(model.parameters()).device.type
    head = model.get_output_embeddings()

    def head_in_float32(module, args):
        torch.set_autocast_enabled(device, False)
        return tuple(a.float() if torch.is_tensor(a) else a for a in args)

    def body_again(module, args, output):
        torch.set_autocast_enabled(device, True)

    hooks = [head.register_forward_pre_hook(head_in_float32), head.register_forward_hook(body_again)]
    attention = getattr(model.config, "_attn_implementation", None)
    if attention == "sdpa" and device == "cpu":
        model.set_attn_implementation("eager")
    try:
        with torch.autocast(device, dtype=dtype):
            yield
    finally:
        for hook in hooks:
            hook.remove()
        if attention == "sdpa" and device == "cpu":
            model.set_attn_implementation(attention)
