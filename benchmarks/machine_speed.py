"""A fixed workload that states how fast the machine is right now, to run beside any timing.

    python benchmarks/machine_speed.py            # about 5 s; prints seconds per part, lower is faster

Machines of one kind differ here by up to 1.6x, and a shared machine drifts within minutes, so a stage's
seconds mean little without this figure taken beside them. It times, on one thread: float32 matrix products
(256 x 256, the size of the tiny model's layers), bfloat16 ones where the CPU multiplies them natively
(AVX512-BF16 or AMX; `--precision auto` trains in float32 elsewhere), and a pure-Python loop (the
interpreter's share of a decoding step). The same inputs every time; nothing depends on the project's code.
"""

from __future__ import annotations

import time

import torch


def timed(work) -> float:
    work()  # warm-up
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    a32 = torch.randn(256, 256, generator=generator)
    b32 = torch.randn(256, 256, generator=generator)
    a16, b16 = a32.bfloat16(), b32.bfloat16()

    def matmuls(a, b):
        return lambda: [a @ b for _ in range(2000)]

    parts = {"float32 matmul": timed(matmuls(a32, b32))}
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if native:  # emulated, the same products take 60x longer (AVX2 only): they say nothing about the run
        parts["bfloat16 matmul"] = timed(matmuls(a16, b16))
    parts["python loop"] = timed(lambda: sum(i * i for i in range(3_000_000)))
    print("machine speed (seconds, 1 thread): " + ", ".join(f"{name} {s:.3f}" for name, s in parts.items())
          + f", total {sum(parts.values()):.3f}" + ("" if native else " (no native bfloat16: not comparable to "
                                                      "a total with it; compare the parts)"), flush=True)


if __name__ == "__main__":
    main()
