"""One GRPO update on a fixed batch, in one process or as one of several ranks (run by test_distributed.py).

    python tests/distributed_step.py MODEL OUT.pt                                          # one process
    deepspeed --num_gpus 2 --no_local_rank tests/distributed_step.py MODEL OUT.pt [STAGE [MICRO]]  # two ranks
"""

import sys

import torch

from data.records import Task
from reasoner import distributed
from reasoner.config import TrainConfig
from reasoner.generation import Sample
from reasoner.modeling import load_model, load_tokenizer
from reasoner.rollout import Rollout
from reasoner.trainer import grpo_update
from verifiers import Verdict

GROUPS, GROUP_SIZE = 4, 4


def fixed_rollout(tokenizer, groups: range) -> Rollout:
    """Deterministic prompts, responses of varied lengths and rewards (no group all-equal but one)."""
    tasks, samples, verdicts = [], [], []
    for g in groups:
        tasks.append(Task(f"t{g}", f"What is {g} + {g + 1}?", "math", str(2 * g + 1)))
        for i in range(GROUP_SIZE):
            ids = [(7 * g + 3 * i + j) % 200 + 10 for j in range(3 + (g + i) % 5)] + [tokenizer.eos_token_id]
            samples.append(Sample(ids, "", [0.0] * len(ids), "stop"))
            correct = (g + i) % 3 == 0 and g != 3  # group 3 all wrong: skipped as equal
            verdicts.append(Verdict(correct, float(correct), "fixed", "x"))
    return Rollout(tasks, samples, verdicts, GROUP_SIZE)


def main(model_dir: str, out: str, zero_stage: int = 2, micro_batch_size: int = 3) -> None:
    distributed.init()
    rank, world = distributed.rank(), distributed.world_size()
    torch.manual_seed(0)
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    config = TrainConfig(lr=1e-2, warmup_steps=1, micro_batch_size=micro_batch_size, beta=0.0, grad_clip=1e9,
                         zero_stage=zero_stage)
    engine = distributed.make_engine(model, config.lr, config.warmup_steps, config.grad_clip, zero_stage=zero_stage)
    rollout = fixed_rollout(tokenizer, range(GROUPS)[rank::world])
    stats = grpo_update(config, model, None, tokenizer, engine, rollout)
    weights = engine.full_state_dict()
    if distributed.is_main():
        torch.save({"weights": {k: v.detach().clone() for k, v in weights.items()}, "loss": stats["loss"],
                    "grad_norm": stats["grad_norm"]}, out)
    distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:5]))
