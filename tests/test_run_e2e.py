"""`reasoner run` end to end on small sizes: the run directory holds what the CONTRACT says, and a second
run on the same directory skips what is done."""

import json

import pytest

from pipelines.cli import main

SMALL = """
sft: {steps: 60, batch_size: 32}
curate: {samples_per_prompt: 4, max_prompts: 64}
train: {steps: 4, prompts_per_step: 4, group_size: 4, checkpoint_every: 2}
eval: {n: 2, k: "1,2"}
"""


@pytest.mark.slow
def test_run_writes_the_contract_run_directory_and_resumes(tmp_path):
    (tmp_path / "small.yaml").write_text(SMALL)
    out = tmp_path / "run"
    args = ["run", "--output", str(out), "--config", str(tmp_path / "small.yaml"), "--math-train-tasks", "120",
            "--code-train-tasks", "120", "--heldout-tasks", "12"]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algo"] == "grpo" and summary["world_size"] == 1 and summary["seconds"] > 0
    assert (out / "train" / "final" / "config.json").is_file()
    for family in ("math", "code"):
        assert 0 <= summary["families"][family]["start"]["pass@1"] <= 1
        assert 0 <= summary["families"][family]["final"]["pass@1"] <= 1
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in steps] == [0, 1, 2, 3]
    for key in ("reward_mean", "response_length_mean", "response_length_p90", "truncation_rate", "kl", "entropy"):
        assert all(key in m for m in steps)
    assert (out / "report.html").is_file() and any((out / "plots").glob("*.png"))
    assert json.loads((out / "run_config.json").read_text())["train"]["steps"] == 4
    stages = json.loads((out / "stages.json").read_text())
    assert {"tasks", "init-model", "sft", "eval-start", "curate", "train", "eval-final"} <= set(stages)

    before = (out / "eval" / "final.json").read_text()
    assert main(args) == 0  # everything done: nothing is recomputed
    assert (out / "eval" / "final.json").read_text() == before
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 4
