"""The `reasoner` command: each stage on tiny sizes, and clear errors on bad input."""

import json

from pipelines.cli import main
from data.records import read_tasks, write_tasks
from data.synthetic import generate


def test_verify_math_keeps_order_and_passes_fields_through(tmp_path):
    rows = [{"response": "so \\boxed{3/4}", "reference": "0.75", "extra": 1},
            {"response": "the answer is 5", "reference": "6", "extra": 2},
            {"response": "", "reference": "1", "extra": 3}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["verify", "--verifier", "math", "--input", str(tmp_path / "in.jsonl"),
                 "--output", str(tmp_path / "out.jsonl")]) == 0
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["extra"] for r in out] == [1, 2, 3]
    assert [r["correct"] for r in out] == [True, False, False]
    assert all(isinstance(r["reason"], str) and r["reward"] in (0.0, 1.0) for r in out)


def test_verify_errors_name_file_line_and_field(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text(json.dumps({"response": "1"}) + "\n")
    assert main(["verify", "--verifier", "math", "--input", str(tmp_path / "in.jsonl"),
                 "--output", str(tmp_path / "out.jsonl")]) == 2
    assert "in.jsonl:1: missing field 'reference'" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_unknown_verifier_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text(json.dumps({"response": "1", "reference": "1"}) + "\n")
    assert main(["verify", "--verifier", "chess", "--input", str(tmp_path / "in.jsonl"),
                 "--output", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "unknown verifier 'chess'" in err and "math" in err


def test_a_directory_that_is_not_a_model(tmp_path, capsys):
    write_tasks(tmp_path / "t.jsonl", generate("math", "heldout", 2))
    (tmp_path / "notamodel").mkdir()
    assert main(["eval", "--model", str(tmp_path / "notamodel"), "--data", str(tmp_path / "t.jsonl"),
                 "--output", str(tmp_path / "r.json")]) == 2
    assert "notamodel: not a model directory (no config.json" in capsys.readouterr().err


def test_malformed_task_file_through_the_cli(tmp_path, micro_model, capsys):
    (tmp_path / "t.jsonl").write_text('{"id": "a", "prompt": "p", "verifier": "math", "reference": "1"}\n{oops\n')
    assert main(["eval", "--model", str(micro_model), "--data", str(tmp_path / "t.jsonl"),
                 "--output", str(tmp_path / "r.json")]) == 2
    assert "t.jsonl:2: malformed JSON" in capsys.readouterr().err


def test_data_import(shared_data, tmp_path):
    assert main(["data", "import", str(shared_data / "gsm8k_test.jsonl"), "--format", "gsm8k",
                 "--output", str(tmp_path / "g.jsonl")]) == 0
    assert len(read_tasks(tmp_path / "g.jsonl")) == 1319


def test_eval_writes_contract_report_and_samples(tmp_path, micro_model):
    write_tasks(tmp_path / "t.jsonl", generate("math", "heldout", 3) + generate("code", "heldout", 2))
    assert main(["eval", "--model", str(micro_model), "--data", str(tmp_path / "t.jsonl"), "--n", "4",
                 "--k", "1,2,4", "--max-new-tokens", "8", "--output", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(report["tasks"]) == 5
    for row in report["tasks"]:
        assert row["n"] == 4 and 0 <= row["c"] <= 4 and {"pass@1", "pass@2", "pass@4"} <= set(row)
    assert set(report["overall"]) >= {"pass@1", "pass@2", "pass@4"}
    samples = (tmp_path / "r.samples.jsonl").read_text().splitlines()
    assert len(samples) == 20 and {"response", "correct", "reason"} <= set(json.loads(samples[0]))


def test_eval_rejects_k_above_n(tmp_path, micro_model, capsys):
    write_tasks(tmp_path / "t.jsonl", generate("math", "heldout", 1))
    assert main(["eval", "--model", str(micro_model), "--data", str(tmp_path / "t.jsonl"), "--n", "2",
                 "--k", "1,4", "--output", str(tmp_path / "r.json")]) == 2
    assert "between 1 and n=2" in capsys.readouterr().err


def test_stage_chain_on_tiny_sizes(tmp_path, micro_model):
    """sft -> curate -> train (resumed from a checkpoint) -> report, each stage alone through the CLI."""
    tasks = generate("math", "train", 24) + generate("code", "train", 8)
    write_tasks(tmp_path / "train.jsonl", tasks)
    assert main(["sft", "--model", str(micro_model), "--data", str(tmp_path / "train.jsonl"), "--steps", "3",
                 "--batch-size", "4", "--output", str(tmp_path / "sft")]) == 0
    policy = tmp_path / "sft" / "model"
    assert (policy / "config.json").is_file() and (tmp_path / "sft" / "config.json").is_file()
    assert main(["curate", "--model", str(policy), "--data", str(tmp_path / "train.jsonl"), "--band-low", "0",
                 "--band-high", "1", "--samples-per-prompt", "2", "--max-new-tokens", "6",
                 "--output", str(tmp_path / "cur" / "curated.jsonl")]) == 0
    curated = read_tasks(tmp_path / "cur" / "curated.jsonl")
    assert len(curated) == 32 and all("pass_rate" in t.meta for t in curated)
    train = ["train", "--model", str(policy), "--data", str(tmp_path / "cur" / "curated.jsonl"),
             "--output", str(tmp_path / "tr"), "--prompts-per-step", "2", "--group-size", "2",
             "--max-new-tokens", "6", "--checkpoint-every", "2", "--no-skip-equal-groups", "--beta", "0.05"]
    assert main(train + ["--steps", "2"]) == 0
    assert main(train + ["--steps", "4"]) == 0  # resumes from step 2
    steps = [json.loads(line)["step"] for line in (tmp_path / "tr" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3]
    assert (tmp_path / "tr" / "final" / "config.json").is_file()
    record = json.loads((tmp_path / "tr" / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("step", "reward_mean", "response_length_mean", "response_length_p90", "truncation_rate", "kl",
                "entropy"):
        assert key in record
    assert main(["report", str(tmp_path / "tr")]) == 0
    assert (tmp_path / "tr" / "report.html").is_file() and (tmp_path / "tr" / "plots" / "length.png").is_file()
