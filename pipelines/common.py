"""What every stage command shares: logging, saving its config, and run-directory bookkeeping."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from data.records import write_json
from reasoner.config import save

log = logging.getLogger("reasoner")


def setup_logging(directory: Path | None = None, verbose: bool = False) -> None:
    """Log to stderr, and to DIR/log.txt when a directory is given."""
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(directory / "log.txt"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "urllib3", "datasets", "filelock", "DeepSpeed"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def save_stage_config(config, directory: Path, name: str = "config.json") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    save(config, directory / name)


class StageBook:
    """`stages.json` in a run directory: which stages finished and what each cost."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / "stages.json"
        self.entries: dict = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def done(self, stage: str) -> bool:
        return stage in self.entries

    def mark(self, stage: str, seconds: float, **extra) -> None:
        self.entries[stage] = {"seconds": round(seconds, 1), "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra}
        write_json(self.path, self.entries)

    def seconds(self) -> float:
        return sum(entry["seconds"] for entry in self.entries.values())
