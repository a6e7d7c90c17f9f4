"""One update of each --algo given (GRPO, RLOO, REINFORCE++, GSPO, CISPO, PPO, DPO) on a fixed batch, each
from a fresh model and engine, in one process or as one of several ranks (run by test_distributed.py). A
job is ALGO or ALGO:PRECISION; each writes OUTDIR/ALGO-PRECISION.pt. One launch runs them all: starting the
launcher and the ranks costs far more than an update of the micro model.

    python tests/distributed_step.py MODEL OUTDIR STAGE MICRO JOB[,JOB...]                                # one process
    deepspeed --num_gpus 2 --no_local_rank tests/distributed_step.py MODEL OUTDIR STAGE MICRO JOB[,JOB...]  # two ranks
"""

import sys

import torch

from data.records import Task
from reasoner.training import distributed
from reasoner.config import PPOConfig, TrainConfig
from reasoner.generation import Sample
from reasoner.modeling import load_model, load_tokenizer
from reasoner.training.rollout import Rollout
from reasoner.training.dpo import PairBatch, dpo_update, reference_logprobs
from reasoner.training.policy_gradient import Settings, policy_gradient_update
from reasoner.training.loop import Learner
from reasoner.training.ppo import PPO, PPOSettings
from reasoner.precision import autocast_dtype
from verifiers import Verdict

GROUPS, GROUP_SIZE, PAIRS = 4, 4, 6


def response_ids(tokenizer, g: int, i: int) -> list[int]:
    return [(7 * g + 3 * i + j) % 200 + 10 for j in range(3 + (g + i) % 5)] + [tokenizer.eos_token_id]


def fixed_rollout(tokenizer, groups: range) -> Rollout:
    """Deterministic prompts, responses of varied lengths and rewards (no group all-equal but one)."""
    tasks, samples, verdicts = [], [], []
    for g in groups:
        tasks.append(Task(f"t{g}", f"What is {g} + {g + 1}?", "math", str(2 * g + 1)))
        for i in range(GROUP_SIZE):
            ids = response_ids(tokenizer, g, i)
            samples.append(Sample(ids, "", [0.0] * len(ids), "stop"))
            correct = (g + i) % 3 == 0 and g != 3  # group 3 all wrong: skipped as equal by GRPO
            verdicts.append(Verdict(correct, float(correct), "fixed", "x"))
    return Rollout(tasks, samples, verdicts, GROUP_SIZE)


def fixed_pairs(tokenizer) -> list[dict]:
    """Deterministic (chosen, rejected) pairs of varied lengths; every rank holds all of them."""
    return [{"id": f"t{k}", "prompt": f"What is {k} + {k + 1}?", "chosen_ids": response_ids(tokenizer, k, 0),
             "rejected_ids": response_ids(tokenizer, k + 1, 3), "meta": {}} for k in range(PAIRS)]


def main(model_dir: str, out_dir: str, zero_stage: int, micro_batch_size: int, jobs: str) -> None:
    distributed.init()
    for job in jobs.split(","):
        algo, _, precision = job.partition(":")
        update(model_dir, f"{out_dir}/{algo}-{precision or 'float32'}.pt", zero_stage, micro_batch_size, algo,
               precision or "float32")
    distributed.shutdown()


def update(model_dir: str, out: str, zero_stage: int, micro_batch_size: int, algo: str, precision: str) -> None:
    rank, world = distributed.rank(), distributed.world_size()
    torch.manual_seed(0)
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    config = TrainConfig(lr=1e-2, warmup_steps=1, micro_batch_size=micro_batch_size, beta=0.1 if algo.startswith(("ppo", "reinforce++")) else 0.0,
                         grad_clip=1e9, zero_stage=zero_stage, ppo=PPOConfig(critic_lr=1e-2))
    reference = distributed.frozen_copy(model, zero_stage) if config.beta or algo == "dpo" else None
    ppo = PPO(PPOSettings.of(config), model.config.hidden_size) if algo == "ppo" else None
    engine = distributed.make_engine(model, config.lr, config.warmup_steps, config.grad_clip, zero_stage=zero_stage)
    learner = Learner(model, tokenizer, engine, reference, autocast_dtype(precision, model))
    if algo == "dpo":
        pairs = fixed_pairs(tokenizer)
        ref = reference_logprobs(reference, tokenizer, pairs, 4, __import__("pathlib").Path(out + ".ref.pt"))
        stats = dpo_update(config.dpo, config.micro_batch_size, learner, PairBatch(pairs, ref))
    else:
        rollout = fixed_rollout(tokenizer, range(GROUPS)[rank::world])
        stats = ppo.update(learner, rollout) if ppo else policy_gradient_update(Settings.of(algo, config), learner, rollout)
    weights = engine.full_state_dict()
    if ppo:  # the value head has its own optimiser, outside the engine: whole on every rank
        weights = {**weights, **{f"value_head.{k}": v for k, v in ppo.head.state_dict().items()}}
    if distributed.is_main():
        torch.save({"weights": {k: v.detach().clone() for k, v in weights.items()}, "loss": stats["loss"],
                    "grad_norm": stats["grad_norm"], "stats": stats}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
