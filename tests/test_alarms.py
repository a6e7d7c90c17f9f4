"""Each alarm on a synthetic metric stream that should fire it and one that should not; the monitor's
log line, alarms.jsonl, edge triggering, resume and stop."""

import json
import logging

import pytest

from reasoner.monitoring.alarms import CHECKS, AlarmMonitor, AlarmStop, check_all
from reasoner.config import AlarmConfig


def stream(steps=30, **series):
    """Steady metrics, with any key replaced by a function of the step."""
    records = []
    for step in range(steps):
        record = {"step": step, "reward_mean": 0.4, "response_length_mean": 40.0, "truncation_rate": 0.02,
                  "entropy": 1.5, "kl": 0.01 + 0.001 * (step % 3)}
        record.update({key: fn(step) for key, fn in series.items()})
        records.append(record)
    return records


def fired(name, records, **thresholds):
    """The steps at which the named alarm fires (edge-triggered) over a stream."""
    monitor_config = AlarmConfig(alarm_checks=name, **thresholds)
    steps, active, history = [], False, []
    for record in records:
        history.append(record)
        now = name in check_all(history, monitor_config)
        if now and not active:
            steps.append(record["step"])
        active = now
    return steps


STREAMS = {  # name -> (stream that fires it, stream that does not)
    "length_drift": (stream(response_length_mean=lambda s: 40.0 + 3.0 * max(0, s - 10)),
                     stream(response_length_mean=lambda s: 40.0 + (5 if s % 2 else -5))),
    "truncation": (stream(truncation_rate=lambda s: 0.05 if s < 15 else 0.4),
                   stream(truncation_rate=lambda s: 0.35 if s == 12 else 0.05)),  # one noisy step is averaged away
    "entropy_collapse": (stream(entropy=lambda s: 1.5 * 0.85 ** s),
                         stream(entropy=lambda s: 1.5 - 0.02 * s)),
    "kl_spike": (stream(kl=lambda s: 0.5 if s == 20 else 0.01),
                 stream(kl=lambda s: 0.002 * s)),  # a steady climb is not a spike
    "reward_vs_heldout": (stream(reward_mean=lambda s: 0.3 + 0.02 * s,
                                 heldout_accuracy=lambda s: None if s % 5 else max(0.1, 0.5 - 0.02 * max(0, s - 10))),
                          stream(reward_mean=lambda s: 0.3 + 0.02 * s,
                                 heldout_accuracy=lambda s: None if s % 5 else 0.3 + 0.01 * s)),
    "rollout_mismatch": (stream(rollout_logprob_kl=lambda s: 0.001 if s < 10 else 0.05, rollout_ratio_max=lambda s: 3.0),
                         stream(rollout_logprob_kl=lambda s: 0.02 if s == 12 else 0.001)),  # one noisy step
    "tool_failures": (stream(tool_error_rate=lambda s: 0.1 if s < 10 else 0.4, tool_timeout_rate=lambda s: 0.2),
                      stream(tool_error_rate=lambda s: 0.9 if s == 12 else 0.2, tool_timeout_rate=lambda s: 0.0)),
}


def test_every_check_has_streams():
    assert set(STREAMS) == set(CHECKS)


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_alarm_fires_on_its_stream(name):
    assert fired(name, STREAMS[name][0]), name


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_alarm_stays_quiet_on_a_healthy_stream(name):
    assert fired(name, STREAMS[name][1]) == [], name


def test_length_drift_fires_on_collapse_too_and_respects_the_band():
    collapse = stream(response_length_mean=lambda s: 40.0 if s < 10 else 12.0)
    assert fired("length_drift", collapse) == [12]  # once the 3-step window has moved
    assert fired("length_drift", collapse, length_drift_band=0.8) == []


def test_entropy_absolute_floor_and_unmeasured_steps():
    low = stream(entropy=lambda s: 0.5 if s < 10 else 0.01)
    assert fired("entropy_collapse", low, entropy_min_fraction=0.0) != []
    nan = stream(entropy=lambda s: float("nan") if s > 10 else 1.5)
    assert fired("entropy_collapse", nan) == []


def test_kl_spike_needs_the_absolute_floor():
    tiny = stream(kl=lambda s: 0.004 if s == 20 else 0.0005)  # 8x the median, but far below the floor
    assert fired("kl_spike", tiny) == []
    assert fired("kl_spike", tiny, kl_spike_floor=0.001) == [20]


