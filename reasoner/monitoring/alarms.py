"""Alarms on the training metrics: the run says so, the step it happens, when RL goes wrong.

Each check is a pure function of the metric history (one dict per step, the current step last) and the
thresholds in `AlarmConfig`; it returns an `Alarm` or None. `CHECKS` picks them by name. `AlarmMonitor`
is what the trainer calls once per step: it logs a WARNING, appends a line to `alarms.jsonl` beside
metrics.jsonl, and raises `AlarmStop` when `stop_on_alarm` is set.

An alarm fires when its condition starts to hold, not again on every step while it keeps holding; it
fires again if the condition comes back after staying clear for `alarm_cooldown` steps (so a rate that
hovers at its threshold is one alarm, not one every other step). Values that were not measured (None, NaN, such as
the entropy of a step whose groups all had equal rewards) never fire anything.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from data.records import keep_steps_before
from reasoner.config import AlarmConfig
from reasoner.monitoring.metrics import relative_drift

log = logging.getLogger("reasoner.alarms")


@dataclass
class Alarm:
    step: int
    alarm: str
    message: str
    value: float
    threshold: float


class AlarmStop(RuntimeError):
    """Training stopped on purpose because an alarm fired and `stop_on_alarm` is set."""


def _values(history: list[dict], key: str) -> list[float]:
    out = []
    for record in history:
        value = record.get(key)
        if value is not None and math.isfinite(value):
            out.append(float(value))
    return out


def _recent(history: list[dict], key: str, window: int) -> Optional[float]:
    """Mean of `key` over the last `window` steps, or None when the current step did not measure it."""
    current = history[-1].get(key)
    if current is None or not math.isfinite(current):
        return None
    return float(np.mean(_values(history[-window:], key)))


def length_drift(history: list[dict], c: AlarmConfig) -> Optional[Alarm]:
    """Mean response length left the band of +-length_drift_band around its first steps' baseline."""
    if len(history) <= c.alarm_baseline_steps:
        return None
    base = _values(history[:c.alarm_baseline_steps], "response_length_mean")
    now = _recent(history, "response_length_mean", c.alarm_window)
    if not base or now is None or np.mean(base) <= 0:
        return None
    drift = relative_drift(now, base)
    if abs(drift) <= c.length_drift_band:
        return None
    way = "inflated" if drift > 0 else "collapsed"
    return Alarm(history[-1]["step"], "length_drift",
                 f"response length {way}: mean {now:.1f} tokens over the last {c.alarm_window} steps is {drift:+.0%} "
                 f"from its baseline {np.mean(base):.1f} (first {c.alarm_baseline_steps} steps); band is "
                 f"+-{c.length_drift_band:.0%}", drift, c.length_drift_band)


def truncation(history: list[dict], c: AlarmConfig) -> Optional[Alarm]:
    """Too many responses stop at the length cap, where the verifier sees no answer and the reward is zero."""
    rate = _recent(history, "truncation_rate", c.alarm_window)
    if rate is None or rate <= c.truncation_max:
        return None
    return Alarm(history[-1]["step"], "truncation",
                 f"{rate:.0%} of responses hit the length cap over the last {c.alarm_window} steps (limit "
                 f"{c.truncation_max:.0%}); their reward is zero whatever they reasoned: raise max_new_tokens or "
                 f"penalise length", rate, c.truncation_max)


def entropy_collapse(history: list[dict], c: AlarmConfig) -> Optional[Alarm]:
    """Policy entropy fell below an absolute floor, or to a small fraction of its value at the start."""
    now = _recent(history, "entropy", c.alarm_window)
    if now is None:
        return None
    if now < c.entropy_floor:
        return Alarm(history[-1]["step"], "entropy_collapse",
                     f"entropy {now:.3f} nats/token is below the floor {c.entropy_floor:g}: the policy has stopped "
                     f"exploring", now, c.entropy_floor)
    base = _values(history[:c.alarm_baseline_steps], "entropy")
    if len(history) <= c.alarm_baseline_steps or not base:
        return None
    threshold = c.entropy_min_fraction * float(np.mean(base))
    if now >= threshold:
        return None
    return Alarm(history[-1]["step"], "entropy_collapse",
                 f"entropy {now:.3f} nats/token fell to {now / np.mean(base):.0%} of its start "
                 f"{np.mean(base):.3f} (alarm below {c.entropy_min_fraction:.0%})", now, threshold)


def kl_spike(history: list[dict], c: AlarmConfig) -> Optional[Alarm]:
    """KL to the reference jumped to kl_spike_factor times its running median, and above an absolute floor."""
    now = history[-1].get("kl")
    before = _values(history[-1 - c.kl_window:-1], "kl")
    if now is None or not math.isfinite(now) or len(before) < c.alarm_baseline_steps:
        return None
    median = float(np.median(before))
    threshold = max(c.kl_spike_factor * median, c.kl_spike_floor)
    if now <= threshold:
        return None
    return Alarm(history[-1]["step"], "kl_spike",
                 f"KL {now:.4f} is {now / max(median, 1e-12):.1f}x its median {median:.4f} over the previous "
                 f"{len(before)} steps (alarm above {c.kl_spike_factor:g}x and above {c.kl_spike_floor:g})",
                 now, threshold)


