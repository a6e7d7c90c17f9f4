"""`reasoner data import` converters on the public files, and their errors."""

import json

import pytest

from data.importers import import_file
from data.records import DataError


@pytest.mark.parametrize("fmt, name, count", [
    ("gsm8k", "gsm8k_test.jsonl", 1319), ("math", "math500_test.jsonl", 500),
    ("humaneval", "humaneval.jsonl", 164), ("mbpp", "mbpp.jsonl", 974),
])
def test_public_files_import_completely(shared_data, fmt, name, count):
    tasks = import_file(fmt, shared_data / name)
    assert len(tasks) == count and len({t.id for t in tasks}) == count
    assert all(t.prompt and t.verifier in ("math", "code") for t in tasks)


def test_gsm8k_reference_is_the_number_after_the_hashes(shared_data):
    task = import_file("gsm8k", shared_data / "gsm8k_test.jsonl")[0]
    assert task.reference == "18" and task.meta["source"] == "gsm8k"
    assert "<<" not in task.meta["solution"] and task.meta["solution"].endswith("\\boxed{18}.")


def test_math_keeps_subject_and_level(shared_data):
    task = import_file("math", shared_data / "math500_test.jsonl")[0]
    assert task.meta["subject"] and task.meta["level"]


def test_code_references_follow_the_contract(shared_data):
    he = import_file("humaneval", shared_data / "humaneval.jsonl")[0]
    assert set(he.reference) == {"test", "entry_point", "prompt_prefix"}
    mbpp = import_file("mbpp", shared_data / "mbpp.jsonl")[0]
    assert mbpp.reference["tests"][0].startswith("assert")


def test_missing_field_names_file_line_and_field(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n" + json.dumps({"question": "q"}) + "\n")
    with pytest.raises(DataError, match=r"g\.jsonl:2: missing field 'answer'"):
        import_file("gsm8k", path)


def test_unknown_format():
    with pytest.raises(DataError, match="unknown format 'csvx'"):
        import_file("csvx", "x.jsonl")
