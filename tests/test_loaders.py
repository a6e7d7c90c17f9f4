"""Task records from JSONL, Parquet and CSV through `datasets` with a column mapping, and their errors."""

import json

import pytest

from data.loaders import load_tasks, parse_columns
from data.records import DataError, read_tasks
from pipelines.cli import main

ROWS = [{"idx": 7, "question": "What is 2 + 2?", "answer": 4, "topic": "arith"},
        {"idx": 8, "question": "What is 3 * 3?", "answer": 9, "topic": "arith"}]
COLUMNS = "prompt=question,reference=answer,id=idx"


def _write(tmp_path, fmt, rows=ROWS):
    import pandas as pd

    path = tmp_path / f"t.{fmt}"
    frame = pd.DataFrame(rows)
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    return path


def test_parse_columns():
    assert parse_columns(COLUMNS + ",meta.subject=topic") == {"prompt": "question", "reference": "answer", "id": "idx",
                                                              "meta.subject": "topic"}
    with pytest.raises(DataError, match="FIELD=COLUMN"):
        parse_columns("prompt")
    with pytest.raises(DataError, match="unknown field 'answer'"):
        parse_columns("answer=x")


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_each_format_maps_columns(tmp_path, fmt):
    tasks = load_tasks(str(_write(tmp_path, fmt)), fmt, COLUMNS + ",meta.subject=topic", verifier="math")
    assert [(t.id, t.prompt, t.verifier, t.reference) for t in tasks] == [
        ("7", "What is 2 + 2?", "math", "4"), ("8", "What is 3 * 3?", "math", "9")]
    assert tasks[0].meta == {"source": "t", "subject": "arith"}  # a mapped column is not repeated


def test_ids_default_to_file_and_row(tmp_path):
    tasks = load_tasks(str(_write(tmp_path, "csv")), "csv", "prompt=question,reference=answer", verifier="math")
    assert [t.id for t in tasks] == ["t/0", "t/1"]


def test_code_reference_from_a_json_string(tmp_path):
    rows = [{"q": "Write f.", "ref": json.dumps({"tests": ["assert f() == 1"]})}]
    task = load_tasks(str(_write(tmp_path, "csv", rows)), "csv", "prompt=q,reference=ref", verifier="code")[0]
    assert task.reference == {"tests": ["assert f() == 1"]}


@pytest.mark.parametrize("rows, columns, verifier, message", [
    (ROWS, "prompt=question,reference=answer", "", "give --verifier"),
    (ROWS, "prompt=q,reference=answer", "math", "column 'q' \\(for 'prompt'\\) not found"),
    (ROWS, COLUMNS, "nope", "row 1: field 'verifier': unknown verifier 'nope'"),
    ([ROWS[0], {**ROWS[1], "question": ""}], COLUMNS, "math", "row 2: field 'prompt'"),
    ([ROWS[0], {**ROWS[1], "idx": 7}], COLUMNS, "math", "row 2: field 'id': duplicate id '7'"),
    ([ROWS[0], {**ROWS[1], "answer": ""}], COLUMNS, "math", "row 2: field 'reference' is empty"),
])
def test_errors_name_file_row_and_field(tmp_path, rows, columns, verifier, message):
    path = _write(tmp_path, "jsonl", rows)
    with pytest.raises(DataError, match=message) as info:
        load_tasks(str(path), "jsonl", columns, verifier)
    assert str(path) in str(info.value)


def test_malformed_jsonl_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    with pytest.raises(DataError, match="bad.jsonl:2: malformed JSON"):
        load_tasks(str(path), "jsonl", COLUMNS, "math")


def test_missing_file_and_offline_hub(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="no such file"):
        load_tasks(str(tmp_path / "none.csv"), "csv", COLUMNS, "math")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="openai/gsm8k: .*offline|switched off"):
        load_tasks("openai/gsm8k", "hub", COLUMNS, "math")


def test_cli_import_csv_with_columns(tmp_path):
    out = tmp_path / "out.jsonl"
    assert main(["data", "import", "--format", "csv", str(_write(tmp_path, "csv")), "--columns", COLUMNS,
                 "--verifier", "math", "--output", str(out)]) == 0
    assert [t.id for t in read_tasks(out)] == ["7", "8"]
    assert main(["data", "import", "--format", "csv", str(tmp_path / "t.csv"), "--columns", "prompt=nope",
                 "--verifier", "math", "--output", str(out)]) == 2
