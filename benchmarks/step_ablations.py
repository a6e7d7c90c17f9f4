"""What each speed measure of the GRPO step (and of SFT) buys: every variant timed against the current code, alternating.

    python benchmarks/step_ablations.py                 # grpo_vs_trl.py's start model, torch's default threads
    OMP_NUM_THREADS=1 python benchmarks/step_ablations.py --repeats 8

Generation (16 prompts x 8 samples, 48 new tokens): the current sampler (the lean Llama decoder with a
preallocated cache, in the training precision, bfloat16 where the CPU has it) against the model's own forward
with a growing cache, against a float32 sampler, and against torch.multinomial; the current row dropping (once 1/16 of
the batch has ended) against dropping at every end and against never dropping (stopping only when every
row has ended). Verification (32 code tasks x 8 samples): each distinct program run once in the sandbox
against every sample run. Update (policy_gradient_update, GRPO, on the rollouts of those prompts): bfloat16 mixed
precision against float32; skipping groups of equal rewards or not; and with every group kept, the real
tokens only (reasoner/training/unpadded.py) against the model's own padded forward, micro-batches of rows
sorted by length and trimmed of all-padding columns or not, and two epochs per batch (the second pass's old
log-probs are the first pass's). SFT step (forward and backward of 64 worked solutions): the current step
against the model's own padded forward, bfloat16 with plain attention against float32, against bfloat16
with PyTorch's fused attention, and against the output layer run on every column (the model's own loss). Scoring pass (forward and backward of one 64-row micro-batch): the model's
default KV cache against use_cache=False, and the chosen token's log-prob as logit minus log-sum-exp against
a gather from a full log-softmax. `--threads 1,2` repeats everything at each torch thread count. The first
call of each variant is not timed; the machine's load drifts, so only the ratios within one line mean much.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import reasoner.generation.hf as generation  # noqa: E402
import verifiers  # noqa: E402
import verifiers.code_tests as code_tests  # noqa: E402
import reasoner.training.sft as sft  # noqa: E402
import reasoner.training.batches as batches  # noqa: E402
import reasoner.training.rollout as rollout_module  # noqa: E402
import reasoner.training.unpadded as unpadded  # noqa: E402
from data.synthetic import generate as builtin_tasks  # noqa: E402
from reasoner.training import distributed  # noqa: E402
from reasoner.config import SamplingParams, TrainConfig  # noqa: E402
from reasoner.training.policy_gradient import Settings, policy_gradient_update  # noqa: E402
from reasoner.precision import autocast_dtype, mixed_precision  # noqa: E402
from reasoner.training.loop import Learner  # noqa: E402
from reasoner.training.rollout import verify_groups  # noqa: E402


def multinomial_draw(logits, params, rng):
    """The sampler as it was: a full log-softmax, then torch.multinomial."""
    logprobs = torch.log_softmax(logits.float() / max(params.temperature, 1e-5), dim=-1)
    tokens = torch.multinomial(logprobs.exp(), 1, generator=rng).squeeze(-1)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


def forward_every_row(model, batch, dtype=None, hidden=False):
    """The scoring forward as it was: every row with its own copy of its prompt, in one padded pass."""
    width = batch["prompt_width"]
    keep = batch["input_ids"].shape[1] - width + 1
    with mixed_precision(model, dtype):
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    position_ids=batch["position_ids"], logits_to_keep=keep, output_hidden_states=hidden)
    rows, columns = batch["attention_mask"][:, width:].nonzero(as_tuple=True)
    states = out.hidden_states[-1][:, -keep:][rows, columns] if hidden else None
    return rollout_module.ResponseOutputs(out.logits[rows, columns], states, rows, columns, (len(out.logits), keep - 1))


llama_unpadded = unpadded.supports


def padded_forward(on: bool):
    """Make the training forwards run the model's own padded forward (`on` False) or the unpadded one."""
    unpadded.supports = llama_unpadded if on else (lambda model: False)


def alternate(variants: dict, repeats: int) -> dict[str, float]:
    """Mean seconds per call of each variant, calls interleaved, the first of each untimed."""
    seconds = dict.fromkeys(variants, 0.0)
    for repeat in range(repeats + 1):
        for name, call in variants.items():
            t0 = time.perf_counter()
            call(repeat)
            if repeat:
                seconds[name] += (time.perf_counter() - t0) / repeats
    return seconds


def show(title: str, seconds: dict[str, float]) -> None:
    base = next(iter(seconds.values()))
    print(f"{title}: " + ", ".join(f"{name} {s:.3f}s ({s / base:.2f}x)" for name, s in seconds.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="", help="model directory (default: grpo_vs_trl.py's start model)")
    parser.add_argument("--workdir", default="runs/bench_grpo_vs_trl")
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=4, help="timed calls of each variant")
    parser.add_argument("--threads", default=str(torch.get_num_threads()), help="comma-separated torch thread counts")
    args = parser.parse_args()
    for threads in map(int, args.threads.split(",")):
        torch.set_num_threads(threads)
        print(f"torch threads {threads}", flush=True)
        measure(args)


