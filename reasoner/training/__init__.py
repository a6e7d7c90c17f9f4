"""Training: one loop for every algorithm, and each algorithm's batches and update step.

    loop.py              the loop: resume, step cursor, metrics, alarms, checkpoints, held-out checks, final save
    batches.py           preparing an update: rows, sorting, micro-batches, sizes global across ranks
    groups.py            sampled and verified groups of the current policy (GRPO, PPO)
    dynamic_sampling.py  all-equal groups replaced by fresh ones; retired prompts re-estimated
    policy_gradient.py   the critic-free update steps: grpo, rloo, reinforce++(-baseline), gspo, cispo
    ppo.py, dpo.py       PPO's update step and critic; DPO's update step and rounds of pairs

The losses themselves are pure functions in `reasoner/algorithms/`.
"""

from __future__ import annotations

from functools import partial

from reasoner.training.dpo import dpo_algorithm
from reasoner.training.policy_gradient import VARIANTS, policy_gradient_algorithm
from reasoner.training.ppo import ppo_algorithm

ALGORITHMS = {**{name: partial(policy_gradient_algorithm, name) for name in VARIANTS},
              "ppo": ppo_algorithm, "dpo": dpo_algorithm}  # --algo -> (config, model, tasks) -> loop.Algorithm
