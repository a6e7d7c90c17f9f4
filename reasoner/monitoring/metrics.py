"""Per-step training metrics: lengths (and their drift), truncation, rewards, verifier health, speed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data.records import read_jsonl


def progress(iterable=None, **kwargs) -> tqdm:
    """The progress bar of a long stage: redrawn at most every 2 s on a terminal, and every 30 s when
    stderr is a file or a pipe, so that a captured log gets a line now and then instead of a flood."""
    kwargs.setdefault("mininterval", 2.0 if sys.stderr.isatty() else 30.0)
    return tqdm(iterable, dynamic_ncols=True, **kwargs)


def length_stats(lengths: np.ndarray, correct: np.ndarray, truncated: np.ndarray) -> dict[str, float]:
    """Response length in tokens: mean and percentiles, right vs wrong answers, and truncation."""
    def mean_or_nan(x: np.ndarray) -> float:
        return float(x.mean()) if len(x) else float("nan")

    return {
        "response_length_mean": mean_or_nan(lengths),
        "response_length_p10": float(np.percentile(lengths, 10)),
        "response_length_p50": float(np.percentile(lengths, 50)),
        "response_length_p90": float(np.percentile(lengths, 90)),
        "response_length_max": float(lengths.max()),
        "response_length_correct": mean_or_nan(lengths[correct]),
        "response_length_wrong": mean_or_nan(lengths[~correct]),
        "truncation_rate": float(truncated.mean()),
    }


def tool_stats(calls: list[list], correct: np.ndarray) -> dict[str, float]:
    """Tool use (`--tools python`) of a batch, from each sample's `ToolCall`s: calls per sample, the share of
    samples that called, errors and timeouts per call, the seconds generation waited for the sandbox, and
    the right-answer rate with and without a call (NaN where there is no such sample or call)."""
    def mean_or_nan(x) -> float:
        return float(np.mean(x)) if len(x) else float("nan")

    used = np.array([bool(c) for c in calls])
    statuses = [call.status for sample in calls for call in sample]
    return {
        "tool_calls_per_sample": float(np.mean([len(c) for c in calls])),
        "tool_use_rate": float(used.mean()),
        "tool_error_rate": mean_or_nan([s in ("error", "memory", "killed") for s in statuses]),
        "tool_timeout_rate": mean_or_nan([s == "timeout" for s in statuses]),
        "time_tool_s": float(sum(call.seconds for sample in calls for call in sample)),
        "accuracy_with_tool": mean_or_nan(correct[used]),
        "accuracy_without_tool": mean_or_nan(correct[~used]),
    }


def relative_drift(mean_now: float, baseline: list[float]) -> float:
    """Relative change of the mean response length from the mean of its baseline steps (0.1: 10% longer)."""
    return mean_now / max(1e-9, float(np.mean(baseline))) - 1.0


class MetricsWriter:
    """Appends one JSON line per step; flushed each time, so a killed run keeps what it logged."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def read(self) -> list[dict]:
        return read_jsonl(self.path, missing_ok=True)

    def write(self, record: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in record.items()}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(clean) + "\n")
            f.flush()
