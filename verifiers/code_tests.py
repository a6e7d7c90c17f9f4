"""The `code` verifier: run the program taken from a response against unit tests in the sandbox.

References (the README's "Verifiers" section):
    {"tests": ["assert f(1) == 2", ...], "setup": "optional"}             MBPP style, one test per assert
    {"test": "def check(candidate): ...", "entry_point": "f",
     "prompt_prefix": "optional"}                                          HumanEval style, one test: check(f)
    {"stdio": [{"input": "1 2\\n", "output": "3\\n"}, ...]}                 one test per input

A HumanEval-style program gets the whole `prompt_prefix` in front of it: as the start of its function when it
does not define the entry point itself, and as code before it when it does (its own `def` then replaces the
prompt's stub, and the prompt's imports and helpers, `List` or `poly`, still resolve). A prefix that is not
valid Python on its own contributes only its import lines. The tests' `check` takes only the entry point
from the program; helpers it calls come from the prompt, run by the trusted worker.

The reward is 1.0 exactly when every test passed; `partial_credit` is the separate shaping step that gives
the fraction of tests passed. Tests run in a trusted process apart from the program (see `sandbox`), so a
program cannot pass by exiting early, printing a fake result or returning objects that equal anything.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import re
from collections.abc import Iterable
from typing import Any

from sandbox import Sandbox, default_sandbox, job
from verifiers.base import Verdict, Verifier, register

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}


def extract_program(response: str) -> str | None:
    """The last fenced ```python block, else the last fenced block, else the whole response."""
    if not response or not response.strip():
        return None
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(response)]
    python = [body for tag, body in blocks if tag in _PYTHON_TAGS]
    if python:
        return python[-1]
    if blocks:
        return blocks[-1][1]
    return response


def _defines(program: str, name: str) -> bool:
    return re.search(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", program, re.M) is not None


@functools.lru_cache(maxsize=1024)
def _has_statement(test: str) -> bool:
    """Whether a test's code holds a statement to run (one that does not parse is left to fail in the sandbox)."""
    try:
        return bool(ast.parse(test).body)
    except SyntaxError:
        return True


def _compiles(source: str) -> bool:
    try:
        compile(source, "prompt.py", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def _imports(prefix: str) -> str:
    """The top-level import statements of a prompt."""
    lines = [line for line in prefix.splitlines() if re.match(r"(import|from)\s+\w", line)]
    return "\n".join(lines) + "\n" if lines else ""


def _normalize_output(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).rstrip()


def partial_credit(verdict: Verdict) -> float:
    """Shaping: the fraction of tests passed (0.0 when none ran). Separate from the verifier's reward."""
    tests = verdict.details.get("tests") or []
    return sum(t["passed"] for t in tests) / len(tests) if tests else 0.0


def run_distinct(sandbox: Sandbox, jobs: list[dict], workers: int | None = None) -> list[dict]:
    """The sandbox's result for each job, with each distinct job run once: a group of samples from one
    policy often repeats a program word for word (at low entropy, most of a group), and the same program
    under the same tests is the same run. A duplicate gets its own copy of the result. (A program whose
    outcome is random gets one draw for all its copies: the same chance of passing for each.)"""
    keys = [json.dumps(j, sort_keys=True) for j in jobs]
    first: dict[str, int] = {}  # each distinct job's first index, in order
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    ran = dict(zip(first, sandbox.map([jobs[i] for i in first.values()], workers)))
    return [copy.deepcopy(ran[key]) for key in keys]


@register("code")
class CodeVerifier(Verifier):
    """Unit tests for model-written Python, run in the sandbox. `verify_batch` keeps every worker busy."""

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 512, sandbox: Sandbox | None = None):
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self._sandbox = sandbox

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox or default_sandbox()

    def verify(self, response: str, reference: Any) -> Verdict:
        return self.verify_batch([(response, reference)])[0]

    def verify_batch(self, pairs: Iterable[tuple[str, Any]], workers: int | None = None) -> list[Verdict]:
        """Verdicts in input order; the programs of the batch share the sandbox's warm workers (all of
        them, or at most `workers`)."""
        plans = []
        for response, reference in pairs:
            try:
                plans.append(self._plan(response, reference))
            except (TypeError, AttributeError, ValueError, KeyError) as exc:  # a malformed reference
                plans.append(Verdict(False, 0.0, f"bad reference: {type(exc).__name__}: {exc}"[:200],
                                     extract_program(response) if isinstance(response, str) else None))
        jobs = [j for plan in plans if not isinstance(plan, Verdict) for j in plan[1]]
        results = iter(run_distinct(self.sandbox, jobs, workers))
        verdicts = []
        for plan in plans:
            if isinstance(plan, Verdict):
                verdicts.append(plan)
                continue
            program, plan_jobs, reference = plan
            verdicts.append(self._judge(program, reference, [next(results) for _ in plan_jobs]))
        return verdicts

    # -- one response -------------------------------------------------------------------------------------

    def _plan(self, response: Any, reference: Any):
        """(program, jobs, reference), or a Verdict when there is nothing to run."""
        program = extract_program(response) if isinstance(response, str) else None
        if program is None:
            return Verdict(False, 0.0, "no program in response", None, {"tests": []})
        if isinstance(reference, str):
            try:
                reference = json.loads(reference)
            except ValueError:
                return Verdict(False, 0.0, "bad reference: not a JSON object", program)
        if not isinstance(reference, dict):
            return Verdict(False, 0.0, "bad reference: not an object", program)
        limits = {"timeout_s": self.timeout_s, "memory_mb": self.memory_mb}
        formats = [name for name, present in (("stdio", "stdio" in reference), ("tests", "tests" in reference),
                                              ("test", "test" in reference or "entry_point" in reference)) if present]
        if len(formats) > 1:  # a program must not pass one format's cases while the other's go unrun
            raise ValueError(f"one test format per reference, got {' and '.join(formats)}")
        if "stdio" in reference:
            cases = reference["stdio"]
            if not isinstance(cases, list) or not all(
                    isinstance(c, dict) and isinstance(c.get("input", ""), str) and isinstance(c.get("output"), str)
                    for c in cases):
                # a case without its output would expect none, and pay every program that prints nothing
                raise TypeError("stdio must be a list of {input, output} objects with string values")
            if cases and not any(c["output"].strip() for c in cases):  # every silent program would pass them all
                raise ValueError("stdio cases that all expect no output")
            jobs = [job("run", source=program, stdin=str(c.get("input", "")), **limits) for c in cases]
            return program, jobs, reference
        if "test" in reference and "entry_point" in reference:
            entry, prefix = str(reference["entry_point"]), str(reference.get("prompt_prefix") or "")
            if not entry.isidentifier():
                raise ValueError(f"entry_point {entry!r} is not a name")
            if not prefix:
                source = program
            elif not _defines(program, entry):  # the body of the prompt's function
                source = prefix + program
            elif _compiles(prefix):  # a whole function after the prompt: the prompt's helpers stay defined
                source = prefix + "\n" + program
            else:
                source = _imports(prefix) + program
            check = str(reference["test"])
            tests_job = job("tests", source=source, check=check, entry_point=entry, prefix=prefix, **limits)
            return program, [tests_job], reference
        if "tests" in reference:
            if not isinstance(reference["tests"], list) or not reference["tests"]:
                raise TypeError("tests must be a non-empty list of assert statements")
            tests, setup = [str(t) for t in reference["tests"]], str(reference.get("setup") or "")
            empty = next((i for i, t in enumerate(tests) if not _has_statement(t)), None)
            if empty is not None:  # an empty test passes every program
                raise ValueError(f"test {empty + 1} holds no statement")
            return program, [job("tests", source=program, setup=setup, tests=tests, **limits)], reference
        return Verdict(False, 0.0, "bad reference: needs tests, test+entry_point or stdio", program)

    def _judge(self, program: str, reference: dict, results: list[dict]) -> Verdict:
        base = {"isolation": results[0].get("isolation") if results else None}
        if results and results[0].get("warning"):
            base["warning"] = results[0]["warning"]  # degraded isolation is never silent
        if "stdio" in reference:
            return self._judge_stdio(program, reference["stdio"], results, base)
        result = results[0]
        tests = result.get("tests") or []
        details = {**base, "tests": tests, "status": result["status"], "stderr": result.get("stderr", "")[-2000:]}
        load_error = result.get("load_error")
        n = len(tests)
        passed = sum(t["passed"] for t in tests)
        if load_error and load_error.startswith("SyntaxError"):
            return Verdict(False, 0.0, f"syntax error: {load_error[len('SyntaxError: '):][:120]}", program, details)
        if result["status"] == "timeout" and passed < n:
            return Verdict(False, 0.0, f"timeout (passed {passed}/{n} tests)", program, details)
        if result["status"] == "memory" and passed < n:
            return Verdict(False, 0.0, f"memory limit (passed {passed}/{n} tests)", program, details)
        if result["status"] == "killed" and passed < n:
            return Verdict(False, 0.0, f"killed: {result.get('reason')} (passed {passed}/{n} tests)", program, details)
        if load_error:
            return Verdict(False, 0.0, f"program failed to load: {load_error[:120]}", program, details)
        if n and passed == n and result.get("completed"):
            return Verdict(True, 1.0, f"passed {n}/{n} tests", program, details)
        first = next((i for i, t in enumerate(tests) if not t["passed"]), None)
        if first is None:
            why = result.get("reason") or result["status"]
            return Verdict(False, 0.0, f"tests did not complete ({why})", program, details)
        error = (tests[first].get("error") or "failed").split(":")[0]
        return Verdict(False, 0.0, f"failed: {error} in test {first + 1} (passed {passed}/{n})", program, details)

    def _judge_stdio(self, program: str, cases: list, results: list[dict], base: dict) -> Verdict:
        tests = []
        for case, r in zip(cases, results):
            expected = _normalize_output(str(case.get("output", "")))
            ok = r["status"] == "ok" and _normalize_output(r["stdout"]) == expected
            error = None if ok else ("wrong output" if r["status"] == "ok" else r.get("reason") or r["status"])
            tests.append({"passed": ok, "error": error, "status": r["status"]})
        details = {**base, "tests": tests}
        n, passed = len(tests), sum(t["passed"] for t in tests)
        if n == 0:
            return Verdict(False, 0.0, "bad reference: no stdio cases", program, details)
        if passed == n:
            return Verdict(True, 1.0, f"passed {n}/{n} tests", program, details)
        first = next(i for i, t in enumerate(tests) if not t["passed"])
        if tests[first]["status"] == "timeout":
            return Verdict(False, 0.0, f"timeout in test {first + 1} (passed {passed}/{n})", program, details)
        if "SyntaxError" in results[first].get("stderr", "")[-500:]:
            return Verdict(False, 0.0, "syntax error", program, details)
        reason = f"failed: {tests[first]['error']} in test {first + 1} (passed {passed}/{n})"
        return Verdict(False, 0.0, reason, program, details)
