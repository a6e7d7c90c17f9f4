"""Task records from any table: local JSONL, Parquet or CSV, or a Hugging Face hub dataset, read through
`datasets` with a column mapping (`reasoner data import --format csv --columns prompt=question,reference=answer`).

A mapping names, for each task field (`id`, `prompt`, `reference`, `verifier`, or `meta.KEY`), the column
that holds it. Columns not mapped pass into `meta`. Every error names the file (or hub name), the row
(1-based) and the field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from data.records import DataError, Task, iter_jsonl

FORMATS = {"jsonl": "json", "parquet": "parquet", "csv": "csv"}  # our name -> the `datasets` builder
FIELDS = ("id", "prompt", "reference", "verifier")


def parse_columns(text: str) -> dict[str, str]:
    """`prompt=question,reference=answer` -> {"prompt": "question", "reference": "answer"}."""
    mapping: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        field, sep, column = (s.strip() for s in part.partition("="))
        if not sep or not field or not column:
            raise DataError(f"--columns: expected FIELD=COLUMN, got {part!r}")
        if field not in FIELDS and not (field.startswith("meta.") and len(field) > 5):
            raise DataError(f"--columns: unknown field {field!r}; fields: {', '.join(FIELDS)}, meta.KEY")
        mapping[field] = column
    return mapping


def read_rows(source: str, fmt: str, split: str = "train", subset: str = "") -> list[dict[str, Any]]:
    """The rows of a local file or a hub dataset, as dicts."""
    import datasets

    if fmt == "hub":
        if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
            raise DataError(f"{source}: the Hugging Face hub is switched off here (HF_HUB_OFFLINE); download the "
                            "data and use --format jsonl|parquet|csv")
        try:
            return list(datasets.load_dataset(source, subset or None, split=split))
        except Exception as exc:  # offline, unknown name, unknown split: all the same advice
            raise DataError(f"{source}: could not load from the Hugging Face hub ({type(exc).__name__}: "
                            f"{str(exc)[:300]}); offline, download the data and use --format jsonl|parquet|csv") from None
    if fmt not in FORMATS:
        raise DataError(f"unknown format {fmt!r}; formats: {', '.join([*FORMATS, 'hub'])}")
    path = Path(source)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        return list(datasets.load_dataset(FORMATS[fmt], data_files=str(path), split="train"))
    except Exception as exc:
        if fmt == "jsonl":
            # `datasets` wants one schema for every line; our own reader names a malformed line, and reads
            # lines whose nested fields differ in shape (code references).
            return [row for _, row in iter_jsonl(path)]
        raise DataError(f"{path}: could not be read as {fmt} ({type(exc).__name__}: {str(exc)[:300]})") from None


def _reference(value: Any, verifier: str, where: str) -> Any:
    if value is None or value == "":
        raise DataError(f"{where}: field 'reference' is empty")
    if verifier == "code" and isinstance(value, str):
        try:  # CSV and Parquet carry a code reference as a JSON string
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DataError(f"{where}: field 'reference': a code reference must be a JSON object") from None
    if verifier == "code" and not isinstance(value, dict):
        raise DataError(f"{where}: field 'reference': a code reference must be an object, got {type(value).__name__}")
    if verifier != "code" and isinstance(value, (int, float)):
        value = str(int(value)) if float(value).is_integer() else str(value)
    return value


def rows_to_tasks(rows: list[dict[str, Any]], columns: dict[str, str], verifier: str, source: str) -> list[Task]:
    """Map and validate rows; unknown verifiers, empty prompts and duplicate ids are errors."""
    import verifiers

    if "prompt" not in columns or "reference" not in columns:
        raise DataError(f"{source}: --columns must map 'prompt' and 'reference' (e.g. prompt=question,reference=answer)")
    if not verifier and "verifier" not in columns:
        raise DataError(f"{source}: give --verifier NAME or map a column to 'verifier'")
    if rows:
        missing = [f"{c!r} (for {f!r})" for f, c in columns.items() if c not in rows[0]]
        if missing:
            raise DataError(f"{source}: column {', '.join(missing)} not found; columns: {', '.join(rows[0])}")
    known = set(verifiers.names())
    stem = Path(source).stem if Path(source).suffix else source.replace("/", "_")
    mapped = set(columns.values())
    tasks, seen = [], {}
    for number, row in enumerate(rows, 1):
        where = f"{source}: row {number}"
        name = str(row.get(columns["verifier"], "")) if "verifier" in columns else verifier
        if name not in known:
            raise DataError(f"{where}: field 'verifier': unknown verifier {name!r} (registered: {', '.join(sorted(known))})")
        prompt = row.get(columns["prompt"])
        if not isinstance(prompt, str) or not prompt.strip():
            raise DataError(f"{where}: field 'prompt' (column {columns['prompt']!r}) must be a non-empty string, "
                            f"got {prompt!r}")
        task_id = str(row[columns["id"]]) if "id" in columns else f"{stem}/{number - 1}"
        if not task_id:
            raise DataError(f"{where}: field 'id' (column {columns['id']!r}) is empty")
        if task_id in seen:
            raise DataError(f"{where}: field 'id': duplicate id {task_id!r} (first in row {seen[task_id]})")
        seen[task_id] = number
        reference = _reference(row.get(columns["reference"]), name, where)
        meta = {"source": stem, **{k: v for k, v in row.items() if k not in mapped}}
        meta.update({f[5:]: row[c] for f, c in columns.items() if f.startswith("meta.")})
        tasks.append(Task(task_id, prompt, name, reference, meta))
    if not tasks:
        raise DataError(f"{source}: no rows")
    return tasks


def load_tasks(source: str, fmt: str, columns: str | dict[str, str], verifier: str = "", split: str = "train",
               subset: str = "") -> list[Task]:
    """Task records from a local JSONL/Parquet/CSV file or a hub dataset (`fmt="hub"`), by a column mapping."""
    mapping = parse_columns(columns) if isinstance(columns, str) else dict(columns)
    return rows_to_tasks(read_rows(source, fmt, split, subset), mapping, verifier, source)
