"""`reasoner sft`: supervised warm start on worked solutions (`meta.solution` of each task)."""

from __future__ import annotations

import logging
from pathlib import Path

from data.records import read_tasks, write_json
from pipelines.common import save_stage_config
from reasoner.config import SFTConfig
from reasoner.modeling import load_model, load_tokenizer
from reasoner.training.sft import train_sft

HELP = "supervised fine-tuning on worked solutions"
CONFIG = SFTConfig
log = logging.getLogger("reasoner.sft")


def run_stage(config: SFTConfig) -> Path:
    if not (config.model and config.data and config.output):
        raise ValueError("sft: --model, --data and --output are required")
    output = Path(config.output)
    tasks = read_tasks(config.data)
    tokenizer, model = load_tokenizer(config.model), load_model(config.model)
    save_stage_config(config, output)
    log.info("sft: %d tasks, %d steps of %d from %s", len(tasks), config.steps, config.batch_size, config.model)
    history = train_sft(model, tokenizer, tasks, config.steps, config.batch_size, config.lr, config.warmup_steps,
                        config.weight_decay, config.seed, config.precision)
    model.save_pretrained(output / "model")
    tokenizer.save_pretrained(output / "model")
    write_json(output / "history.json", history)
    return output / "model"