def reward_vs_heldout(history: list[dict], c: AlarmConfig) -> Optional[Alarm]:
    """Training reward rose while held-out accuracy fell from its best: the policy is gaming the training set.

    Checked on the steps that carry `heldout_accuracy` (the trainer's periodic held-out check); the reward is
    averaged over `window` steps ending at the best earlier check and at the current one.
    """
    now = history[-1].get("heldout_accuracy")
    checks = [(i, r["heldout_accuracy"]) for i, r in enumerate(history[:-1]) if r.get("heldout_accuracy") is not None]
    if now is None or not checks:
        return None
    best_at, best = max(checks, key=lambda check: check[1])
    drop = best - now
    reward_then = _values(history[max(0, best_at - c.alarm_window + 1):best_at + 1], "reward_mean")
    reward_now = _values(history[-c.alarm_window:], "reward_mean")
    if drop < c.heldout_drop or not reward_then or not reward_now:
        return None
    rise = float(np.mean(reward_now) - np.mean(reward_then))
    if rise < c.reward_rise:
        return None
    return Alarm(history[-1]["step"], "reward_vs_heldout",
                 f"training reward rose by {rise:+.3f} since step {history[best_at]['step']} while held-out accuracy "
                 f"fell from {best:.3f} to {now:.3f} ({-drop:+.3f}; alarm at a fall of {c.heldout_drop:g} with a "
                 f"rise of {c.reward_rise:g})", -drop, -c.heldout_drop)


def rollout_mismatch(history: list[dict], c: AlarmConfig) -> Optional[Alarm]:
    """The sampler and the trainer disagree on the sampled tokens' log-probs (another engine, dtype or kernel):
    the update treats off-policy samples as on-policy, a known cause of collapse."""
    kl = _recent(history, "rollout_logprob_kl", c.alarm_window)
    if kl is None or kl <= c.rollout_kl_max:
        return None
    worst = history[-1].get("rollout_ratio_max", float("nan"))
    return Alarm(history[-1]["step"], "rollout_mismatch",
                 f"KL between the sampler's and the trainer's log-probs of the sampled tokens is {kl:.4f} over the "
                 f"last {c.alarm_window} steps (limit {c.rollout_kl_max:g}; largest token ratio trainer/sampler "
                 f"{worst:.2f}): sample in the trainer's dtype or correct with --tis-cap", kl, c.rollout_kl_max)


def tool_failures(history: list[dict], c: AlarmConfig) -> Optional[Alarm]:
    """Most tool calls (`--tools python`) fail or time out: the policy's code does not work, and calls that
    run to their time limit make every step wait for the sandbox."""
    errors = _recent(history, "tool_error_rate", c.alarm_window)
    timeouts = _recent(history, "tool_timeout_rate", c.alarm_window)
    if errors is None or timeouts is None or errors + timeouts <= c.tool_failure_max:
        return None
    return Alarm(history[-1]["step"], "tool_failures",
                 f"{errors + timeouts:.0%} of tool calls failed ({errors:.0%}) or timed out ({timeouts:.0%}) over the "
                 f"last {c.alarm_window} steps (limit {c.tool_failure_max:.0%})", errors + timeouts, c.tool_failure_max)


CHECKS: dict[str, Callable[[list[dict], AlarmConfig], Optional[Alarm]]] = {
    "length_drift": length_drift,
    "truncation": truncation,
    "entropy_collapse": entropy_collapse,
    "kl_spike": kl_spike,
    "reward_vs_heldout": reward_vs_heldout,
    "rollout_mismatch": rollout_mismatch,
    "tool_failures": tool_failures,
}


def check_all(history: list[dict], config: AlarmConfig) -> dict[str, Alarm]:
    """Every enabled check on a history; the alarms whose condition holds at its last step, by name."""
    names = [name.strip() for name in config.alarm_checks.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CHECKS))
    if unknown:
        raise ValueError(f"alarms: unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    found = {name: CHECKS[name](history, config) for name in names}
    return {name: alarm for name, alarm in found.items() if alarm is not None}


class AlarmMonitor:
    """Runs the checks once per step; logs, records and (optionally) stops on each newly fired alarm.

    `history` is what metrics.jsonl already holds when training resumes: the monitor replays it so that an
    alarm already holding does not fire again, and drops lines of alarms.jsonl from steps to be redone.
    With `path` None (the other ranks of a multi-process run) it neither logs nor writes, but still stops,
    so that every rank stops at the same step.
    """

    def __init__(self, config: AlarmConfig, path: Path | None, history: list[dict] | None = None):
        self.config = config
        self.path = Path(path) if path is not None else None
        self.history: list[dict] = []
        self.last_held: dict[str, int] = {}  # alarm -> last step its condition held
        for record in history or []:
            self._update(record)
        if self.path is not None:
            keep_steps_before(self.path, self.history[-1]["step"] + 1 if self.history else 0)

    def _update(self, record: dict) -> list[Alarm]:
        """Add a step; return the alarms that newly fire on it."""
        self.history.append(record)
        step = record["step"]
        holding = check_all(self.history, self.config)
        fired = [alarm for name, alarm in holding.items()
                 if step - self.last_held.get(name, -10**9) > max(1, self.config.alarm_cooldown)]
        self.last_held.update({name: step for name in holding})
        return fired

    def check(self, record: dict) -> list[Alarm]:
        """Check the step just finished; return the alarms that fired on it."""
        fired = self._update(record)
        for alarm in fired if self.path is not None else []:
            log.warning("ALARM step %d %s: %s", alarm.step, alarm.alarm, alarm.message)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(alarm)) + "\n")
        if fired and self.config.stop_on_alarm:
            names = ", ".join(a.alarm for a in fired)
            raise AlarmStop(f"training stopped at step {record['step']} by alarm {names}: {fired[0].message} "
                            f"(see {self.path or 'alarms.jsonl'}; thresholds are the train.alarms settings, and stop_on_alarm false "
                            f"only records alarms)")
        return fired
