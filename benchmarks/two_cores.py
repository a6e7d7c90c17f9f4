"""Sampling, or SFT, on two CPU cores: one process of two torch threads, or two processes of one thread each?

    python benchmarks/two_cores.py                       # grpo_vs_trl.py's start model
    python benchmarks/two_cores.py --model runs/x/sft/model --prompts 64 --repeats 4
    python benchmarks/two_cores.py --work sft --model runs/x/init   # SFT steps of 64 worked solutions

The same work each way: `--prompts` built-in math and code train prompts, 8 samples each, at most 64 new
tokens, temperature 1, in the sampler the pipeline uses (`HFGenerator`, bfloat16 where the CPU has it).
"one process, 2 threads" samples every prompt in one process (`--sampler-processes 1`), in chunks of
256 rows and, beside it, of 512; "two processes, 1 thread each" gives each process half the prompts and
takes the wall clock from the moment both are told to start until the slower one ends (what
`--sampler-processes 2` does, without the shared weights: each process loads the model). Every process
loads the model and makes one untimed call first; the variants alternate.

`--work sft` times `--sft-steps-timed` SFT steps (`reasoner sft`'s step: bfloat16 mixed precision, forward,
backward, gradient clipping and AdamW) of 64 built-in worked solutions a step: all 64 in one process of two threads, or 32 in
each of two processes of one thread. The two processes do not reduce their gradients, so their figure is
the most that data parallelism over two processes could buy.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SAMPLES, MAX_NEW_TOKENS = 8, 64
SFT_ROWS = 64  # worked solutions per SFT step, as `reasoner sft` by default


def prompts_of(count: int) -> list[str]:
    from data.synthetic import generate as builtin_tasks

    math, code = builtin_tasks("math", "train", count), builtin_tasks("code", "train", count)
    return [t.prompt for t in (math[:count - count // 3] + code[:count // 3])]


def child(model_dir: str, threads: int, count: int, part: int, parts: int, rows: int) -> None:
    """Load, warm up, say "ready", then per "go" line sample this process's share and print the seconds."""
    import torch

    from reasoner.config import SamplingParams
    from reasoner.generation.hf import HFGenerator
    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.precision import autocast_dtype

    torch.set_num_threads(threads)
    model, tokenizer = load_model(model_dir).eval(), load_tokenizer(model_dir)
    generator = HFGenerator(model, tokenizer, batch_size=rows, dtype=autocast_dtype("auto", model))
    share = prompts_of(count)[part::parts]
    generator.generate(share[:4], SAMPLES, SamplingParams(MAX_NEW_TOKENS, 1.0, 1.0, 0))
    print("ready", flush=True)
    for seed, _ in enumerate(sys.stdin, start=1):
        t0 = time.perf_counter()
        groups = generator.generate(share, SAMPLES, SamplingParams(MAX_NEW_TOKENS, 1.0, 1.0, seed))
        tokens = sum(len(s.token_ids) for g in groups for s in g)
        print(f"{time.perf_counter() - t0:.4f} {tokens}", flush=True)


def sft_examples(tokenizer) -> list:
    """Built-in worked solutions, tokenized as `reasoner sft` does: 600 math and 300 code."""
    from data.synthetic import generate as builtin_tasks
    from reasoner.training.sft import tokenize_pairs

    return tokenize_pairs(tokenizer, builtin_tasks("math", "train", 600) + builtin_tasks("code", "train", 300))


