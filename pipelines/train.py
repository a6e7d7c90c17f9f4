"""`reasoner train`: RL on task records (GRPO here; PPO and DPO by --algo)."""

from __future__ import annotations

import logging
from pathlib import Path

from data.records import read_tasks
from pipelines.common import save_stage_config
from reasoner.config import TrainConfig
from reasoner.modeling import load_model, load_tokenizer

HELP = "reinforcement learning from verifiable rewards"
CONFIG = TrainConfig
log = logging.getLogger("reasoner.train")


def run_stage(config: TrainConfig) -> Path:
    if not (config.model and config.data and config.output):
        raise ValueError("train: --model, --data and --output are required")
    from reasoner import dpo_trainer, ppo_trainer, trainer

    algorithms = {"grpo": trainer.train, "ppo": ppo_trainer.train_ppo}
    if config.algo not in (*algorithms, "dpo"):
        raise ValueError(f"train: unknown --algo {config.algo!r}; choose grpo, ppo or dpo")
    tasks = read_tasks(config.data)
    tokenizer, model = load_tokenizer(config.model), load_model(config.model)
    save_stage_config(config, Path(config.output))
    log.info("train: %s on %d tasks, %d steps of %d prompts x %d samples", config.algo, len(tasks), config.steps,
             config.prompts_per_step, config.group_size)
    heldout = read_tasks(config.heldout) if config.heldout else None
    if config.algo == "dpo":
        return dpo_trainer.train_dpo(config, model, tokenizer, tasks)
    return algorithms[config.algo](config, model, tokenizer, tasks, heldout)
