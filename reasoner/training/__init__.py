"""Training: one loop for every algorithm, and each algorithm's batches and update step.

    loop.py              the loop: resume, step cursor, metrics, alarms, checkpoints, held-out checks, final save
    batches.py           preparing an update: rows, sorting, micro-batches, sizes global across ranks
    groups.py            sampled and verified groups of the current policy (GRPO, PPO)
    dynamic_sampling.py  all-equal groups replaced by fresh ones; retired prompts re-estimated
    grpo.py, ppo.py, dpo.py   each algorithm's update step (and DPO's rounds of pairs)

The losses themselves are pure functions in `reasoner/algorithms/`.
"""

from __future__ import annotations

from reasoner.training.dpo import dpo_algorithm
from reasoner.training.grpo import grpo_algorithm
from reasoner.training.ppo import ppo_algorithm

ALGORITHMS = {"grpo": grpo_algorithm, "ppo": ppo_algorithm, "dpo": dpo_algorithm}  # (config, model, tasks)
