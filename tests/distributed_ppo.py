"""PPO's critic under DeepSpeed, in one process or as one of two ranks (run by test_ppo.py).

    python tests/distributed_ppo.py warmup MODEL OUT.pt STAGE MICRO        # one process
    deepspeed --num_gpus 2 --no_local_rank tests/distributed_ppo.py warmup MODEL OUT.pt STAGE MICRO
    deepspeed --num_gpus 2 --no_local_rank tests/distributed_ppo.py train MODEL RUN_DIR STAGE STEPS

`warmup`: a critic warm-up update, then a PPO update, on distributed_step.py's fixed batch; writes whether the
policy came out of the warm-up bit-identical, and the weights and statistics after the second update.
`train`: the training loop for STEPS steps (the first a warm-up), resuming from RUN_DIR's last checkpoint.
"""

import sys

import torch

from data.synthetic import generate
from distributed_step import GROUPS, fixed_rollout
from reasoner.config import PPOConfig, SamplingConfig, TrainConfig
from reasoner.modeling import load_model, load_tokenizer
from reasoner.training import distributed
from reasoner.training.loop import Learner, train
from reasoner.training.ppo import PPO, PPOSettings, ppo_algorithm


def warmup_then_update(model_dir: str, out: str, zero_stage: int, micro_batch_size: int) -> None:
    rank, world = distributed.rank(), distributed.world_size()
    torch.manual_seed(0)
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    config = TrainConfig(lr=1e-2, warmup_steps=1, micro_batch_size=micro_batch_size, beta=0.1, grad_clip=1e9,
                         zero_stage=zero_stage, ppo=PPOConfig(critic_lr=1e-2, critic_warmup_steps=1))
    reference = distributed.frozen_copy(model, zero_stage)
    ppo = PPO(PPOSettings.of(config), model.config.hidden_size)
    engine = distributed.make_engine(model, config.lr, config.warmup_steps, config.grad_clip, zero_stage=zero_stage)
    learner = Learner(model, tokenizer, engine, reference)
    rollout = fixed_rollout(tokenizer, range(GROUPS)[rank::world])
    start = {k: v.clone() for k, v in engine.full_state_dict().items()}
    warm = ppo.update(learner, rollout)
    kept = all(torch.equal(v, start[k]) for k, v in engine.full_state_dict().items())
    stats = ppo.update(learner, rollout)
    weights = {**engine.full_state_dict(), **{f"value_head.{k}": v for k, v in ppo.head.state_dict().items()}}
    if distributed.is_main():
        torch.save({"kept": kept, "warmup": warm, "stats": stats,
                    "weights": {k: v.detach().clone() for k, v in weights.items()}}, out)


def train_steps(model_dir: str, run_dir: str, zero_stage: int, steps: int) -> None:
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    # punish truncation so that the random micro model's over-long answers give the critic something to learn
    config = TrainConfig(output=run_dir, algo="ppo", steps=steps, prompts_per_step=2, group_size=2,
                         sampling=SamplingConfig(max_new_tokens=6), checkpoint_every=1, micro_batch_size=16,
                         zero_stage=zero_stage, truncation="punish", beta=0.1, ppo=PPOConfig(critic_warmup_steps=1))
    train(config, model, tokenizer, ppo_algorithm(config, model, generate("math", "train", 4, 0)))


if __name__ == "__main__":
    mode, model_dir, out, stage, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    distributed.init()
    (warmup_then_update if mode == "warmup" else train_steps)(model_dir, out, stage, count)
    distributed.shutdown()
