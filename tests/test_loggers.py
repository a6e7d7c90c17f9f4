"""TensorBoard and W&B mirrors of the metrics: written when installed, skipped (not fatal) when not."""

import sys
import types

import pytest

from reasoner.monitoring.loggers import ScalarLoggers, scalars

RECORDS = [{"step": s, "reward_mean": 0.1 * s, "kl": float("nan"), "entropy": None, "stop": True, "tag": "x"}
           for s in range(3)]


def test_scalars_keeps_finite_numbers_only():
    assert scalars(RECORDS[1]) == {"reward_mean": 0.1}


def test_tensorboard_events_when_installed(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    loggers = ScalarLoggers(tmp_path, tensorboard=True)
    for record in RECORDS:
        loggers.log(record)
    loggers.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert events.Tags()["scalars"] == ["train/reward_mean"]
    assert [e.step for e in events.Scalars("train/reward_mean")] == [0, 1, 2]


def test_missing_tensorboard_is_skipped(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import raises ImportError
    loggers = ScalarLoggers(tmp_path, tensorboard=True)
    loggers.log(RECORDS[0])
    loggers.close()
    assert loggers.loggers == [] and not (tmp_path / "tensorboard").exists()
    assert "tensorboard is not installed" in caplog.text


def test_wandb_gets_each_step(tmp_path, monkeypatch):
    calls = []
    run = types.SimpleNamespace(finish=lambda: calls.append("finish"))
    fake = types.SimpleNamespace(init=lambda **kw: calls.append(("init", kw["project"])) or run,
                                 log=lambda values, step: calls.append((step, values)))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    loggers = ScalarLoggers(tmp_path, tensorboard=False, wandb_project="proj", config={"lr": 1})
    for record in RECORDS[:2]:
        loggers.log(record)
    loggers.close()
    assert calls == [("init", "proj"), (0, {"train/reward_mean": 0.0}), (1, {"train/reward_mean": 0.1}), "finish"]
