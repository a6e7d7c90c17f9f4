"""Converters from public dataset formats to task records (`reasoner data import --format ...`).

Each importer reads one raw record and returns a `Task`; `import_file` handles the file, numbering and
errors (file, line and field named). Worked solutions, where the format has them, go to `meta.solution`
so that `sft` can use them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data.records import DataError, Task, iter_jsonl, require

MATH_INSTRUCTION = "Put your final answer in \\boxed{}."


def _gsm8k_solution(answer: str) -> str:
    """GSM8K's worked solution with its calculator annotations (<<2+2=4>>) removed and the answer boxed."""
    work, _, final = answer.rpartition("####")
    work = re.sub(r"<<[^>]*>>", "", work).strip()
    return f"{work}\nThe final answer is \\boxed{{{final.strip()}}}."


def from_gsm8k(raw: dict[str, Any], index: int, where: str) -> Task:
    require(raw, ("question", "answer"), where)
    if "####" not in raw["answer"]:
        raise DataError(f"{where}: field 'answer' has no '####' final answer")
    final = raw["answer"].rpartition("####")[2].strip().replace(",", "")
    return Task(f"gsm8k/{index}", f"{raw['question']}\n{MATH_INSTRUCTION}", "math", final,
                {"source": "gsm8k", "family": "math", "solution": _gsm8k_solution(raw["answer"])})


def from_math(raw: dict[str, Any], index: int, where: str) -> Task:
    require(raw, ("problem", "answer"), where)
    meta = {"source": "math", "family": "math"}
    for key in ("subject", "level", "unique_id"):
        if key in raw:
            meta[key] = raw[key]
    if "solution" in raw:
        meta["solution"] = raw["solution"]
    task_id = raw.get("unique_id") or f"math/{index}"
    return Task(str(task_id), f"{raw['problem']}\n{MATH_INSTRUCTION}", "math", str(raw["answer"]), meta)


def from_humaneval(raw: dict[str, Any], index: int, where: str) -> Task:
    require(raw, ("task_id", "prompt", "test", "entry_point"), where)
    prompt = ("Complete the following Python function. Answer with the whole function in a ```python block.\n\n"
              f"```python\n{raw['prompt']}```")
    reference = {"test": raw["test"], "entry_point": raw["entry_point"], "prompt_prefix": raw["prompt"]}
    meta = {"source": "humaneval", "family": "code"}
    if "canonical_solution" in raw:
        meta["solution"] = f"```python\n{raw['prompt']}{raw['canonical_solution']}```"
    return Task(str(raw["task_id"]), prompt, "code", reference, meta)


def from_mbpp(raw: dict[str, Any], index: int, where: str) -> Task:
    require(raw, ("text", "test_list"), where)
    tests = raw["test_list"]
    if not isinstance(tests, list) or not tests:
        raise DataError(f"{where}: field 'test_list' must be a non-empty list of assert statements")
    # The first test shows the expected function name and signature, as the MBPP paper's prompts do.
    prompt = f"{raw['text']}\nYour code should pass this test:\n{tests[0]}"
    reference = {"tests": tests}
    if raw.get("test_setup_code"):
        reference["setup"] = raw["test_setup_code"]
    meta = {"source": "mbpp", "family": "code"}
    if "code" in raw:
        meta["solution"] = f"```python\n{raw['code'].replace(chr(13), '')}\n```"
    return Task(f"mbpp/{raw.get('task_id', index)}", prompt, "code", reference, meta)


IMPORTERS: dict[str, Callable[[dict[str, Any], int, str], Task]] = {
    "gsm8k": from_gsm8k, "math": from_math, "humaneval": from_humaneval, "mbpp": from_mbpp,
}


def import_file(fmt: str, path: str | Path) -> list[Task]:
    if fmt not in IMPORTERS:
        raise DataError(f"unknown format {fmt!r}; formats: {', '.join(IMPORTERS)}")
    convert = IMPORTERS[fmt]
    tasks = [convert(raw, i, f"{path}:{lineno}") for i, (lineno, raw) in enumerate(iter_jsonl(path))]
    if not tasks:
        raise DataError(f"{path}: no records")
    return tasks
