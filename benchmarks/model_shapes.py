"""What the embedded model's depth costs: SFT steps and sampling for the tiny preset at 4, 3 and 2 layers.

    python benchmarks/model_shapes.py                 # ~2 min on two cores
    python benchmarks/model_shapes.py --layers 4 3 --repeats 6

Each shape is the tiny preset (reasoner/modeling.py) with `num_hidden_layers` changed, randomly initialised
with the same seed and the same tokenizer. Per shape and repeat, alternating between shapes:

- `--sft-steps` SFT steps of 64 built-in worked solutions (`reasoner sft`'s step: bfloat16 mixed precision
  where the CPU has it, forward, backward, gradient clipping and AdamW) with two torch threads;
- one sampling call of 16 built-in prompts x 8 samples, at most 64 new tokens, temperature 1, in the
  sampler the pipeline uses (`HFGenerator`, bfloat16 where the CPU has it) with one torch thread, as each
  of the pipeline's two sampling processes has. Random weights rarely sample the end token, so every row
  runs the full 64 tokens: the same work for every shape.

Prints the median seconds per SFT step and per sampling call, each beside the first shape's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from data.synthetic import generate as builtin_tasks  # noqa: E402
from reasoner.config import SamplingParams  # noqa: E402
from reasoner.generation.hf import HFGenerator  # noqa: E402
from reasoner.modeling import PRESETS, init_model, load_tokenizer  # noqa: E402
from reasoner.precision import autocast_dtype  # noqa: E402
from reasoner.training.sft import collate, sft_step  # noqa: E402
from two_cores import sft_examples  # noqa: E402

SFT_ROWS, PROMPTS, SAMPLES, MAX_NEW_TOKENS = 64, 16, 8, 64


def model_of_depth(init_dir: Path, layers: int) -> torch.nn.Module:
    """The tiny preset with `layers` decoder layers, initialised from seed 0."""
    config = AutoConfig.from_pretrained(init_dir, num_hidden_layers=layers)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


def sft_seconds(model, tokenizer, examples, steps: int, rng: random.Random) -> float:
    torch.set_num_threads(2)
    dtype = autocast_dtype("auto", model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    t0 = time.perf_counter()
    for _ in range(steps):
        sft_step(model, optimizer, collate(rng.sample(examples, SFT_ROWS), tokenizer.pad_token_id), dtype)
    model.eval()
    return (time.perf_counter() - t0) / steps


def sampling_seconds(model, tokenizer, prompts: list[str], seed: int) -> float:
    torch.set_num_threads(1)
    generator = HFGenerator(model, tokenizer, dtype=autocast_dtype("auto", model))
    t0 = time.perf_counter()
    generator.generate(prompts, SAMPLES, SamplingParams(MAX_NEW_TOKENS, 1.0, 1.0, seed))
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 3, 2])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--sft-steps", type=int, default=5, help="SFT steps timed per repeat")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        init_dir = init_model(Path(tmp) / "init", "tiny")
        tokenizer = load_tokenizer(init_dir)
        models = {layers: model_of_depth(init_dir, layers) for layers in args.layers}
    examples = sft_examples(tokenizer)
    prompts = [t.prompt for t in builtin_tasks("math", "train", PROMPTS)]
    rng = random.Random(0)
    for model in models.values():  # untimed warm-up of both kinds of work
        sft_seconds(model, tokenizer, examples, 1, rng)
        sampling_seconds(model, tokenizer, prompts[:2], 0)
    sft: dict[int, list[float]] = {layers: [] for layers in models}
    sampling: dict[int, list[float]] = {layers: [] for layers in models}
    for repeat in range(args.repeats):
        for layers, model in models.items():
            sft[layers].append(sft_seconds(model, tokenizer, examples, args.sft_steps, rng))
            sampling[layers].append(sampling_seconds(model, tokenizer, prompts, repeat + 1))

    print(f"tiny preset ({PRESETS['tiny']['hidden_size']} wide) by depth; median of {args.repeats} alternating "
          f"repeats; SFT: {SFT_ROWS} rows a step, two threads; sampling: {PROMPTS} prompts x {SAMPLES}, "
          f"{MAX_NEW_TOKENS} tokens, one thread")
    anchor = args.layers[0]
    sft_anchor, sampling_anchor = statistics.median(sft[anchor]), statistics.median(sampling[anchor])
    for layers, model in models.items():
        step, call = statistics.median(sft[layers]), statistics.median(sampling[layers])
        params = sum(p.numel() for p in model.parameters()) / 1e6
        print(f"{layers} layers ({params:.2f}M parameters): SFT step {step:.3f}s ({step / sft_anchor:.2f}x of "
              f"{anchor} layers), sampling {call:.3f}s ({call / sampling_anchor:.2f}x)")


if __name__ == "__main__":
    main()
