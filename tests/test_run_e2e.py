"""`reasoner run` end to end on small sizes: the run directory holds what the README says, a second run on
the same directory skips what is done, and a copy of the directory resumes into the copy alone."""

import hashlib
import json
import shutil

import pytest

from pipelines.cli import main

SMALL = """
sft: {steps: 60, batch_size: 32}
curate: {samples_per_prompt: 4, max_prompts: 64}
train: {steps: 4, prompts_per_step: 4, group_size: 4, checkpoint_every: 2}
eval: {n: 2, k: "1,2"}
"""


@pytest.mark.slow
def test_run_writes_the_run_directory_and_resumes_and_a_copy_resumes_into_itself(tmp_path):
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
        values = summary["families"][family]
        assert values["change"]["pass@1"] == pytest.approx(values["final"]["pass@1"] - values["start"]["pass@1"])
        low, high = values["change"]["pass@1_ci95"]
        assert low <= values["change"]["pass@1"] <= high
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

    # A copy is self-contained: paths inside it are relative to it, so resuming the copy (training again from
    # its last checkpoint, then the final evaluation) writes into the copy and leaves the original as it was.
    assert "train/final" == summary["final_model"]
    assert str(tmp_path) not in (out / "run_config.json").read_text() + (out / "train" / "config.json").read_text()
    original = snapshot(out)
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    stages = json.loads((copy / "stages.json").read_text())
    for name in ("train", "eval-final"):
        del stages[name]
    (copy / "stages.json").write_text(json.dumps(stages))
    shutil.rmtree(copy / "train" / "final")
    (copy / "eval" / "final.json").unlink()
    assert main(["run", "--output", str(copy)]) == 0
    assert (copy / "train" / "final" / "config.json").is_file() and (copy / "eval" / "final.json").is_file()
    assert snapshot(out) == original


def snapshot(directory):
    """Every file under `directory`: its content hash and modification time."""
    return {str(p.relative_to(directory)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_run_with_tools_samples_with_them_in_every_stage_and_reports_them(tmp_path, micro_model):
    (tmp_path / "small.yaml").write_text("curate: {samples_per_prompt: 2, band_low: 0.0}\n"
                                         "train: {steps: 2, prompts_per_step: 2, group_size: 2}\n"
                                         "eval: {n: 2, k: '1'}\n")
    out = tmp_path / "run"
    assert main(["run", "--output", str(out), "--config", str(tmp_path / "small.yaml"), "--model", str(micro_model),
                 "--tools", "python", "--max-tool-calls", "2", "--math-train-tasks", "0", "--code-train-tasks", "0",
                 "--calc-train-tasks", "12", "--heldout-tasks", "4"]) == 0
    for config in ("curate/curated.config.json", "train/config.json", "eval/start.config.json",
                   "eval/final.config.json"):
        sampling = json.loads((out / config).read_text())["sampling"]
        assert (sampling["tools"], sampling["max_tool_calls"]) == ("python", 2), config
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2 and all("tool_use_rate" in m and "time_tool_s" in m for m in steps)
    final = json.loads((out / "eval" / "final.json").read_text())
    assert "tools" in final and "tools" in final["by"]["family"]["calc"]
    assert (out / "plots" / "tools.png").is_file()
