"""`reasoner init-model`: write the built-in tiny model (random weights, trained tokenizer) to a directory."""

from __future__ import annotations

from pathlib import Path

from reasoner.config import InitModelConfig
from reasoner.modeling import init_model

HELP = "write the built-in tiny model in Hugging Face format"
CONFIG = InitModelConfig


def run_stage(config: InitModelConfig) -> Path:
    if not config.output:
        raise ValueError("init-model: --output is required")
    return init_model(config.output, config.preset, config.seed)
