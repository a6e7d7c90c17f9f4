"""Generation tokens per second: our KV-cache sampler (HFGenerator) against plain `model.generate`.

    OMP_NUM_THREADS=1 python benchmarks/generation.py                       # the start model of grpo_vs_trl.py
    OMP_NUM_THREADS=1 python benchmarks/generation.py --model runs/x/sft/model --prompts 32 --n 8 --repeats 5

The same batch for both: `--prompts` built-in math train prompts through the chat template, `--n` samples
each, at most `--max-new-tokens`, temperature 1, no top-k or top-p. `model.generate` gets the prompts
left-padded with `do_sample=True, num_return_sequences=n`; HFGenerator encodes each prompt once and copies
its cache n times, and drops rows that have ended. Both stop on the same ids (`stop_token_ids`). A generated
token is one up to and including the end-of-sequence token (padding after it is not counted). The two alternate, after one untimed call each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from data.synthetic import generate as builtin_tasks  # noqa: E402
from reasoner.config import SamplingParams  # noqa: E402
from reasoner.generation import stop_token_ids  # noqa: E402
from reasoner.generation.hf import HFGenerator  # noqa: E402
from reasoner.modeling import render_prompt  # noqa: E402


def ours(generator: HFGenerator, prompts: list[str], n: int, max_new_tokens: int, seed: int) -> int:
    groups = generator.generate(prompts, n, SamplingParams(max_new_tokens, 1.0, 1.0, seed))
    return sum(len(s.token_ids) for g in groups for s in g)


@torch.inference_mode()
def hf_generate(model, tokenizer, prompts: list[str], n: int, max_new_tokens: int, seed: int) -> int:
    torch.manual_seed(seed)
    texts = [render_prompt(tokenizer, p) for p in prompts]
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    eos_ids = torch.tensor(sorted(stop_token_ids(model, tokenizer)))  # the ids HFGenerator stops on
    out = model.generate(**enc, do_sample=True, num_return_sequences=n, max_new_tokens=max_new_tokens,
                         temperature=1.0, top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=eos_ids.tolist())
    new = out[:, enc.input_ids.shape[1]:]  # [P * n, T]
    is_eos = torch.isin(new, eos_ids)
    ended = is_eos.int().cumsum(-1)
    return int(((ended == 0) | ((ended == 1) & is_eos)).sum())  # up to the first end-of-sequence token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="", help="model directory (default: grpo_vs_trl.py's start model)")
    parser.add_argument("--workdir", default="runs/bench_grpo_vs_trl", help="where that start model is built")
    parser.add_argument("--sft-steps", type=int, default=200, help="SFT steps of that start model")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls of each")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from grpo_vs_trl import load_start_model

    model, tokenizer = load_start_model(args.model, args.workdir, args.sft_steps)
    generator = HFGenerator(model, tokenizer)
    prompts = [t.prompt for t in builtin_tasks("math", "train", args.prompts)]
    runs = {"ours": lambda seed: ours(generator, prompts, args.n, args.max_new_tokens, seed),
            "model.generate": lambda seed: hf_generate(model, tokenizer, prompts, args.n, args.max_new_tokens, seed)}
    totals = {name: [0, 0.0] for name in runs}
    for repeat in range(args.repeats + 1):
        for name, run in runs.items():
            t0 = time.perf_counter()
            tokens = run(repeat)
            if repeat:  # the first call of each warms up
                totals[name][0] += tokens
                totals[name][1] += time.perf_counter() - t0
    rate = {name: tokens / seconds for name, (tokens, seconds) in totals.items()}
    print(f"{args.prompts} prompts x {args.n} samples, max {args.max_new_tokens} new tokens, {args.repeats} timed "
          f"calls each, torch threads {torch.get_num_threads()}")
    for name, (tokens, seconds) in totals.items():
        print(f"{name}: {tokens} tokens in {seconds:.2f}s, {rate[name]:.0f} tokens/s")
    print(f"tokens per second, ours over model.generate: ratio {rate['ours'] / rate['model.generate']:.2f}")


if __name__ == "__main__":
    main()
