"""Exact de-duplication and the n-gram contamination check between training and held-out tasks."""

import json

from data.dedup import contamination, deduplicate, ngrams, normalise
from data.records import Task, write_tasks
from pipelines.cli import main

LONG = "Natalia sold clips to forty eight of her friends in April and then she sold half as many clips in May"


def _t(i, prompt):
    return Task(str(i), prompt, "math", "1")


def test_normalise_ignores_case_and_whitespace():
    assert normalise("  What IS\n2 +  2? ") == "what is 2 + 2?"


def test_short_prompts_are_one_ngram_and_long_ones_slide():
    assert ngrams("What is 2 + 2?", 13) == {("what", "is", "2", "+", "2", "?")}
    assert len(ngrams(LONG, 13)) == len(LONG.split()) - 12


def test_deduplicate_keeps_the_first():
    kept, dropped = deduplicate([_t(1, "What is 2+2?"), _t(2, "what is  2+2?"), _t(3, "What is 3+3?")])
    assert [t.id for t in kept] == ["1", "3"] and dropped == [("2", "1")]


def test_contamination_reports_counts_and_examples():
    train = [_t("a", LONG), _t("b", "What is 2 + 2?")]
    heldout = [_t("x", LONG + " How many clips did she sell?"),  # 9 of its 16 13-grams ("?" is a token) are in training
               _t("y", "what is 2 +  2?"),  # an exact repeat up to case and spacing
               _t("z", "A completely different question about trains leaving two stations at noon")]
    report = contamination(train, heldout, n=13, threshold=0.5)
    assert report["heldout_with_overlap"] == 2 and report["exact_duplicates"] == 1
    assert report["contaminated_ids"] == ["y", "x"]
    x = next(e for e in report["examples"] if e["heldout_id"] == "x")
    assert x["train_id"] == "a" and x["overlap"] == round(9 / 16, 4)
    assert json.loads(json.dumps(report)) == report


def test_clean_split_reports_nothing():
    report = contamination([_t(1, "What is 2 + 3?")], [_t(2, "What is 2 + 4?")])
    assert report["contaminated"] == 0 and report["heldout_with_overlap"] == 0 and report["examples"] == []


def test_cli_data_check_writes_the_report(tmp_path):
    write_tasks(tmp_path / "train.jsonl", [_t("a", LONG), _t("b", "What is 2 + 2?")])
    write_tasks(tmp_path / "heldout.jsonl", [_t("y", "What is 2 + 2?"), _t("z", "What is 5 + 5?")])
    assert main(["data", "check", "--train", str(tmp_path / "train.jsonl"), "--heldout",
                 str(tmp_path / "heldout.jsonl"), "--output", str(tmp_path / "c.json")]) == 0
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["contaminated_ids"] == ["y"] and report["duplicates_in_train"] == 0


def test_operators_are_tokens():
    assert ngrams("Solve 3x - 6 = 15", 13) != ngrams("Solve 3x + 6 = 15", 13)
