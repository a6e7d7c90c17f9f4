"""`reasoner init-model`: write a model directory: the built-in tiny model (random weights, trained tokenizer),
or a real one converted from a GGUF checkpoint (`--preset smollm2-135m-instruct`, `--from-gguf FILE`)."""

from __future__ import annotations

from pathlib import Path

from reasoner.config import InitModelConfig
from reasoner.modeling import init_model

HELP = "write the built-in tiny model, or a real one from a GGUF file, in Hugging Face format"
CONFIG = InitModelConfig


def run_stage(config: InitModelConfig) -> Path:
    if not config.output:
        raise ValueError("init-model: --output is required")
    return init_model(config.output, config.preset, config.seed, from_gguf=config.from_gguf or None)
