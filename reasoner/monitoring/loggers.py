"""Optional scalar loggers beside metrics.jsonl: TensorBoard event files and Weights & Biases.

metrics.jsonl stays the record every stage and the report read; these only mirror its numbers into the
dashboards people already watch. Each is skipped, with one log line saying why, when its package is not
installed (`pip install -e ".[tensorboard]"` or `".[wandb]"`).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

log = logging.getLogger("reasoner.loggers")


def scalars(record: dict) -> dict[str, float]:
    """The finite numbers of a metrics record, `step` left out."""
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class TensorBoardLogger:
    def __init__(self, directory: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(directory))

    def log(self, record: dict) -> None:
        for key, value in scalars(record).items():
            self.writer.add_scalar(f"train/{key}", value, record["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, project: str, directory: Path, config: dict):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, dir=str(directory), config=config, resume="allow")

    def log(self, record: dict) -> None:
        self.wandb.log({f"train/{k}": v for k, v in scalars(record).items()}, step=record["step"])

    def close(self) -> None:
        self.run.finish()


class ScalarLoggers:
    """Every enabled and installed logger; `log` and `close` go to each."""

    def __init__(self, directory: Path, tensorboard: bool = True, wandb_project: str = "", config: dict | None = None):
        self.loggers: list = []
        if tensorboard:
            try:
                self.loggers.append(TensorBoardLogger(Path(directory) / "tensorboard"))
                log.info("train: TensorBoard events in %s", Path(directory) / "tensorboard")
            except ImportError:
                log.info("train: tensorboard is not installed; no TensorBoard events (pip install tensorboard)")
        if wandb_project:
            try:
                self.loggers.append(WandbLogger(wandb_project, Path(directory), config or {}))
            except ImportError:
                log.warning("train: --wandb-project %s given but wandb is not installed (pip install wandb)",
                            wandb_project)

    def log(self, record: dict) -> None:
        for logger in self.loggers:
            logger.log(record)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