def measure(args) -> None:
    from grpo_vs_trl import load_start_model

    model, tokenizer = load_start_model(args.model, args.workdir, args.sft_steps)
    tasks = builtin_tasks("math", "train", 16)
    prompts = [t.prompt for t in tasks]
    params = lambda seed: SamplingParams(48, 1.0, 1.0, seed)  # noqa: E731
    current, lean_decoder = generation.sample_tokens, generation.supports
    autocast = autocast_dtype("auto", model)

    def generate_with(draw=current, drop_fraction=1 / 16, dtype=autocast, lean=True):
        generator = generation.HFGenerator(model, tokenizer, drop_fraction=drop_fraction, dtype=dtype)

        def call(seed):
            generation.sample_tokens = draw
            generation.supports = lean_decoder if lean else (lambda m: False)
            try:
                return generator.generate(prompts, 8, params(seed))
            finally:
                generation.sample_tokens, generation.supports = current, lean_decoder
        return call

    show("generate", alternate({"current": generate_with(),
                                "model's forward and DynamicCache": generate_with(lean=False),
                                "float32 sampler": generate_with(dtype=None),
                                "neither (float32, model's forward)": generate_with(dtype=None, lean=False),
                                "torch.multinomial": generate_with(multinomial_draw),
                                "drop at every end": generate_with(drop_fraction=0.0),
                                "never drop": generate_with(drop_fraction=1.0)}, args.repeats))

    rollouts = [verify_groups(tasks, generation.HFGenerator(model, tokenizer).generate(prompts, 8, params(seed)))
                for seed in range(args.repeats + 1)]
    print(f"rollouts: reward {sum(float(r.rewards.mean()) for r in rollouts) / len(rollouts):.3f}, share of groups "
          f"with equal rewards {sum(float((r.rewards.std(-1) == 0).float().mean()) for r in rollouts) / len(rollouts):.2f}")

    trim = batches.trim_padding

    shared_prompts = rollout_module.response_forward

    code_tasks = builtin_tasks("code", "train", 32)
    code_groups = generation.HFGenerator(model, tokenizer).generate([t.prompt for t in code_tasks], 8, params(0))
    items = [(t.verifier, s.graded_text, t.reference) for t, group in zip(code_tasks, code_groups) for s in group]
    distinct = code_tests.run_distinct

    def verify_with(run_each_distinct_once):
        def call(_):
            code_tests.run_distinct = distinct if run_each_distinct_once else (
                lambda sandbox, jobs, workers=None: sandbox.map(jobs, workers))
            try:
                return verifiers.verify_many(items)
            finally:
                code_tests.run_distinct = distinct
        return call

    print(f"code samples: {len(items)}, distinct programs: {len({text for _, text, _ in items})}")
    show("verify (32 code tasks x 8)", alternate({"current": verify_with(True),
                                                  "every sample run": verify_with(False)}, args.repeats))

    def update_with(skip_equal_groups, trim_padding=True, dtype=autocast, share_prompts=True, epochs=1, real_tokens_only=True):
        config = TrainConfig(warmup_steps=0, lr=0.0, skip_equal_groups=skip_equal_groups,
                             epochs_per_batch=epochs)  # lr 0: the model stays
        engine = distributed.make_engine(model, config.lr, 0, config.grad_clip)

        def call(i):
            batches.trim_padding = trim if trim_padding else (lambda batch: batch)
            rollout_module.response_forward = shared_prompts if share_prompts else forward_every_row
            padded_forward(real_tokens_only)
            try:
                return policy_gradient_update(Settings.of("grpo", config),
                                              Learner(model, tokenizer, engine, None, dtype), rollouts[i])
            finally:
                batches.trim_padding, rollout_module.response_forward = trim, shared_prompts
                padded_forward(True)
        return call

    show("update", alternate({"current": update_with(True), "no equal-group skip": update_with(False)}, args.repeats))
    show("update, every group kept", alternate({"current": update_with(False),
                                                "float32": update_with(False, dtype=None),
                                                "model's own padded forward": update_with(False, real_tokens_only=False),
                                                "each row its own prompt": update_with(False, share_prompts=False),
                                                "no padding trim": update_with(False, False),
                                                "two epochs per batch": update_with(False, epochs=2)}, args.repeats))

    solutions = sft.collate(sft.tokenize_pairs(tokenizer, builtin_tasks("math", "train", 48)
                                               + builtin_tasks("code", "train", 16)), tokenizer.pad_token_id)

    def sft_step_with(dtype=autocast, fused_attention=False, response_columns_only=True, real_tokens_only=True):
        def call(_):
            model.train()
            padded_forward(real_tokens_only)
            with mixed_precision(model, dtype):
                if fused_attention:
                    model.set_attn_implementation("sdpa")  # back from the block's eager
                loss = sft.response_loss(model, solutions) if response_columns_only else model(**solutions).loss
            loss.backward()
            model.zero_grad(set_to_none=True)
            model.eval()
            padded_forward(True)
        return call

    show("sft step (64 worked solutions) fwd+bwd",
         alternate({"current": sft_step_with(), "float32": sft_step_with(None),
                    "model's own padded forward": sft_step_with(real_tokens_only=False),
                    "bfloat16, fused attention": sft_step_with(fused_attention=True),
                    "output layer on every column": sft_step_with(response_columns_only=False)}, args.repeats))

    batch = {k: v[:64] if torch.is_tensor(v) else v for k, v in batches.rollout_batch(tokenizer, rollouts[0]).items()}
    width, targets = batch["prompt_width"], batch["input_ids"][:, batch["prompt_width"]:]

    def score_with(use_cache, full_log_softmax):
        def call(_):
            cache = {} if use_cache is None else {"use_cache": use_cache}
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           position_ids=batch["position_ids"], **cache).logits[:, width - 1:-1].float()
            if full_log_softmax:
                logp = torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
            else:
                logp = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, -1)
            (logp * batch["response_mask"]).sum().backward()
            model.zero_grad(set_to_none=True)
        return call

    model.train()
    show(f"score {tuple(batch['input_ids'].shape)} fwd+bwd",
         alternate({"current": score_with(None, False), "use_cache=False": score_with(False, False),
                    "full log-softmax": score_with(None, True)}, args.repeats))


if __name__ == "__main__":
    main()
