"""Arithmetic a 135M-parameter model can learn on the CPU: the GRPO run of README "A real model on the CPU".

    python benchmarks/small_arithmetic.py --output runs/arith     # writes train.jsonl and heldout.jsonl

The built-in math families (`data/synthetic.py`) are out of SmolLM2-135M-Instruct's reach (0 of 64 samples
right on 16 held-out addition and multiplication tasks, temperature 1), and GRPO learns nothing from groups
that are all wrong. These tasks keep the built-in prompt ("What is 7 + 5?") with smaller operands, asked for
a boxed answer, in three kinds the model gets right sometimes: `sum1` (one digit plus one digit), `product1`
(one digit times one digit) and `sum21` (two digits plus one). Train and held-out are split by the built-in
hash (`is_heldout`) of the operands in order, so "3 + 5" and "5 + 3" fall on the same side; the held-out file
takes every held-out task of `sum1` and `product1` and fills up to `--heldout` with `sum21`.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.records import Task, write_tasks  # noqa: E402
from data.synthetic import is_heldout  # noqa: E402

SUFFIX = " Put the final answer in \\boxed{}."
KINDS = {  # kind: (operator, its operand pairs)
    "sum1": ("+", [(a, b) for a in range(1, 10) for b in range(1, 10)]),
    "product1": ("*", [(a, b) for a in range(2, 10) for b in range(2, 10)]),
    "sum21": ("+", [(a, b) for a in range(10, 100) for b in range(1, 10)]),
}


def tasks(split: str, kind: str) -> list[Task]:
    op, pairs = KINDS[kind]
    pairs = [(a, b) for a, b in pairs if is_heldout(f"{min(a, b)} {op} {max(a, b)}") == (split == "heldout")]
    return [Task(f"{kind}/{split}/{i}", f"What is {a} {op} {b}?{SUFFIX}", "math", str(a + b if op == "+" else a * b),
                 {"family": "math", "kind": kind, "split": split}) for i, (a, b) in enumerate(pairs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="directory for train.jsonl and heldout.jsonl")
    parser.add_argument("--heldout", type=int, default=100, help="held-out tasks")
    parser.add_argument("--sum21-train", type=int, default=120, help="sum21 tasks among the training tasks")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    heldout = tasks("heldout", "sum1") + tasks("heldout", "product1")
    heldout += rng.sample(tasks("heldout", "sum21"), args.heldout - len(heldout))
    train = tasks("train", "sum1") + tasks("train", "product1") + rng.sample(tasks("train", "sum21"), args.sum21_train)
    rng.shuffle(train)
    out = Path(args.output)
    write_tasks(out / "train.jsonl", train)
    write_tasks(out / "heldout.jsonl", heldout)
    for name, split in (("train", train), ("heldout", heldout)):
        counts = {k: sum(t.meta["kind"] == k for t in split) for k in KINDS}
        print(f"{name}: {len(split)} tasks {counts}")


if __name__ == "__main__":
    main()
