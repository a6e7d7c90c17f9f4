"""Task records: strict reading with errors that name file, line and field; atomic writing."""

import json

import pytest

from data.records import DataError, Task, read_tasks, write_tasks


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"id": "t/1", "prompt": "What is 1+1?", "verifier": "math", "reference": "2", "meta": {"a": 1}})


def test_round_trip_keeps_meta(tmp_path):
    tasks = [Task("a", "p", "math", "1", {"source": "x", "nested": {"k": [1, 2]}}),
             Task("b", "q", "code", {"tests": ["assert True"]})]
    write_tasks(tmp_path / "t.jsonl", tasks)
    assert read_tasks(tmp_path / "t.jsonl") == tasks


def test_malformed_json_names_file_and_line(tmp_path):
    path = _write(tmp_path / "bad.jsonl", [GOOD, '{"id": "t/2", "prompt": '])
    with pytest.raises(DataError, match=r"bad\.jsonl:2: malformed JSON"):
        read_tasks(path)


def test_missing_field_names_file_line_and_field(tmp_path):
    path = _write(tmp_path / "t.jsonl", [GOOD, json.dumps({"id": "t/2", "prompt": "p", "verifier": "math"})])
    with pytest.raises(DataError, match=r"t\.jsonl:2: missing field 'reference'"):
        read_tasks(path)


def test_unknown_verifier_names_the_field_and_the_known_ones(tmp_path):
    row = json.dumps({"id": "t/1", "prompt": "p", "verifier": "chess", "reference": "e4"})
    path = _write(tmp_path / "t.jsonl", [row])
    with pytest.raises(DataError, match=r"t\.jsonl:1: field 'verifier': unknown verifier 'chess' \(registered: .*math"):
        read_tasks(path)


def test_duplicate_ids_are_an_error(tmp_path):
    path = _write(tmp_path / "t.jsonl", [GOOD, GOOD])
    with pytest.raises(DataError, match=r"t\.jsonl:2: field 'id': duplicate id 't/1' \(first on line 1\)"):
        read_tasks(path)


def test_wrong_types_are_errors(tmp_path):
    path = _write(tmp_path / "t.jsonl", [json.dumps({"id": 3, "prompt": "p", "verifier": "math", "reference": "1"})])
    with pytest.raises(DataError, match=r"t\.jsonl:1: field 'id' must be a non-empty string"):
        read_tasks(path)
    path = _write(tmp_path / "u.jsonl", ['["not", "an", "object"]'])
    with pytest.raises(DataError, match=r"u\.jsonl:1: expected a JSON object"):
        read_tasks(path)


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_tasks(tmp_path / "absent.jsonl")
    with pytest.raises(DataError, match="no tasks"):
        read_tasks(_write(tmp_path / "empty.jsonl", [""]))


def test_write_is_atomic_and_leaves_no_temporary(tmp_path):
    write_tasks(tmp_path / "t.jsonl", [Task("a", "p", "math", "1")])
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]
