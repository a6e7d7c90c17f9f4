"""Tests for the `math` verifier: the table of hand cases, the datasets against themselves, the time
bound on pathological inputs, and the verdict conventions."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

from math_cases import all_cases, as_response
from verifiers.base import Verdict, get
from verifiers.math_answer import MathVerifier
from verifiers.math_extract import extract_answer, last_boxed
from verifiers.math_normalise import normalise
from verifiers.math_numbers import parse_rational

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CASES = all_cases()


@pytest.fixture(scope="module")
def verifier() -> MathVerifier:
    return MathVerifier()


@pytest.fixture(scope="module")
def case_verdicts(verifier) -> list[Verdict]:
    """All hand cases in one batch: the same code path as single calls, a fraction of the time."""
    return verifier.verify_batch([(as_response(cat, ans), ref) for cat, ans, ref, _ in CASES])


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_hand_case(index, case_verdicts):
    category, answer, reference, expected = CASES[index]
    verdict = case_verdicts[index]
    assert verdict.correct is expected, f"[{category}] {answer!r} vs {reference!r}: {verdict.reason}"
    assert verdict.reward == (1.0 if expected else 0.0)


def test_table_is_large_and_balanced():
    assert len(CASES) >= 300
    assert sum(1 for *_, expected in CASES if not expected) >= 100  # near-misses matter as much


def _dataset(name: str, field_of) -> list[str]:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} not found: the shared data sets are not checked out next to the repo")
    return [field_of(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def _change_digit(s: str, which: int) -> str | None:
    """`s` with its first (which=0) or last (which=-1) digit changed; a unit's exponent (`cm^2`)
    is not a digit of the answer."""
    digits = [i for i, c in enumerate(s) if c.isdigit()]
    if which == -1 and re.search(r"[a-z}]\^\{?\d\}?$", s):
        digits = digits[:-1]
    if not digits:
        return None
    i = digits[which]
    return s[:i] + str((int(s[i]) + 1) % 10) + s[i + 1 :]


@pytest.mark.parametrize(
    "name, field_of, size",
    [
        ("gsm8k_test.jsonl", lambda r: r["answer"].split("####")[-1].strip(), 1319),
        ("math500_test.jsonl", lambda r: r["answer"], 500),
    ],
    ids=["gsm8k", "math500"],
)
def test_dataset_answers_verify_against_themselves(verifier, name, field_of, size):
    answers = _dataset(name, field_of)
    assert len(answers) == size
    verdicts = verifier.verify_batch([(f"So the answer is $\\boxed{{{a}}}$.", a) for a in answers])
    wrong = [(a, v.reason) for a, v in zip(answers, verdicts) if not v.correct]
    assert not wrong, wrong[:10]

    for which in (0, -1):
        changed = [(c, a) for a in answers if (c := _change_digit(a, which)) is not None]
        assert len(changed) >= 0.9 * size
        verdicts = verifier.verify_batch([(f"\\boxed{{{c}}}", a) for c, a in changed])
        accepted = [(c, a, v.reason) for (c, a), v in zip(changed, verdicts) if v.correct]
        assert not accepted, accepted[:10]


# name: (response, reference, expected verdict, or None where only the time bound is asserted)
PATHOLOGICAL = {
    "tower of powers": ("$\\boxed{9^{9^{9^9}}}$", "9^{9^{9^8}}", False),
    "tower against a number": ("$\\boxed{9^{9^{9^9}}}$", "3", False),
    "million characters": ("Let me think. " * 71_500 + "\\boxed{5}", "5", True),
    "million characters, no box": ("7 " * 500_000, "7", True),
    "million-character box": ("\\boxed{" + "1+" * 500_000 + "1}", "3", False),
    "400-deep parentheses": ("\\boxed{" + "(" * 400 + "1" + ")" * 400 + "}", "1", True),
    "400-deep parentheses in a sum": ("\\boxed{1+" + "(" * 400 + "1" + ")" * 400 + "}", "2", None),
    "400-deep unbalanced": ("\\boxed{" + "(" * 400 + "1}", "1", False),
    "3000-term sum": ("\\boxed{" + "+".join(f"x^{{{k}}}" for k in range(3000)) + "}", "x", False),
    "3000-term numeric sum": ("\\boxed{" + "+".join(["1"] * 3000) + "}", "3000", False),  # arithmetic left to do
    "huge factorial": ("\\boxed{10^{7}!}", "1", False),
    "many unclosed boxes": ("\\boxed{(" * 20_000, "1", False),
    "deep fractions": ("\\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}", "2", None),
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_inputs_return_within_bound(verifier, name):
    response, reference, expected = PATHOLOGICAL[name]
    start = time.monotonic()
    verdict = verifier.verify(response, reference)
    assert time.monotonic() - start < 5.0
    assert isinstance(verdict, Verdict)
    # On a loaded machine a slow but valid input may use up its 2 s bound: a timeout verdict keeps the bound.
    if expected is not None and not verdict.timed_out:
        assert verdict.correct is expected, verdict.reason


def test_timeout_is_its_own_reason():
    # a long sum that no worker has parsed (and cached) before: parsing alone takes about a second
    fresh = "+".join(f"{time.time_ns() % 1000 + k}x^{{{k}}}" for k in range(3000))
    verifier = MathVerifier(timeout_s=0.2)
    verifier.verify("\\boxed{2\\sqrt{2}}", "\\sqrt{8}")  # starts the workers: once per process
    start = time.monotonic()
    verdict = verifier.verify(f"\\boxed{{{fresh}}}", "x")
    assert time.monotonic() - start < 1.0
    assert verdict.timed_out and not verdict.correct and verdict.reward == 0.0
    assert verdict.reason == "timeout after 0.2s"
    assert MathVerifier().timeout_s == 2.0
    # the killed worker is replaced: the next call that needs sympy works
    assert verifier.verify("\\boxed{2\\sqrt{3}}", "\\sqrt{12}").correct


def test_verify_from_many_threads(verifier):
    pairs = [("\\boxed{2\\sqrt3}", "\\sqrt{12}", True), ("\\boxed{x^2}", "x \\cdot x", True),
             ("\\boxed{18}", "19", False), ("\\boxed{(1,2]}", "(1,2]", True)] * 4
    results: list = [None] * len(pairs)

    def run(i):
        results[i] = verifier.verify(pairs[i][0], pairs[i][1])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert [r.correct for r in results] == [p[2] for p in pairs]


def test_registered_as_math_with_conventions():
    verifier = get("math")
    assert isinstance(verifier, MathVerifier) and verifier.timeout_s == 2.0
    good = verifier.verify("\\boxed{\\frac{3}{4}}", "0.75")
    assert (good.correct, good.reward, good.extracted) == (True, 1.0, "\\frac{3}{4}")
    assert good.reason.startswith("equal:")
    bad = verifier.verify("\\boxed{5}", "6")
    assert (bad.correct, bad.reward) == (False, 0.0) and bad.reason.startswith("not equal: extracted 5, expected 6")
    missing = verifier.verify("no idea", "6")
    assert missing.no_answer and missing.reason == "no answer found"


@pytest.mark.parametrize("response, reference", [(None, "1"), (42, "42"), ("\\boxed{1}", 1), ("\\boxed{1}", None),
                                                 (b"\\boxed{1}", "1"), ("\\boxed{1}", "")])
def test_never_raises_on_odd_types(verifier, response, reference):
    assert isinstance(verifier.verify(response, reference), Verdict)


def test_batch_keeps_input_order(verifier):
    pairs = [(f"\\boxed{{{k}}}", str(k if k % 3 else k + 1)) for k in range(50)]
    pairs += [("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"), ("\\boxed{\\sqrt{5}}", "\\sqrt{8}")]  # the sympy path
    assert [v.correct for v in verifier.verify_batch(pairs)] == [k % 3 != 0 for k in range(50)] + [True, False]


@pytest.mark.parametrize("response, expected", [
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{a} then \\fbox{b}", "b"),
    ("\\boxed{\\{1,\\{2\\}\\}}", "\\{1,\\{2\\}\\}"),
    ("The final answer is $3$. I hope", "3"),
    ("Answer: 12 apples.", "12 apples"),
    ("#### 72", "72"),
    ("we get $a = 4$ and so 9 more", "9"),
    ("nothing here", None),
])
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


def test_last_boxed_skips_unclosed():
    assert last_boxed("\\boxed{1} and \\boxed{2") == "1"


@pytest.mark.parametrize("raw, text, flags", [
    ("\\$1{,}200", "1200", {}),
    ("\\left(1,2\\right]", "(1,2]", {}),
    ("25\\%", "25", {"percent": True}),
    ("90^\\circ", "90", {"degrees": True}),
    ("\\text{(C)}", "C", {"choice": "C"}),
    ("\\text{ Evelyn }", "Evelyn", {"is_text": True}),
    ("5\\text{ cm}^2", "5", {}),
    ("x \\in [1,2]", "[1,2]", {}),
])
def test_normalise(raw, text, flags):
    answer = normalise(raw)
    assert answer.text == text
    for name, value in flags.items():
        assert getattr(answer, name) == value


@pytest.mark.parametrize("text, value", [
    ("0.1+0.2", Fraction(3, 10)), ("\\frac{3}{4}", Fraction(3, 4)), ("\\frac34", Fraction(3, 4)),
    ("1\\frac{4}{5}", Fraction(9, 5)), ("2^{-2}", Fraction(1, 4)), ("6.72\\times 10^{-5}", Fraction(672, 10**7)),
    ("x", None), ("2^{1000}", None), ("1/0", None), ("\\sqrt{4}", None),
])
def test_parse_rational(text, value):
    assert parse_rational(text) == value


_FUZZ_TOKENS = ["\\frac{", "}", "{", "(", ")", "[", "]", "^", "\\sqrt", "x", "1", "9", "0", "=", ",", "\\pi", "\\text{",
                "\\$", "%", "-", "+", "\\boxed{", "$", "\\cup", "\\pm", ".", "i", "\\infty", "\\begin{pmatrix}", "\\\\",
                "&", "\\end{pmatrix}", "!", "\\left(", "\\right)", "_", "\\{", "\\}", "<", "\\le", " ", "e", "\\sin"]


def test_random_token_soup_never_raises(verifier):
    """Malformed input of every shape gives a verdict; none raises, none runs past the bound."""
    import random

    rng = random.Random(0)
    responses = ["".join(rng.choice(_FUZZ_TOKENS) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    references = ["1", "x", "\\frac{1}{2}", "(1,2]", "\\{1,2\\}", "\\sqrt{2}"]
    pairs = [(r if k % 2 else f"\\boxed{{{r}}}", references[k % len(references)]) for k, r in enumerate(responses)]
    start = time.monotonic()
    verdicts = verifier.verify_batch(pairs)
    assert all(isinstance(v, Verdict) and v.reward in (0.0, 1.0) for v in verdicts)
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("response", [
    "}" + " " * 50_000 + "ab1",  # once quadratic: a pattern starting with `\s*` searched along the spaces
    "\\boxed{" * 8 + "x" * 1_000_000,  # eight unclosed boxes, each scanned to the end
    "\\text{" * 10_000,
    "1" + "a" * 50_000 + "1",
], ids=["run of spaces", "unclosed boxes", "text commands", "run of letters"])
def test_in_process_stages_are_fast_on_adversarial_text(verifier, response):
    """Extraction and normalisation run outside the killable worker, so they must be fast by design."""
    start = time.monotonic()
    verifier.verify(response, "1")
    verifier.verify(f"\\boxed{{{response[:40_000]}}}", "1")
    assert time.monotonic() - start < 2.0


def test_fast_path_agrees_with_sympy_path():
    """Two implementations of numeric equality (exact rationals in process, sympy in a worker) must agree."""
    from verifiers.math_judge import judge_fast, judge_with_sympy

    numeric = [(a, r) for cat, a, r, _ in CASES if cat not in ("extraction", "no answer", "pathological")
               and parse_rational(normalise(a).text) is not None and parse_rational(normalise(r).text) is not None]
    assert len(numeric) >= 60
    for answer, reference in numeric:
        a, r = normalise(answer), normalise(reference)
        fast = judge_fast(a, r)
        assert fast is not None
        assert fast[0] == judge_with_sympy(a, r)[0], (answer, reference)


def test_no_worker_process_is_a_verdict_not_an_exception(monkeypatch):
    """Where no process can be started (a process limit), pairs that need sympy get a clear verdict."""
    import verifiers.math_worker as math_worker

    def refuse():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(MathVerifier, "_pools", {})
    monkeypatch.setattr(math_worker.os, "fork", refuse)
    verifier = MathVerifier()
    fast, slow = verifier.verify_batch([("\\boxed{3/4}", "0.75"), ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}")])
    assert fast.correct
    assert not slow.correct and "no worker process" in slow.reason


def _pool_job(kind: str, x: float):
    if kind == "sleep":
        time.sleep(x)
    if kind == "raise":
        raise ValueError("boom")
    return x * 2


def test_worker_pool_bounds_each_job_and_keeps_order():
    from verifiers.math_worker import WorkerPool

    pool = WorkerPool(_pool_job, max_workers=2)
    try:
        start = time.monotonic()
        out = pool.map([("ok", 1), ("sleep", 30), ("raise", 0), ("ok", 3)], timeout_s=0.5)
        assert time.monotonic() - start < 3
        assert out == [("ok", 2), ("timeout", None), ("error", "ValueError: boom"), ("ok", 6)]
        assert pool.map([("ok", 5)], timeout_s=1.0) == [("ok", 10)]  # the killed worker was replaced
    finally:
        pool.close()


def _pid_job(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_worker_pool_spreads_a_batch_over_workers():
    from verifiers.math_worker import WorkerPool

    pool = WorkerPool(_pid_job, max_workers=4)
    try:
        out = pool.map([(0.2,)] * 4, timeout_s=5.0, parallel=4)
        assert {status for status, _ in out} == {"ok"}
        assert len({pid for _, pid in out}) == 4 and os.getpid() not in {pid for _, pid in out}
    finally:
        pool.close()


def test_many_threads_on_slow_inputs_each_return_within_the_bound():
    """More concurrent callers than workers: those left waiting still answer within their bound."""
    verifier = MathVerifier(timeout_s=0.3)
    verifier.verify("\\boxed{2\\sqrt{2}}", "\\sqrt{8}")  # starts the workers: once per process
    fresh = ["+".join(f"{t}{k}x^{{{k}}}" for k in range(3000)) for t in range(12)]  # each takes ~1 s
    durations: list = [None] * len(fresh)
    verdicts: list = [None] * len(fresh)

    def run(i):
        start = time.monotonic()
        verdicts[i] = verifier.verify(f"\\boxed{{{fresh[i]}}}", "x")
        durations[i] = time.monotonic() - start

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fresh))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert all(v.timed_out for v in verdicts)
    assert max(durations) < 0.3 + 1.2  # the bound, plus scheduling on a loaded two-core machine


def test_usable_in_a_process_forked_mid_warm_up():
    """A fork while the background warm-up holds its lock must not leave the child deadlocked."""
    import multiprocessing

    import verifiers.math_answer as math_answer

    math_answer._WARM_LOCK.acquire()  # as if the warm-up thread were busy at the moment of the fork
    try:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(1) as pool:
            result = pool.apply_async(_verify_in_child).get(timeout=30)
    finally:
        math_answer._WARM_LOCK.release()
    assert result is True


def _verify_in_child() -> bool:
    return MathVerifier().verify("\\boxed{2\\sqrt{2}}", "\\sqrt{8}").correct
