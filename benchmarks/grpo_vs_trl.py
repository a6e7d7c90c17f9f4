"""GRPO steps per second, ours against TRL's GRPOTrainer, on the same model, prompts and hyper-parameters.

    OMP_NUM_THREADS=1 python benchmarks/grpo_vs_trl.py                    # 5 measured steps each (a few minutes)
    OMP_NUM_THREADS=1 python benchmarks/grpo_vs_trl.py --steps 20 --eval-prompts 128

Needs the bench extra (`pip install -e ".[bench]"`, for `trl`). Builds the tiny model and a short SFT of it
once, into WORKDIR/sft (reused by later runs), then trains two copies of it, one with each framework, on the
CPU: 16 prompts x 8 samples per step from the built-in math train tasks (step k takes the same 16 prompts on
both sides), the same completion cap, learning rate (constant), beta 0 (no reference model), clip range
(0.2 low, 0.28 high), token-mean loss, rewards scaled by the group's std, AdamW betas (0.9, 0.99), gradient
clip 1.0, temperature 1.0 and the same math verifier as reward.

The two alternate in one process: TRL's `trainer.train()` drives, and a callback at the end of each of its
optimiser steps runs one of our steps, so machine load hits both alike. A TRL step is timed from the end
of our previous step to the end of its own (its generation, reward, loss and optimiser step); our step is
generation, verification, `policy_gradient_update` (GRPO) and the scheduler step, the loop body of `reasoner.training.loop.train`
without its logging and checkpoints (TRL's logging and saving are off too). The first `--warmup` steps of
each are not timed.

Printed after the run: each side's steps per second with the time per phase of ours, the mean training
reward over the measured steps, and the mean reward of each final policy on held-out math prompts (sampled
with the same sampler and seed for both, with its standard error); the last line ends in `ratio X.XX`,
our steps per second over TRL's. Our `skip_equal_groups` default (groups whose rewards are all equal carry
no gradient and are not forwarded) is kept unless `--keep-equal-groups`; TRL forwards them with zero
advantage (the same gradient; with the token-mean loss TRL's denominator also counts their tokens).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import verifiers  # noqa: E402
from data.synthetic import generate as builtin_tasks  # noqa: E402
from reasoner.training import distributed  # noqa: E402
from reasoner.config import PRECISIONS, SamplingConfig, TrainConfig  # noqa: E402
from reasoner.config import SamplingParams  # noqa: E402
from reasoner.generation.hf import HFGenerator  # noqa: E402
from reasoner.modeling import init_model, load_model, load_tokenizer  # noqa: E402
from reasoner.training.rollout import verify_groups  # noqa: E402
from reasoner.training.sft import train_sft  # noqa: E402
from reasoner.training.policy_gradient import Settings, policy_gradient_update  # noqa: E402
from reasoner.training.loop import Learner, rollout_dtype, step_seed  # noqa: E402
from reasoner.precision import autocast_dtype  # noqa: E402


def load_start_model(model: str, workdir: str, sft_steps: int):
    """(model, tokenizer) of the benchmarks: the directory given, else the start model built here."""
    model_dir = Path(model) if model else build_start_model(Path(workdir), sft_steps)
    return load_model(model_dir).eval(), load_tokenizer(model_dir)


def build_start_model(workdir: Path, sft_steps: int) -> Path:
    """init-model (tiny) and a short SFT on worked math and code solutions, once per WORKDIR."""
    sft_dir = workdir / f"sft{sft_steps}"
    if (sft_dir / "config.json").exists():
        return sft_dir
    init_dir = init_model(workdir / "init", "tiny")
    model, tokenizer = load_model(init_dir), load_tokenizer(init_dir)
    tasks = builtin_tasks("math", "train", 2000) + builtin_tasks("code", "train", 500)
    t0 = time.time()
    train_sft(model, tokenizer, tasks, steps=sft_steps, batch_size=64, lr=2e-3, warmup_steps=min(30, sft_steps // 5),
              weight_decay=0.01, seed=0)
    print(f"sft: {sft_steps} steps in {time.time() - t0:.0f}s -> {sft_dir}", flush=True)
    model.save_pretrained(sft_dir)
    tokenizer.save_pretrained(sft_dir)
    return sft_dir


class Ours:
    """Our GRPO step: sample, verify, update; timed per phase."""

    def __init__(self, model_dir: Path, tasks, args):
        self.model, self.tokenizer = load_model(model_dir), load_tokenizer(model_dir)
        self.config = TrainConfig(
            prompts_per_step=args.prompts, group_size=args.group_size, lr=args.lr, warmup_steps=0, grad_clip=1.0,
            sampling=SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=1.0), beta=0.0,
            clip_low=0.2, clip_high=0.28, aggregation="token_mean", micro_batch_size=args.micro_batch,
            skip_equal_groups=not args.keep_equal_groups, precision=args.precision, seed=0)
        self.engine = distributed.make_engine(self.model, self.config.lr, 0, self.config.grad_clip)
        self.autocast = autocast_dtype(self.config.precision, self.model)  # as `reasoner train` does
        self.generator = HFGenerator(self.model, self.tokenizer, dtype=rollout_dtype("auto", 2, self.autocast))
        self.tasks, self.step = tasks, 0
        self.times: list[dict] = []
        self.rewards: list[float] = []

    def run_step(self) -> None:
        c = self.config
        batch_tasks = self.tasks[self.step * c.prompts_per_step:(self.step + 1) * c.prompts_per_step]
        params = SamplingParams(c.sampling.max_new_tokens, 1.0, 1.0, step_seed(c.seed, self.step))
        t0 = time.perf_counter()
        groups = self.generator.generate([t.prompt for t in batch_tasks], c.group_size, params)
        t1 = time.perf_counter()
        rollout = verify_groups(batch_tasks, groups)
        t2 = time.perf_counter()
        policy_gradient_update(Settings.of("grpo", c), Learner(self.model, self.tokenizer, self.engine, None,
                                                               self.autocast), rollout)
        self.engine.schedule()
        self.generator.load_weights(self.model)
        t3 = time.perf_counter()
        self.times.append({"generate": t1 - t0, "verify": t2 - t1, "update": t3 - t2, "step": t3 - t0})
        self.rewards.append(float(rollout.rewards.mean()))
        self.step += 1


def math_reward(prompts, completions, reference, **kwargs) -> list[float]:
    """TRL reward function: the same math verifier, on the assistant message's text."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [v.reward for v in verifiers.get("math").verify_batch(list(zip(texts, reference)))]


