"""The report on a fake run directory: every plot is drawn, the page has its sections and tables, links
only to files beside it, and copes with a directory that holds only some of the files."""

import json
import re

from reasoner.monitoring.page import write_report


def fake_run(run_dir, steps=12, alarms=True):
    metrics = []
    for step in range(steps):
        metrics.append({
            "step": step, "reward_mean": 0.2 + 0.02 * step, "accuracy": 0.2 + 0.02 * step,
            "response_length_mean": 30.0 + 3 * step, "response_length_p10": 10.0, "response_length_p50": 28.0,
            "response_length_p90": 44.0 + step, "response_length_max": 48.0, "response_length_correct": 25.0,
            "response_length_wrong": None if step == 3 else 35.0, "length_drift": 0.1 * step,
            "truncation_rate": 0.05 * step, "equal_reward_groups": 0.4, "verifier_timeout_rate": 0.0,
            "no_answer_rate": 0.1, "kl": 0.001 * step, "entropy": None if step == 5 else 1.2 - 0.05 * step,
            "clip_frac_low": 0.0, "clip_frac_high": 0.0, "grad_norm": 0.5, "lr": 1e-4,
            "time_generate_s": 1.0, "time_verify_s": 0.2, "time_train_s": 0.5, "time_step_s": 1.7,
            "generate_tokens_per_s": 900.0, "train_tokens_per_s": 3000.0,
            **({"heldout_accuracy": 0.3 - 0.01 * step, "time_heldout_s": 0.4} if step % 5 == 0 else {}),
        })
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    if alarms:
        (run_dir / "alarms.jsonl").write_text(json.dumps(
            {"step": 7, "alarm": "truncation", "message": "35% of responses hit the length cap <cap>",
             "value": 0.35, "threshold": 0.2}) + "\n")
    families = {"math": {"start": {"pass@1": 0.30, "pass@4": 0.5}, "final": {"pass@1": 0.42, "pass@4": 0.6},
                         "change": {"pass@1": 0.12, "pass@1_ci95": [0.07, 0.17],
                                    "pass@4": 0.1, "pass@4_ci95": [0.0, 0.2]}},
                "code": {"start": {"pass@1": 0.10, "pass@4": 0.2}, "final": {"pass@1": 0.08, "pass@4": 0.2}}}
    (run_dir / "summary.json").write_text(json.dumps({
        "algo": "grpo", "world_size": 1, "seconds": 412, "final_model": str(run_dir / "train" / "final"),
        "families": families, "overall": {"start": {"pass@1": 0.2}, "final": {"pass@1": 0.25}}}))
    (run_dir / "eval").mkdir()
    for name in ("start", "final"):
        by = {fam: {"tasks": 10, **{k: v for k, v in values[name].items()},
                    **{f"{k}_ci95": [max(0, v - 0.1), min(1, v + 0.1)] for k, v in values[name].items()}}
              for fam, values in families.items()}
        (run_dir / "eval" / f"{name}.json").write_text(json.dumps({"tasks": [], "overall": {}, "by": {"family": by}}))
    (run_dir / "run_config.json").write_text(json.dumps({
        "output": str(run_dir), "algo": "grpo", "train": {"steps": steps, "beta": 0.04,
                                                          "sampling": {"max_new_tokens": 48},
                                                          "alarms": {"truncation_max": 0.3}}}))


def test_report_draws_every_plot_and_writes_a_self_contained_page(tmp_path):
    fake_run(tmp_path)
    page = write_report(tmp_path)
    assert page == tmp_path / "report.html"
    for name in ("reward", "length", "truncation", "kl_entropy", "clipping", "groups_verifier", "time", "passk"):
        png = tmp_path / "plots" / f"{name}.png"
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    text = page.read_text()
    for section in ("id='alarms'", "id='heldout'", "id='training'", "id='metrics'", "id='config'"):
        assert section in text
    sources = re.findall(r"src='([^']+)'", text)
    assert sources and all(s.startswith("plots/") and (tmp_path / s).is_file() for s in sources)
    assert "http" not in text  # nothing to fetch: it opens from disk
    # held-out table with intervals and the change, coloured by direction
    assert "0.300 <span class='ci'>[0.20, 0.40]</span>" in text and "<span class='up'>+0.120</span>" in text
    assert "<span class='up'>+0.120</span> <span class='ci'>[+0.07, +0.17]</span>" in text  # paired interval
    assert "<span class='down'>-0.020</span></td>" in text  # a summary without one (older runs): no interval
    # the alarm, escaped; the thresholds come from the run's config
    assert "<b>truncation</b>" in text and "length cap &lt;cap&gt;" in text and "truncation above 30%" in text
    # per-step metrics table: first and last values of each field
    assert "<code>response_length_p90</code>" in text and "<code>heldout_accuracy</code>" in text
    assert "train.alarms" in text and "truncation_max" in text


def test_report_without_summary_or_alarms(tmp_path):
    fake_run(tmp_path, steps=3, alarms=False)
    for name in ("summary.json", "run_config.json"):
        (tmp_path / name).unlink()
    text = write_report(tmp_path).read_text()
    assert "No alarm fired" in text and "No summary.json yet" in text
    assert (tmp_path / "plots" / "length.png").is_file() and not (tmp_path / "plots" / "passk.png").exists()


def test_report_of_an_empty_directory(tmp_path):
    text = write_report(tmp_path).read_text()
    assert "No training metrics" in text


def test_a_run_with_tools_gets_the_tool_plot_and_its_sandbox_time(tmp_path):
    fake_run(tmp_path, alarms=False)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for m in lines:
        m.update({"tool_calls_per_sample": 0.8, "tool_use_rate": 0.5 + 0.02 * m["step"], "tool_error_rate": 0.1,
                  "tool_timeout_rate": 0.0, "time_tool_s": 0.3, "accuracy_with_tool": 0.7,
                  "accuracy_without_tool": None})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    text = write_report(tmp_path).read_text()
    assert (tmp_path / "plots" / "tools.png").is_file() and "plots/tools.png" in text
    assert "<code>tool_use_rate</code>" in text
    plain = tmp_path / "plain"
    plain.mkdir()
    fake_run(plain, alarms=False)
    write_report(plain)
    assert not (plain / "plots" / "tools.png").exists()
