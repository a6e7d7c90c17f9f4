"""Every setting is checked before any stage runs: a misspelt choice, a missing file or a bad model directory
fails at once, naming the option and what it accepts; the lists of choices agree with the registries."""

import json

import pytest

from pipelines.cli import main
from reasoner import config as cfg


def test_a_misspelt_choice_on_the_command_line_names_the_option_and_the_choices(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["run", "--algo", "nope", "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert "--algo" in err and "'grpo', 'rloo', 'reinforce++'" in err and "'dpo'" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("section, message", [
    ({"train": {"aggregation": "mean"}}, "--aggregation (train.aggregation): 'mean' is not one of token_mean, "),
    ({"train": {"dpo": {"dpo_loss": "hinge"}}}, "--dpo-loss (train.dpo.dpo_loss): 'hinge' is not one of sigmoid, ipo"),
    ({"train": {"alarms": {"alarm_checks": "truncation,lenght_drift"}}}, "'lenght_drift' is not one of length_drift"),
    ({"eval": {"backend": "tgi"}}, "--backend (eval.backend): 'tgi' is not one of hf, vllm"),
])
def test_a_misspelt_choice_in_a_config_file_fails_before_any_stage(tmp_path, capsys, section, message):
    (tmp_path / "c.json").write_text(json.dumps(section))
    assert main(["run", "--config", str(tmp_path / "c.json"), "--output", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_missing_inputs_fail_at_once(tmp_path, capsys):
    assert main(["run", "--data", str(tmp_path / "none.jsonl"), "--output", str(tmp_path / "run")]) == 2
    assert f"--data: {tmp_path / 'none.jsonl'}: no such file" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["run", "--model", str(tmp_path / "empty"), "--output", str(tmp_path / "run")]) == 2
    assert "--model: " in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_lists_of_choices_agree_with_the_registries():
    from reasoner.algorithms.common import AGGREGATIONS, KL_ESTIMATORS, TRUNCATION
    from reasoner.algorithms.dpo import PREFERENCE_LOSSES
    from reasoner.monitoring.alarms import CHECKS
    from reasoner.modeling import GGUF_PRESETS, PRESETS
    from reasoner.training import ALGORITHMS

    choices = {f.name: f.metadata.get("choices") for f in cfg.dataclasses.fields(cfg.TrainConfig)}
    assert set(choices["aggregation"]) == set(AGGREGATIONS) and set(choices["kl_estimator"]) == set(KL_ESTIMATORS)
    assert set(choices["truncation"]) == set(TRUNCATION) and set(cfg.ALGORITHMS) == set(ALGORITHMS)
    assert set(cfg.ALARM_CHECKS) == set(CHECKS)
    dpo_loss = next(f for f in cfg.dataclasses.fields(cfg.DPOConfig) if f.name == "dpo_loss")
    assert set(dpo_loss.metadata["choices"]) == set(PREFERENCE_LOSSES)
    preset = next(f for f in cfg.dataclasses.fields(cfg.InitModelConfig) if f.name == "preset")
    assert set(preset.metadata["choices"]) == set(PRESETS) | set(GGUF_PRESETS)


def test_the_defaults_are_valid():
    for kind in (cfg.RunConfig, cfg.TrainConfig, cfg.EvalConfig, cfg.CurateConfig, cfg.PairsConfig, cfg.SFTConfig,
                 cfg.InitModelConfig):
        cfg.validate(kind())
