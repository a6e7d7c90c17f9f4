"""The `code` verifier: extraction, the three reference styles, verdict reasons, shaping, and the public
HumanEval and MBPP reference solutions (all must pass; a broken body must fail)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox import Sandbox
from verifiers.base import Verdict
from verifiers.code_tests import CodeVerifier, extract_program, partial_credit

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ADD = {"tests": ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"]}


@pytest.fixture(scope="module")
def verifier(sandbox):
    return CodeVerifier(timeout_s=5.0, sandbox=sandbox)


@pytest.fixture(scope="module")
def patient(sandbox):
    """For the public references: a few are slow by design (MBPP 123 sums divisors up to 9999, seconds
    on a busy CPU); these tests check the harness, not the references' speed."""
    return CodeVerifier(timeout_s=30.0, sandbox=sandbox)


def load(name: str) -> list[dict]:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data directory is not checked out next to the repo)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- extraction -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, program",
    [
        ("```python\nx = 1\n```", "x = 1\n"),
        ("```py\nx = 1\n```", "x = 1\n"),
        ("text\n```python\nx = 1\n```\nmore\n```python\nx = 2\n```\nbye", "x = 2\n"),
        ("```python\nx = 1\n```\n```text\nsample output\n```", "x = 1\n"),  # python wins over a later block
        ("```\nx = 3\n```", "x = 3\n"),
        ("```js\nlet x\n```\n```\ny = 4\n```", "y = 4\n"),  # else the last block of any kind
        ("def f():\n    return 1\n", "def f():\n    return 1\n"),  # else the whole response
        ("   ```python\n    x = 1\n   ```", "    x = 1\n"),
    ],
)
def test_extract_program(response, program):
    assert extract_program(response) == program


@pytest.mark.parametrize("response", ["", "   \n", None])
def test_empty_response_has_no_program(verifier, response):
    assert extract_program(response or "") is None
    verdict = verifier.verify(response, ADD)
    assert not verdict.correct and verdict.no_answer


# -- the three reference styles ---------------------------------------------------------------------------


def test_mbpp_style(verifier):
    verdict = verifier.verify("```python\ndef add(a, b):\n    return a + b\n```", ADD)
    assert verdict == Verdict(True, 1.0, "passed 3/3 tests", "def add(a, b):\n    return a + b\n", verdict.details)
    assert [t["passed"] for t in verdict.details["tests"]] == [True, True, True]


def test_mbpp_setup_runs_after_the_program(verifier):
    reference = {"tests": ["assert total(root) == 6"], "setup": "root = Node(1, Node(2), Node(3))"}
    program = (
        "class Node:\n    def __init__(self, v, l=None, r=None):\n        self.v, self.l, self.r = v, l, r\n"
        "def total(n):\n    return 0 if n is None else n.v + total(n.l) + total(n.r)\n"
    )
    assert verifier.verify(program, reference).correct


def test_failing_test_is_named_with_partial_credit(verifier):
    verdict = verifier.verify("def add(a, b):\n    return a + b if a >= 0 else 99", ADD)
    assert not verdict.correct and verdict.reward == 0.0
    assert verdict.reason == "failed: AssertionError in test 3 (passed 2/3)"
    assert partial_credit(verdict) == pytest.approx(2 / 3)
    assert [t["passed"] for t in verdict.details["tests"]] == [True, True, False]


def test_humaneval_style_with_prompt_prefix(verifier):
    reference = {
        "test": "def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n",
        "entry_point": "total",
        "prompt_prefix": 'def total(xs: list) -> int:\n    """Sum of xs."""\n',
    }
    assert verifier.verify("    return sum(xs)\n", reference).correct  # body only: the prefix is put in front
    assert verifier.verify("```python\ndef total(xs):\n    return sum(xs)\n```", reference).correct
    typed = {**reference, "prompt_prefix": "from typing import List\n\n\n" + reference["prompt_prefix"]}
    assert verifier.verify("def total(xs: List[int]) -> int:\n    return sum(xs)\n", typed).correct
    verdict = verifier.verify("    return None\n", reference)
    assert not verdict.correct and verdict.reason.startswith("failed: AssertionError in test 1")


