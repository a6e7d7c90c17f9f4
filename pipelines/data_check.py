"""`reasoner data check --train A --heldout B`: exact duplicates and n-gram contamination between two task files."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from data.dedup import contamination, deduplicate, format_report
from data.records import read_tasks, write_json
from reasoner.config import opt

HELP = "report duplicate prompts and train/held-out contamination (word n-gram overlap)"
log = logging.getLogger("reasoner.data")


@dataclass
class CheckConfig:
    train: str = opt("", "training task records")
    heldout: str = opt("", "held-out task records")
    ngram: int = opt(13, "words per n-gram")
    threshold: float = opt(0.5, "a held-out prompt is contaminated when this fraction of its n-grams is in training")
    output: str = opt("", "write the report here as JSON (default: print it only)")


CONFIG = CheckConfig


def run_stage(config: CheckConfig) -> dict:
    if not (config.train and config.heldout):
        raise ValueError("data check: --train and --heldout are required")
    train, heldout = read_tasks(config.train), read_tasks(config.heldout)
    report = contamination(train, heldout, config.ngram, config.threshold)
    for name, tasks in (("train", train), ("heldout", heldout)):
        dropped = deduplicate(tasks)[1]
        report[f"duplicates_in_{name}"] = len(dropped)
        report[f"duplicate_examples_in_{name}"] = [{"id": a, "same_as": b} for a, b in dropped[:5]]
    log.info("data check: %d duplicate prompts in training, %d in held-out", report["duplicates_in_train"],
             report["duplicates_in_heldout"])
    log.info("data check: %s", format_report(report))
    if config.output:
        write_json(config.output, report)
    return report
