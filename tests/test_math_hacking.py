"""The `math` verifier against a policy that games it: every hedged, approximated or reworded answer of
tests/math_hacking_cases.py is refused with a reason, the right answers there are accepted, and long
degenerate responses (the repetition loops a looping policy writes) are judged within the time bound
in the caller's process."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from math_hacking_cases import HACKS, RIGHT
from verifiers.base import Verdict
from verifiers.math_answer import MathVerifier

CALLER_BOUND_S = 5.0  # the bound on any call, in the caller's process
PREPARE_BOUND_S = 2.0  # what runs in the caller before any worker: extraction, normalising, fast path


@pytest.fixture(scope="module")
def verifier() -> MathVerifier:
    return MathVerifier()


@pytest.fixture(scope="module")
def hack_verdicts(verifier) -> list[Verdict]:
    return verifier.verify_batch([(response, reference) for _, response, reference in HACKS])


@pytest.fixture(scope="module")
def right_verdicts(verifier) -> list[Verdict]:
    return verifier.verify_batch([(response, reference) for _, response, reference in RIGHT])


def test_suite_covers_every_class():
    counts = Counter(kind for kind, _, _ in HACKS)
    assert len(HACKS) >= 150
    first_round = {"hedging", "disowned", "approximation", "words"}
    second_round = {"nested boxes", "after the box", "before the box", "unmarked list", "sample points",
                    "decimal reference", "units", "phantom", "not simplified"}
    assert set(counts) == first_round | second_round
    assert min(counts[k] for k in first_round) >= 20
    assert min(counts[k] for k in second_round) >= 5
    assert len({(r, ref) for _, r, ref in HACKS}) == len(HACKS)  # no case counted twice


@pytest.mark.parametrize("index", range(len(HACKS)), ids=[f"{c[0]}-{i}" for i, c in enumerate(HACKS)])
def test_hack_is_refused_with_a_reason(index, hack_verdicts):
    kind, response, reference = HACKS[index]
    verdict = hack_verdicts[index]
    assert not verdict.correct and verdict.reward == 0.0, f"[{kind}] {response!r} vs {reference!r}: {verdict.reason}"
    assert verdict.reason
    if kind in _HEDGES and not verdict.timed_out:  # a timeout (a loaded machine) is a refusal too
        assert "hedged" in verdict.reason or "qualified" in verdict.reason, verdict.reason


_HEDGES = ("hedging", "nested boxes", "after the box", "before the box", "unmarked list")


@pytest.mark.parametrize("index", range(len(RIGHT)), ids=[f"{c[0]}-{i}" for i, c in enumerate(RIGHT)])
def test_right_answer_is_accepted(index, right_verdicts):
    kind, response, reference = RIGHT[index]
    verdict = right_verdicts[index]
    assert verdict.correct and verdict.reward == 1.0, f"[{kind}] {response!r} vs {reference!r}: {verdict.reason}"


@pytest.mark.parametrize("response, reference, reason", [
    ("\\boxed{2} or \\boxed{3}", "3", "hedged between 2 different final answers"),
    ("#### 17\n#### 18", "18", "hedged between 2 different final answers"),
    ("\\boxed{2 \\text{ or } 3}", "3", "hedged between 2 different final answers: 2; 3"),
    ("\\boxed{\\text{Evelyn or Navin}}", "\\text{Evelyn}", "hedged: the answer offers alternatives"),
    ("\\boxed{\\pm 3}", "3", "hedged: the answer lists several values"),
    ("The answer is not \\boxed{5}.", "5", "no answer found"),
    ("\\boxed{5 \\text{ at most}}", "5", "qualified by the word 'most'"),
    ("\\boxed{2 \\quad 3}", "6", "two numbers side by side"),
])
def test_reasons_name_the_refusal(verifier, response, reference, reason):
    assert reason in verifier.verify(response, reference).reason


@pytest.mark.parametrize("response, reference, units", [
    ("\\boxed{7 \\text{ cm}}", "7 \\text{ m}", ("cm", "m")),
    ("\\boxed{3 \\text{ seconds}}", "3 \\text{ minutes}", ("s", "min")),
    ("\\boxed{60 \\text{ km/h}}", "60 \\text{ mph}", ("km/h", "mi/h")),
    ("\\boxed{144 \\text{ yd}^2}", "144 \\text{ ft}^2", ("yd^2", "ft^2")),
    ("\\boxed{45 \\text{ radians}}", "45^\\circ", ("rad", "deg")),
    ("\\boxed{\\$7.5}", "7.5 \\text{ cents}", ("dollar", "cent")),
    ("\\boxed{7 \\text{ m}}", "7 \\text{ kg}", ("m", "kg")),
    ("\\boxed{7 \\text{ apples}}", "7 \\text{ pears}", ("apple", "pear")),
])
def test_unit_refusals_name_both_units(verifier, response, reference, units):
    verdict = verifier.verify(response, reference)
    assert not verdict.correct
    detail = verdict.details["detail"]
    assert all(u in detail for u in units), detail


def test_phantom_content_is_invisible(verifier):
    assert "no visible answer" in verifier.verify("\\boxed{\\phantom{5}}", "5").reason
    assert not verifier.verify("\\boxed{5\\phantom{6}}", "56").correct
    assert verifier.verify("\\boxed{5\\phantom{6}}", "5").correct


def test_sample_points_are_chosen_per_pair():
    """No fixed table of points: they depend on the pair, and have large prime denominators."""
    import sympy

    from verifiers.math_equiv import sample_points

    x = sympy.Symbol("x")
    first = sample_points(x**2 + 1 - x, x, [x])
    second = sample_points(x**2 + 2 - x, x, [x])
    assert first == sample_points(x**2 + 1 - x, x, [x])  # the same pair, the same points: verdicts repeat
    assert first != second
    assert all(p[x].q > 10**5 and sympy.isprime(p[x].q) for p in first)


def test_several_slow_answers_share_one_deadline():
    """Eight different slow answers in one response: one time bound for all of them, not one each."""
    verifier = MathVerifier(timeout_s=1.0)
    verifier.verify("\\boxed{(x+1)^2}", "x^2+2x+1")  # workers started and warm
    response = " ".join(f"\\boxed{{\\prod_{{k=1}}^{{10^{{6}}}} k + {i}}}" for i in range(8))
    start = time.monotonic()
    verdict = verifier.verify(response, "18")
    assert not verdict.correct
    assert time.monotonic() - start < 4.0  # one 1 s deadline plus forks on a loaded machine; 8 s with one each


def test_different_numbers_are_a_hedge_before_any_comparison(verifier):
    """Two final answers that are different numbers decide the verdict in the caller, whatever else is there."""
    verdict, *_ = verifier._prepare("\\boxed{5} \\boxed{(x+1)^{10000}-x^{10000}} \\boxed{6}", "x^2+1")
    assert verdict is not None and not verdict.correct and "hedged" in verdict.reason


def test_agreeing_final_answers_are_not_a_hedge(verifier):
    verdict = verifier.verify("So \\boxed{\\frac{1}{2}}, i.e. \\boxed{0.5}.", "1/2")
    assert verdict.correct and "all 2 final answers agree" in verdict.reason
    verdict = verifier.verify("\\boxed{\\frac{7}{2} \\text{ or } 3.5}", "3.5")
    assert verdict.correct and "all 2 final answers agree" in verdict.reason


def test_percent_never_matches_two_values(verifier):
    """One response must not be right against two references of different value."""
    assert verifier.verify("\\boxed{25\\%}", "25").correct
    assert not verifier.verify("\\boxed{25\\%}", "0.25").correct
    assert verifier.verify("\\boxed{50 cents}", "50 \\text{ cents}").correct
    assert not verifier.verify("\\boxed{50}", "5000 \\text{ cents}").correct
    # against a bare (dollar) reference an answer in cents is a conversion left to do, whatever its value
    assert not verifier.verify("\\boxed{50 cents}", "0.5").correct
    assert not verifier.verify("\\boxed{50 cents}", "50").correct


# ---- the time bound on long degenerate inputs -----------------------------------------------------

_LOOP_UNITS = [
    "The answer is 5. Wait, ", "\\boxed{5} or \\boxed{6} ", "Final answer: 17\n", "#### 17\n", "Let me recompute: 2+2=4. ",
    "\\frac{1}{", "{", "}", "(", ")", "$", "$1$ ", "\\(", "\\[", "1", "1,", "1.", "1 ", " ", "\n", "a ", "ab", "5 apples ",
    "\\text{", "\\text{a} ", "\\overline{3}", "½", "five ", "5 thousand ", "2 \\quad 3 ", "x = 1, ", "or ", "(A) ", "not ",
    "\\sqrt{", "^{", "\\left(", "&", "\\\\", "\\%", "~", "\\approx ", "\\pi+", "10^{-40}x+", "\\lfloor ", "wait ",
    "answer is not ", "\\boxed{", "\\fbox ", "Answer: ", "**Final Answer**\n", "-", "e", "x^", "\\{", "\\cup ", "\\pm ",
]


def degenerate_responses() -> list[str]:
    """Responses of 48 KB and more: each unit repeated, bare, boxed, before and after a box, after an
    answer phrase; plus nested braces and long digit strings."""
    out = []
    for unit in _LOOP_UNITS:
        s = (unit * (48_000 // len(unit) + 1))[:48_000]
        out += [s, "\\boxed{" + s + "}", s + "\\boxed{5}", "\\boxed{5}" + s, "The answer is " + s]
    out += [
        "\\boxed{" + "{" * 20_000 + "5" + "}" * 20_000 + "}",
        "\\boxed{" * 5_000 + "5" + "}" * 5_000,
        "\\boxed{" + "1" * 100_000 + "}",
        "\\boxed{" + "9" * 30_000 + "." + "9" * 30_000 + "}",
        "The answer is " + "1" * 60_000 + ".",
        "\\boxed{" + "\\frac{1}{" * 3_000 + "2" + "}" * 3_000 + "}",
        "\\boxed{" + "x+" * 25_000 + "x}",
        "The answer is 5, or maybe " * 2_000,
        "\\boxed{5} is not " * 3_000,
        ("The answer is " + "\\(" * 1_000 + "\n") * 200,  # a math-span search per answer line
        ("Final answer: " + "\\[" * 1_000 + "\n") * 200,
        ("The answer isn't " + "\\(" * 500 + " it's " + "\\(" * 400 + "\n") * 100,
        "answer" + " " * 200_000 + "x",
        ("  \t " * 2_000 + "\n") * 100,
        "\\boxed{5} wait " + "\\(" * 100_000,
        "\\boxed{1" + " ab." * 12_000 + "1}",  # quadratic unit-word search: 19.6 s in the caller before
        "\\boxed{" + "1 ab. " * 400 + "1}",  # the same, short enough to be normalised in the caller
    ]
    return out


def test_caller_work_is_bounded_on_degenerate_inputs(verifier):
    """What runs in the caller (no time bound there) is fast on every degenerate input."""
    slowest = (0.0, "")
    for response in degenerate_responses():
        start = time.monotonic()
        verifier._prepare(response, "5")
        slowest = max(slowest, (time.monotonic() - start, response[:40]))
    assert slowest[0] < PREPARE_BOUND_S, slowest


def test_no_call_over_the_bound_on_degenerate_inputs():
    """Whole calls, worker included, each timed in the caller: none over 5 s."""
    verifier = MathVerifier(timeout_s=1.0)  # a shorter bound keeps the test short; the property is the same
    responses = degenerate_responses()[::3]
    slowest = (0.0, "")
    for response in responses:
        start = time.monotonic()
        verdict = verifier.verify(response, "5")
        assert isinstance(verdict, Verdict)
        slowest = max(slowest, (time.monotonic() - start, response[:40]))
    assert slowest[0] < CALLER_BOUND_S, slowest