def test_stdio_style(verifier):
    reference = {"stdio": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10"}]}
    program = "a, b = map(int, input().split())\nprint(a + b)   \n"
    verdict = verifier.verify(program, reference)
    assert verdict.correct and verdict.reason == "passed 2/2 tests"
    verdict = verifier.verify("print(3)", reference)
    assert verdict.reason == "failed: wrong output in test 2 (passed 1/2)" and partial_credit(verdict) == 0.5


def test_stdio_ignores_trailing_whitespace_only(verifier):
    reference = {"stdio": [{"input": "", "output": "a b\nc\n\n"}]}
    assert verifier.verify("print('a b  ')\nprint('c')", reference).correct
    assert not verifier.verify("print('a  b')\nprint('c')", reference).correct


# -- reasons ----------------------------------------------------------------------------------------------


def test_syntax_error(verifier):
    verdict = verifier.verify("def add(a, b)\n    return a + b", ADD)
    assert verdict.reason.startswith("syntax error") and partial_credit(verdict) == 0.0


def test_timeout_is_its_own_reason():
    sandbox = Sandbox(workers=1)
    try:
        verdict = CodeVerifier(timeout_s=0.5, sandbox=sandbox).verify("def add(a, b):\n    while True: pass", ADD)
    finally:
        sandbox.close()
    assert verdict.timed_out and not verdict.correct


def test_exception_in_the_program(verifier):
    verdict = verifier.verify("def add(a, b):\n    raise ValueError('nope')", ADD)
    assert verdict.reason == "failed: ValueError in test 1 (passed 0/3)"


def test_bad_references_give_verdicts_not_exceptions(verifier):
    for reference in [None, 3, "not json", {"nothing": 1}, {"stdio": []}, {"stdio": "x"}, {"stdio": [3]},
                      {"tests": "assert True"}, {"test": "def check(c): pass", "entry_point": "not a name"}]:
        verdict = verifier.verify("x = 1", reference)
        assert not verdict.correct and verdict.reason.startswith("bad reference")


def test_values_cross_the_boundary_faithfully(verifier):
    program = """
def f(kind):
    import collections, decimal, fractions
    return {
        "int": 10**30, "float": 0.1 + 0.2, "nan": float("nan"), "tuple": (1, [2, {3: "x"}]),
        "set": {1, 2}, "frozenset": frozenset({3}), "bytes": b"\\x00\\xff", "complex": 1 + 2j,
        "bool": True, "none": None, "decimal": decimal.Decimal("1.10"), "fraction": fractions.Fraction(1, 3),
        "counter": collections.Counter("aab"), "deque": collections.deque([1]), "range": range(3),
        "gen": (i * i for i in range(3)), "type": int, "keys": {"a": 1, "b": 2}.keys(),
        "values": {"a": 1}.values(), "items": {"a": 1}.items(),
    }[kind]
"""
    tests = [
        "assert f('int') == 10**30 and type(f('int')) is int",
        "assert f('float') == 0.30000000000000004",
        "assert f('nan') != f('nan')",
        "assert f('tuple') == (1, [2, {3: 'x'}])",
        "assert f('set') == {1, 2} and f('frozenset') == frozenset({3})",
        "assert f('bytes') == b'\\x00\\xff' and f('complex') == 1 + 2j",
        "assert f('bool') is True and f('none') is None",
        "assert str(f('decimal')) == '1.10' and f('fraction') * 3 == 1",
        "assert f('counter') == {'a': 2, 'b': 1} and f('deque') == collections.deque([1])",
        "assert f('range') == range(3) and list(f('gen')) == [0, 1, 4]",
        "assert f('type') is int",
        # dict views stay views, as in Python: a keys view equals a set, never a list
        "assert f('keys') == {'a', 'b'} and f('keys') != ['a', 'b'] and list(f('keys')) == ['a', 'b']",
        "assert list(f('values')) == [1] and f('items') == {('a', 1)} and f('items') != [('a', 1)]",
    ]
    verdict = verifier.verify(program, {"tests": tests})
    assert verdict.correct, verdict.details["tests"]


def test_builtin_named_function_under_test(verifier):
    """MBPP task 126 calls its function `sum`: when a test calls nothing else, the name is the program's."""
    program = "def sum(a, b):\n    return 6 if (a, b) == (10, 15) else 0\n"
    assert verifier.verify(program, {"tests": ["assert sum(10, 15) == 6"]}).correct


def test_builtins_on_the_expected_side_stay_the_workers(verifier):
    """Only the function under test may come from the program: a program that also defines `set` (or
    `sorted`) must not receive the expected values and answer them with placeholders."""
    tests = ["assert set(copy([3, 1, 2])) == set([1, 2, 3])", "assert set(copy([5, 4])) == set([4, 5])"]
    cheat = "def copy(x):\n    return None\ndef set(x=()):\n    return 0\n"
    assert not verifier.verify(cheat, {"tests": tests}).correct
    assert verifier.verify("def copy(x):\n    return list(x)\n", {"tests": tests}).correct
    sorted_tests = ["assert select([5, 1, 4], 2) == sorted([5, 1, 4])[1]"]
    cheat = "def select(l, k):\n    return 0\ndef sorted(x):\n    return [0, 0, 0]\n"
    assert not verifier.verify(cheat, {"tests": sorted_tests}).correct
    assert verifier.verify("def select(l, k):\n    return sorted(l)[k - 1]\n", {"tests": sorted_tests}).correct


def test_a_builtin_named_entry_point_leaves_the_checks_builtin_alone(verifier):
    """HumanEval-style with `entry_point: "sum"`: `check` receives the program's `sum` as its candidate, but
    `sum` inside `check` stays the builtin, or a program answering 0 everywhere would pass."""
    check = "def check(candidate):\n    assert candidate([1, 2, 3]) == sum([1, 2, 3])\n"
    reference = {"test": check, "entry_point": "sum"}
    assert not verifier.verify("def sum(*a, **k):\n    return 0\n", reference).correct
    assert verifier.verify("def sum(xs):\n    t = 0\n    for x in xs:\n        t += x\n    return t\n", reference).correct


@pytest.mark.parametrize("tests, cheat", [
    (["assert sorted([3, 1, 2]) == result"], "sorted = lambda *a: 'x'\nresult = 'x'\n"),  # it would choose both sides
    (["assert all(x % 2 == 0 for x in evens)"], "all = lambda *a: True\nevens = [1, 3]\n"),  # no comparison
    (["assert isinstance(answer, int)"], "isinstance = lambda *a: True\nanswer = 'x'\n"),
])
def test_no_builtin_comes_from_the_program_outside_the_function_under_test(verifier, tests, cheat):
    assert not verifier.verify(cheat, {"tests": tests}).correct


@pytest.mark.parametrize("reference", [
    {"stdio": [{"inputs": "1\n", "outputs": "2\n"}]},  # APPS's field names: no output would expect none
    {"stdio": [{}]},
    {"stdio": [{"input": "5\n", "output": ""}, {"input": "7\n", "output": " \n\n"}]},  # a silent program passes
    {"tests": [""]},
    {"tests": ["# assert f(1) == 2"]},
    {"tests": []},
    {"stdio": [{"input": "", "output": "7"}], "tests": ["assert f(1) == 2"]},  # one format would go unrun
])
def test_a_reference_that_would_pay_every_program_is_refused(verifier, reference):
    verdict = verifier.verify("pass", reference)
    assert not verdict.correct and verdict.reason.startswith("bad reference"), verdict.reason


def test_a_test_that_swallows_the_programs_exit_fails(verifier):
    """A bare `except:` in a check catches the worker's notice that the program exited or timed out; the
    test must fail all the same, as it did not run to its end on values the program returned."""
    check = ("def check(candidate):\n    try:\n        candidate(-1)\n        raised = False\n"
             "    except:\n        raised = True\n    assert raised\n")
    reference = {"test": check, "entry_point": "f"}
    assert not verifier.verify("import os\ndef f(x):\n    os._exit(0)\n", reference).correct
    assert verifier.verify("def f(x):\n    raise ValueError(x)\n", reference).correct


def test_verify_batch_keeps_order(verifier):
    pairs = [(f"def add(a, b):\n    return a + b + {i % 2}", ADD) for i in range(10)]
    pairs.append(("print(7)", {"stdio": [{"input": "", "output": "7"}]}))
    verdicts = verifier.verify_batch(pairs)
    assert [v.correct for v in verdicts] == [i % 2 == 0 for i in range(10)] + [True]


def test_registered_as_code():
    import verifiers

    assert isinstance(verifiers.get("code"), CodeVerifier)


# -- the public reference solutions -----------------------------------------------------------------------


@pytest.mark.slow
def test_every_humaneval_canonical_solution_passes(patient):
    rows = load("humaneval.jsonl")
    assert len(rows) == 164
    pairs = [
        (row["prompt"] + row["canonical_solution"],
         {"test": row["test"], "entry_point": row["entry_point"], "prompt_prefix": row["prompt"]})
        for row in rows
    ]
    verdicts = patient.verify_batch(pairs)
    failed = [(row["task_id"], v.reason) for row, v in zip(rows, verdicts) if not v.correct]
    assert failed == []
    broken = [(row["prompt"] + "    return None\n", ref) for row, (_, ref) in zip(rows, pairs)]
    passed_anyway = [row["task_id"] for row, v in zip(rows, patient.verify_batch(broken)) if v.correct]
    assert passed_anyway == []


@pytest.mark.slow
def test_every_mbpp_reference_solution_passes(patient):
    rows = load("mbpp.jsonl")
    assert len(rows) == 974
    pairs = [
        (f"```python\n{row['code']}\n```", {"tests": row["test_list"], "setup": row["test_setup_code"]})
        for row in rows
    ]
    verdicts = patient.verify_batch(pairs)
    failed = [(row["task_id"], v.reason) for row, v in zip(rows, verdicts) if not v.correct]
    assert failed == []


def test_a_repeated_program_runs_once_and_each_copy_gets_its_verdict(sandbox):
    """A group at low entropy repeats its program word for word: each distinct (program, tests) runs once
    in the sandbox, and every copy gets the verdict it would get alone, in order."""
    ran = []

    class Counting:
        def map(self, jobs, workers=None):
            ran.extend(jobs)
            return sandbox.map(jobs, workers)

    right, wrong = "def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"
    pairs = [(right, ADD), (wrong, ADD), (right, ADD), (right, {"tests": ["assert add(2, 2) == 5"]}), (wrong, ADD)]
    verdicts = CodeVerifier(sandbox=Counting()).verify_batch(pairs)
    assert [v.correct for v in verdicts] == [True, False, True, False, False]
    assert len(ran) == 3  # right and wrong under ADD, right under the other test
    alone = [CodeVerifier(sandbox=sandbox).verify(*pair) for pair in pairs]
    outcome = lambda v: (v.reason, [(t["passed"], t["error"]) for t in v.details["tests"]])  # noqa: E731 (not seconds)
    assert [outcome(v) for v in verdicts] == [outcome(v) for v in alone]
    verdicts[0].details["tests"][0]["passed"] = "changed"  # copies, not one shared result
    assert verdicts[2].details["tests"][0]["passed"] is True
