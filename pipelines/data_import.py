"""`reasoner data import --format gsm8k|math|humaneval|mbpp IN --output OUT.jsonl`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from data.importers import IMPORTERS, import_file
from data.records import write_tasks
from reasoner.config import opt

HELP = "convert a public dataset file into task records"
log = logging.getLogger("reasoner.data")


@dataclass
class ImportConfig:
    format: str = opt("", f"input format: {', '.join(IMPORTERS)}")
    input: str = opt("", "input file (JSONL)")
    output: str = opt("", "task records to write (JSONL)")


CONFIG = ImportConfig


def run_stage(config: ImportConfig) -> Path:
    if not (config.format and config.input and config.output):
        raise ValueError("data import: --format, IN and --output are required")
    tasks = import_file(config.format, config.input)
    write_tasks(config.output, tasks)
    log.info("data import: %d %s tasks from %s -> %s", len(tasks), config.format, config.input, config.output)
    return Path(config.output)
