"""`reasoner report RUN_DIR`: PNG plots and report.html from a run directory's files."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from reasoner.config import opt
from reasoner.monitoring.page import write_report

HELP = "draw the plots and write report.html for a run directory"
log = logging.getLogger("reasoner.report")


@dataclass
class ReportConfig:
    run_dir: str = opt("", "the run directory")


CONFIG = ReportConfig


def run_stage(config: ReportConfig) -> Path:
    run_dir = Path(config.run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"report: {run_dir}: no such run directory")
    page = write_report(run_dir)
    log.info("report: wrote %s", page)
    return page
