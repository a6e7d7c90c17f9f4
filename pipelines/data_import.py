"""`reasoner data import --format gsm8k|math|humaneval|mbpp|jsonl|parquet|csv|hub IN --output OUT.jsonl`.

The first four are the public formats (data/importers.py); the others read any table through `datasets`
with a column mapping (data/loaders.py). Exact duplicate prompts are dropped unless --no-dedup.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from data.dedup import deduplicate
from data.importers import IMPORTERS, import_file
from data.loaders import FORMATS, load_tasks
from data.records import write_tasks
from reasoner.config import opt

HELP = "convert a public dataset file into task records"
log = logging.getLogger("reasoner.data")


@dataclass
class ImportConfig:
    format: str = opt("", f"input format: {', '.join([*IMPORTERS, *FORMATS, 'hub'])}")
    input: str = opt("", "input file, or a hub dataset name with --format hub")
    output: str = opt("", "task records to write (JSONL)")
    columns: str = opt("", "jsonl/parquet/csv/hub: FIELD=COLUMN,... for id, prompt, reference, verifier, meta.KEY")
    verifier: str = opt("", "jsonl/parquet/csv/hub: the verifier of every task (unless a column is mapped to it)")
    split: str = opt("train", "hub: the split to load")
    subset: str = opt("", "hub: the dataset's configuration name")
    dedup: bool = opt(True, "drop tasks whose normalised prompt repeats an earlier one")


CONFIG = ImportConfig


def run_stage(config: ImportConfig) -> Path:
    if not (config.format and config.input and config.output):
        raise ValueError("data import: --format, IN and --output are required")
    if config.format in IMPORTERS:
        tasks = import_file(config.format, config.input)
    else:
        tasks = load_tasks(config.input, config.format, config.columns, config.verifier, config.split, config.subset)
    if config.dedup:
        tasks, dropped = deduplicate(tasks)
        if dropped:
            log.info("data import: dropped %d duplicate prompts, e.g. %s", len(dropped),
                     ", ".join(f"{a} (= {b})" for a, b in dropped[:5]))
    write_tasks(config.output, tasks)
    log.info("data import: %d %s tasks from %s -> %s", len(tasks), config.format, config.input, config.output)
    return Path(config.output)
