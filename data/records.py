"""Task records: one JSON object per line, `{"id", "prompt", "verifier", "reference", "meta"}`.

A task knows its prompt, its reference and its verifier's name, and nothing of reward math. Reading is
strict and every error names the file, the line and the field, so a bad line never passes silently.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REQUIRED_FIELDS = ("id", "prompt", "verifier", "reference")


class DataError(ValueError):
    """Bad input data; the message names the file, the line and the field."""


@dataclass
class Task:
    id: str
    prompt: str
    verifier: str
    reference: Any
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return str(self.meta.get("family") or self.verifier)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line_number, object)` for each non-blank line; malformed JSON raises `DataError`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def read_jsonl(path: str | os.PathLike, missing_ok: bool = False) -> list[dict[str, Any]]:
    """Every object of a JSONL file; an empty list for a missing file when `missing_ok`."""
    if missing_ok and not Path(path).is_file():
        return []
    return [obj for _, obj in iter_jsonl(path)]


def keep_steps_before(path: str | os.PathLike, before_step: int) -> None:
    """Cut a JSONL file of per-step lines (metrics, alarms) back to the lines with `step` < before_step."""
    if Path(path).is_file():
        write_jsonl(path, [obj for obj in read_jsonl(path) if obj["step"] < before_step])


def require(obj: dict[str, Any], fields: Iterable[str], where: str) -> None:
    """Raise `DataError` naming `where` (file:line) and the first missing field."""
    for name in fields:
        if name not in obj:
            raise DataError(f"{where}: missing field {name!r}")


def task_from_json(obj: dict[str, Any], where: str) -> Task:
    require(obj, REQUIRED_FIELDS, where)
    for name in ("id", "prompt", "verifier"):
        if not isinstance(obj[name], str) or not obj[name]:
            raise DataError(f"{where}: field {name!r} must be a non-empty string, got {obj[name]!r}")
    meta = obj.get("meta") or {}
    if not isinstance(meta, dict):
        raise DataError(f"{where}: field 'meta' must be an object, got {type(meta).__name__}")
    return Task(obj["id"], obj["prompt"], obj["verifier"], obj["reference"], meta)


def read_tasks(path: str | os.PathLike, check_verifiers: bool = True) -> list[Task]:
    """Read and validate a task file. Unknown verifier names and duplicate ids are errors."""
    tasks, seen = [], {}
    known = None
    if check_verifiers:
        import verifiers

        known = set(verifiers.names())
    for lineno, obj in iter_jsonl(path):
        where = f"{path}:{lineno}"
        task = task_from_json(obj, where)
        if known is not None and task.verifier not in known:
            raise DataError(f"{where}: field 'verifier': unknown verifier {task.verifier!r} "
                            f"(registered: {', '.join(sorted(known))})")
        if task.id in seen:
            raise DataError(f"{where}: field 'id': duplicate id {task.id!r} (first on line {seen[task.id]})")
        seen[task.id] = lineno
        tasks.append(task)
    if not tasks:
        raise DataError(f"{path}: no tasks")
    return tasks


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> None:
    """Write rows atomically: a crash never leaves a half-written file under the final name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def write_tasks(path: str | os.PathLike, tasks: Iterable[Task]) -> None:
    write_jsonl(path, (t.to_json() for t in tasks))


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write one JSON document atomically (temporary name, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