def make_trl(model_dir: Path, tasks, args, workdir: Path, on_step_end):
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    total = args.warmup + args.steps
    completions = args.prompts * args.group_size
    config = GRPOConfig(
        output_dir=str(workdir / "trl"), max_steps=total,
        # TRL counts its batch in completions: one optimiser step = per_device_train_batch_size x
        # gradient_accumulation_steps completions, generated at once (steps_per_generation = accumulation).
        per_device_train_batch_size=args.micro_batch, gradient_accumulation_steps=completions // args.micro_batch,
        num_generations=args.group_size, max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, adam_beta1=0.9, adam_beta2=0.99,
        weight_decay=0.0, max_grad_norm=1.0, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo",
        scale_rewards="group", num_iterations=1, shuffle_dataset=False, use_cpu=True, bf16=args.bf16, fp16=False,
        report_to="none", logging_strategy="no", save_strategy="no", disable_tqdm=True, seed=0,
        dataloader_num_workers=0, log_completions=False)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": t.prompt}], "reference": t.reference}
                                 for t in tasks[:total * args.prompts]])

    class Alternate(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            on_step_end(state, kwargs["model"])

    return GRPOTrainer(model=load_model(model_dir), reward_funcs=[math_reward], args=config, train_dataset=dataset,
                       processing_class=load_tokenizer(model_dir), callbacks=[Alternate()])


def heldout_reward(model, tokenizer, tasks, n: int, max_new_tokens: int) -> tuple[float, float]:
    """Mean reward (and its standard error over prompts) of a policy on held-out prompts, fixed seed."""
    groups = HFGenerator(model, tokenizer).generate([t.prompt for t in tasks], n, SamplingParams(max_new_tokens, 1.0, 1.0, 4321))
    per_prompt = verify_groups(tasks, groups).rewards.mean(-1).numpy()
    return float(per_prompt.mean()), float(per_prompt.std(ddof=1) / math.sqrt(len(per_prompt)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="measured steps of each")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps of each before measuring")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=8, help="samples per prompt")
    parser.add_argument("--micro-batch", type=int, default=64, help="completions per forward/backward (both)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="completion length cap (both)")
    parser.add_argument("--lr", type=float, default=5e-4, help="learning rate (both, constant)")
    parser.add_argument("--sft-steps", type=int, default=200, help="SFT steps of the start model")
    parser.add_argument("--eval-prompts", type=int, default=64, help="held-out prompts for the final reward")
    parser.add_argument("--eval-samples", type=int, default=4, help="samples per held-out prompt")
    parser.add_argument("--keep-equal-groups", action="store_true",
                        help="ours forwards groups whose rewards are all equal too, as TRL does")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS,
                        help="training precision of both (ours: --precision; TRL: bf16=True when it resolves to "
                             "bfloat16, as accelerate's CPU autocast)")
    parser.add_argument("--workdir", default="runs/bench_grpo_vs_trl", help="start model and TRL's output dir")
    args = parser.parse_args()
    if (args.prompts * args.group_size) % args.micro_batch:
        parser.error("--micro-batch must divide prompts x group-size")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    logging.getLogger("transformers").setLevel(logging.ERROR)
    workdir = Path(args.workdir)
    start = build_start_model(workdir, args.sft_steps)
    tasks = builtin_tasks("math", "train", (args.warmup + args.steps) * args.prompts)

    ours = Ours(start, tasks, args)
    args.bf16 = ours.autocast == torch.bfloat16  # TRL trains in the precision ours resolved to
    trl_times: list[float] = []
    mark = [0.0]

    def after_trl_step(state, trl_model) -> None:
        trl_times.append(time.perf_counter() - mark[0])
        print(f"step {state.global_step}: trl {trl_times[-1]:.2f}s", end="", flush=True)
        ours.run_step()
        print(f", ours {ours.times[-1]['step']:.2f}s", flush=True)
        mark[0] = time.perf_counter()

    trainer = make_trl(start, tasks, args, workdir, after_trl_step)
    trl_rewards: list[float] = []
    score = trainer._calculate_rewards

    def recorded(inputs, prompts, completions, completion_ids_list):
        rewards = score(inputs, prompts, completions, completion_ids_list)
        trl_rewards.append(float(rewards.mean()))
        return rewards

    trainer._calculate_rewards = recorded
    mark[0] = time.perf_counter()
    trainer.train()

    w = args.warmup
    ours_s = float(np.mean([t["step"] for t in ours.times[w:]]))
    trl_s = float(np.mean(trl_times[w:]))
    heldout = builtin_tasks("math", "heldout", args.eval_prompts)
    tokenizer = load_tokenizer(start)
    final = {name: heldout_reward(model, tokenizer, heldout, args.eval_samples, args.max_new_tokens)
             for name, model in (("ours", ours.model), ("trl", trainer.model))}
    phases = {k: float(np.mean([t[k] for t in ours.times[w:]])) for k in ("generate", "verify", "update")}
    print(f"\n{args.steps} measured steps each ({args.warmup} warm-up), {args.prompts} prompts x {args.group_size} "
          f"samples, max {args.max_new_tokens} new tokens, lr {args.lr}, beta 0, clip 0.2/0.28, torch threads "
          f"{torch.get_num_threads()}, {'bfloat16 mixed precision' if args.bf16 else 'float32'} (both)"
          f"{', ours keeps equal-reward groups' if args.keep_equal_groups else ''}")
    print(f"ours: {1 / ours_s:.3f} steps/s ({ours_s:.2f}s/step: generate {phases['generate']:.2f}s, verify "
          f"{phases['verify']:.2f}s, update {phases['update']:.2f}s), train reward {np.mean(ours.rewards[w:]):.3f}, "
          f"held-out reward after the run {final['ours'][0]:.3f} +- {final['ours'][1]:.3f}")
    print(f"trl:  {1 / trl_s:.3f} steps/s ({trl_s:.2f}s/step), train reward {np.mean(trl_rewards[w:]):.3f}, "
          f"held-out reward after the run {final['trl'][0]:.3f} +- {final['trl'][1]:.3f}")
    print(f"steps per second, ours over TRL: ratio {trl_s / ours_s:.2f}")


if __name__ == "__main__":
    main()