def test_unknown_check_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown check"):
        check_all(stream(3), AlarmConfig(alarm_checks="length_drift,nope"))


def test_monitor_logs_writes_jsonl_once_per_episode(tmp_path, caplog):
    path = tmp_path / "alarms.jsonl"
    monitor = AlarmMonitor(AlarmConfig(), path)
    records = stream(40, truncation_rate=lambda s: 0.5 if 10 <= s < 20 or s >= 30 else 0.0)
    with caplog.at_level(logging.WARNING, logger="reasoner.alarms"):
        for record in records:
            monitor.check(record)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(a["step"], a["alarm"]) for a in lines] == [(11, "truncation"), (31, "truncation")]
    assert set(lines[0]) == {"step", "alarm", "message", "value", "threshold"}
    assert lines[0]["threshold"] == 0.2 and lines[0]["value"] > 0.2
    assert sum("ALARM step 11 truncation" in r.getMessage() for r in caplog.records) == 1


def test_monitor_on_resume_keeps_earlier_alarms_and_does_not_refire(tmp_path):
    path = tmp_path / "alarms.jsonl"
    records = stream(30, truncation_rate=lambda s: 0.5 if s >= 10 else 0.0)
    first = AlarmMonitor(AlarmConfig(), path)
    for record in records:
        first.check(record)
    assert len(path.read_text().splitlines()) == 1
    resumed = AlarmMonitor(AlarmConfig(), path, history=records[:20])  # steps 20.. are redone
    assert resumed.check(records[20]) == []
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [11]
    early = AlarmMonitor(AlarmConfig(), path, history=records[:5])  # the alarm's step is redone: line dropped
    assert path.read_text() == "" and early.last_held == {}


def test_a_rate_hovering_at_its_threshold_is_one_alarm_until_it_stays_clear(tmp_path):
    hovering = stream(40, truncation_rate=lambda s: 0.4 if s % 4 < 2 else 0.0)  # on 2 of every 4 steps
    monitor = AlarmMonitor(AlarmConfig(), tmp_path / "a.jsonl")
    assert sum(len(monitor.check(r)) for r in hovering) == 1
    chatty = AlarmMonitor(AlarmConfig(alarm_cooldown=0), tmp_path / "b.jsonl")
    assert sum(len(chatty.check(r)) for r in hovering) > 5


def test_stop_on_alarm_raises_a_clear_error(tmp_path):
    monitor = AlarmMonitor(AlarmConfig(stop_on_alarm=True), tmp_path / "alarms.jsonl")
    records = stream(20, truncation_rate=lambda s: 0.9)
    with pytest.raises(AlarmStop, match=r"training stopped at step 0 by alarm truncation: .*length cap"):
        for record in records:
            monitor.check(record)
    assert json.loads((tmp_path / "alarms.jsonl").read_text())["alarm"] == "truncation"


def test_a_monitor_without_a_path_is_quiet_but_still_stops(tmp_path, caplog):
    monitor = AlarmMonitor(AlarmConfig(stop_on_alarm=True), None)
    with caplog.at_level(logging.WARNING, logger="reasoner.alarms"), pytest.raises(AlarmStop):
        monitor.check(stream(1, truncation_rate=lambda s: 0.9)[0])
    assert "ALARM" not in caplog.text and list(tmp_path.iterdir()) == []


def test_stop_on_alarm_through_the_cli_is_an_error_with_a_nonzero_exit(tmp_path, micro_model, capsys):
    from data.records import write_tasks
    from data.synthetic import generate
    from pipelines.cli import main

    write_tasks(tmp_path / "tasks.jsonl", generate("math", "train", 4))
    code = main(["train", "--model", str(micro_model), "--data", str(tmp_path / "tasks.jsonl"), "--output",
                 str(tmp_path / "tr"), "--steps", "3", "--prompts-per-step", "2", "--group-size", "2",
                 "--max-new-tokens", "4", "--no-tensorboard", "--stop-on-alarm"])  # 4 tokens: every answer truncated
    assert code == 3
    err = capsys.readouterr().err
    assert "reasoner train: error: training stopped at step 0 by alarm truncation" in err
    assert [json.loads(line)["alarm"] for line in (tmp_path / "tr" / "alarms.jsonl").read_text().splitlines()] == \
        ["truncation"]
    assert not (tmp_path / "tr" / "final").exists()