def sft_child(model_dir: str, threads: int, steps: int, part: int, parts: int) -> None:
    """Per "go" line, `steps` SFT steps on this process's share of 64 worked solutions a step; print the seconds
    and the rows trained."""
    import random

    import torch

    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.precision import autocast_dtype
    from reasoner.training.sft import collate, sft_step

    torch.set_num_threads(threads)
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    examples = sft_examples(tokenizer)
    rng, rows = random.Random(part), SFT_ROWS // parts
    optimizer, dtype = torch.optim.AdamW(model.parameters(), lr=1e-4), autocast_dtype("auto", model)
    model.train()

    def train(count: int) -> None:
        for batch in [collate(rng.sample(examples, rows), tokenizer.pad_token_id) for _ in range(count)]:
            sft_step(model, optimizer, batch, dtype)

    train(2)
    print("ready", flush=True)
    for _ in sys.stdin:
        t0 = time.perf_counter()
        train(steps)
        print(f"{time.perf_counter() - t0:.4f} {rows * steps}", flush=True)


class Variant:
    """Processes that each sample their share of the prompts (or train on their share of the rows) when told to go."""

    def __init__(self, work: str, model_dir: str, threads: int, parts: int, count: int, rows: int):
        self.procs = [subprocess.Popen([sys.executable, __file__, "--child", work, model_dir, str(threads), str(count),
                                        str(part), str(parts), str(rows)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
                      for part in range(parts)]
        for proc in self.procs:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a sampling process did not start; run it alone to see why")

    def run(self) -> tuple[float, int]:
        """(wall seconds until the slowest process ends, tokens sampled or rows trained)."""
        t0 = time.perf_counter()
        for proc in self.procs:
            proc.stdin.write("go\n")
        answers = [proc.stdout.readline().split() for proc in self.procs]
        wall = time.perf_counter() - t0
        return wall, sum(int(tokens) for _, tokens in answers)

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
            proc.wait()


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        work, model_dir, (threads, count, part, parts, rows) = sys.argv[2], sys.argv[3], map(int, sys.argv[4:9])
        if work == "sft":
            return sft_child(model_dir, threads, count, part, parts)
        return child(model_dir, threads, count, part, parts, rows)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="", help="model directory (default: grpo_vs_trl.py's start model)")
    parser.add_argument("--workdir", default="runs/bench_grpo_vs_trl")
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=4, help="timed calls of each variant")
    parser.add_argument("--work", choices=("sample", "sft"), default="sample")
    parser.add_argument("--sft-steps-timed", type=int, default=10, help="SFT steps per timed call (--work sft)")
    args = parser.parse_args()
    from grpo_vs_trl import build_start_model

    model_dir = args.model or str(build_start_model(Path(args.workdir), args.sft_steps))
    if args.work == "sft":
        count, unit = args.sft_steps_timed, "rows"
        work = f"{count} SFT steps of {SFT_ROWS} worked solutions"
        variants = {f"one process, 2 threads, {SFT_ROWS} rows a step": (2, 1, 0),
                    f"two processes, 1 thread each, {SFT_ROWS // 2} rows a step each": (1, 2, 0)}
    else:
        count, unit = args.prompts, "tokens"
        work = f"{count} prompts x {SAMPLES} samples, at most {MAX_NEW_TOKENS} new tokens"
        variants = {"one process, 2 threads, 256 rows a chunk": (2, 1, 256),
                    "one process, 2 threads, 512 rows a chunk": (2, 1, 512),
                    "two processes, 1 thread each, 256 rows a chunk": (1, 2, 256)}
    running = {name: Variant(args.work, model_dir, threads, parts, count, rows)
               for name, (threads, parts, rows) in variants.items()}
    seconds = {name: [] for name in variants}
    amount = {}  # tokens sampled or rows trained per call
    try:
        for _ in range(args.repeats):
            for name, variant in running.items():
                wall, amount[name] = variant.run()
                seconds[name].append(wall)
    finally:
        for variant in running.values():
            variant.close()
    print(f"{work}; median of {args.repeats} alternating calls")
    base = sorted(seconds[next(iter(variants))])[args.repeats // 2]
    for name, values in seconds.items():
        median = sorted(values)[args.repeats // 2]
        print(f"  {name}: {median:.2f} s, {amount[name] / median:.0f} {unit}/s ({base / median:.2f}x)")


if __name__ == "__main__":
    main()
