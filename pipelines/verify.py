"""`reasoner verify --verifier NAME --input IN.jsonl --output OUT.jsonl`: score responses with a verifier."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import verifiers
from data.records import iter_jsonl, require, write_jsonl
from reasoner.config import opt

HELP = "verify each line's response against its reference"
log = logging.getLogger("reasoner.verify")


@dataclass
class VerifyConfig:
    verifier: str = opt("", "registered verifier name (see `reasoner verifiers`)")
    input: str = opt("", "JSONL with `response` and `reference` on each line")
    output: str = opt("", "JSONL to write: each input line plus correct, reward and reason")


CONFIG = VerifyConfig


def run_stage(config: VerifyConfig) -> Path:
    if not (config.verifier and config.input and config.output):
        raise ValueError("verify: --verifier, --input and --output are required")
    verifier = verifiers.get(config.verifier)
    rows = []
    for lineno, row in iter_jsonl(config.input):
        require(row, ("response", "reference"), f"{config.input}:{lineno}")
        if not isinstance(row["response"], str):
            raise ValueError(f"{config.input}:{lineno}: field 'response' must be a string")
        rows.append(row)
    verdicts = verifier.verify_batch([(row["response"], row["reference"]) for row in rows])
    out = [{**row, "correct": v.correct, "reward": v.reward, "reason": v.reason} for row, v in zip(rows, verdicts)]
    write_jsonl(config.output, out)
    log.info("verify: %d of %d correct -> %s", sum(v.correct for v in verdicts), len(rows), config.output)
    return Path(config.output)
