"""The `math` verifier: the final answer of a response, compared by value with a reference.

    v = verifiers.get("math")
    v.verify("... so the answer is $\\boxed{\\dfrac{3}{4}}$.", "0.75")   # Verdict(correct=True, ...)

The stages, one module each:
  math_extract    the final answers the response commits to (boxes, "answer:", ####, last expression)
  math_normalise  one canonical notation (\\dfrac, \\left, \\$, units, %, degrees, 1{,}000, letters)
  math_units      the unit written, and whether two units are the same or convert exactly
  math_numbers    exact rationals for plain arithmetic, without sympy
  math_judge      the fast in-process decision, else the sympy comparison
  math_parse      answer string -> sympy value or structure (set, tuple, interval, matrix, equation)
  math_equiv      equality of values (exact, symbolic, numeric within the precision written)
  math_worker     persistent killable worker processes that enforce the time bound

Time bound: extraction, normalisation and the fast path are bounded by construction and run in the
caller; anything needing sympy runs in a worker process that is killed at `timeout_s`, which gives a
verdict whose reason starts with "timeout". One response's answers share that one deadline. The in-process stages take microseconds on ordinary
responses and well under a second on a million characters, so no input makes `verify` raise or run
much past the bound.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from functools import lru_cache

from verifiers.base import Verdict, Verifier, register
from verifiers.math_extract import final_answers, has_hidden
from verifiers.math_judge import ALTERNATIVE_SEPARATORS, judge_fast, judge_with_sympy, one_value
from verifiers.math_normalise import Answer, normalise, split_top_level
from verifiers.math_numbers import parse_rational
from verifiers.math_worker import WorkerPool

_POOL_LOCK = threading.Lock()
_WARM_LOCK = threading.Lock()
_WARMED: set[int] = set()  # process ids whose parsers are imported and exercised


def _fresh_locks_after_fork() -> None:
    """A process forked while another thread held a lock (the warm-up thread, say) would inherit it
    held, with no thread left to release it: the child starts with fresh ones."""
    global _POOL_LOCK, _WARM_LOCK
    _POOL_LOCK, _WARM_LOCK = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_fresh_locks_after_fork)
_MAX_ANSWER_CHARS = 50_000  # longer "answers" are not answers; refusing them keeps normalising cheap
_CALLER_CHARS = 2_000  # longer answers are normalised in a worker, under the time bound, not here
_MAX_DISTINCT_ANSWERS = 8  # more different final answers than this is hedging, whatever they are
_SHOWN_CHARS = 60


@lru_cache(maxsize=8192)
def _normalise_reference(reference: str) -> Answer:
    return normalise(reference[:_MAX_ANSWER_CHARS])


def _short(s: str) -> str:
    return s if len(s) <= _SHOWN_CHARS else s[: _SHOWN_CHARS - 3] + "..."


def _verdict(correct: bool, extracted: str, reference: str, detail: str) -> Verdict:
    if correct:
        reason = f"equal: {_short(extracted)} == {_short(reference)} ({detail})"
    else:
        reason = f"not equal: extracted {_short(extracted)}, expected {_short(reference)} ({detail})"
    return Verdict(correct, 1.0 if correct else 0.0, reason, extracted, {"detail": detail})


def _combine(answers: tuple[str, ...], decisions: list[tuple[bool, str]], reference: str) -> Verdict:
    """One verdict from each final answer's: correct only if every final answer is."""
    if len(answers) == 1:
        return _verdict(decisions[0][0], answers[0], reference, decisions[0][1])
    shown = "; ".join(_short(a) for a in answers[:4]) + ("; ..." if len(answers) > 4 else "")
    if all(correct for correct, _ in decisions):
        return _verdict(True, answers[-1], reference, f"all {len(answers)} final answers agree: {shown}")
    detail = f"hedged between {len(answers)} different final answers: {shown}"
    return Verdict(False, 0.0, f"not equal: {detail}, expected {_short(reference)}", answers[-1],
                   {"detail": detail, "answers": list(answers)})


@register("math")
class MathVerifier(Verifier):
    """Final-answer verifier for math: extraction, normalisation, then comparison by value.

    Grading policy (what a policy under RL can and cannot be rewarded for; README "The math grading
    policy" says the same):

    - **One committed answer.** The answer is what the response marks as final: `\\boxed{}` (or
      `\\fbox{}`, `\\framebox{}`, `\\colorbox{c}{}`, `\\fcolorbox{c}{c}{}`), "final answer is" / "the answer
      is" / "my (our) answer is" / "answer:" / `**Answer**:` / "Answer —" / "answer equals" / "the answer's",
      a table cell `| Final answer | 6 |`, a line "Ans: 6", "Solution: 6", "Result: 6", "Final: 6", or
      GSM8K's `####` line; only a response with none of these is judged on the expression or number it
      ends with.
      A box holding a box with anything around it (`\\boxed{6 \\boxed{5}}`) is refused as not one
      committed answer (`\\boxed{\\boxed{5}}` is 5); `\\phantom{}` content is invisible and removed.
    - **Hedging earns nothing.** Several final answers that differ (`\\boxed{2} or \\boxed{3}`, two
      "Final answer" lines, `#### 17` then `#### 18`, an unmarked ending "12, 15 or 18", "2 or 3"
      against a single-valued reference, several choice letters) give a verdict that is not correct,
      with a reason containing "hedged", unless every one of them equals the reference. After the final
      answer, a value next to it (`\\boxed{5}, 6`, `\\boxed{5} (or 6)`), one a later sentence offers ("6 is
      also possible", "might also be 6", `\\therefore 6`), one under a condition ("6 if zero counts"), or
      one on a line of its own ("> 6") or in a code block or table row is another final answer; so are
      unmarked endings listing values ("17 eggs, or 18 eggs", "17 (or possibly 18)", numbered lines).
    - **Disowned answers do not count.** "The answer is not \\boxed{5}" commits to nothing;
      "\\boxed{24} is incorrect; the correct answer is 25" and "The answer isn't 5, it's 6" commit to
      25 and 6.
    - **Self-corrections: the last word counts.** An answer followed by an explicit correction
      ("wait", "actually", "that's wrong", "on reflection", "instead", ...) and then another answer is
      withdrawn: "Final answer: 5. Wait, that's wrong; the answer is 6" is judged as 6. Justification:
      the reward then goes to one answer only, so writing the withdrawn one cannot gain anything, while
      refusing every correction would punish a policy for checking its work.
    - **Decimals for exact values.** A decimal answer equals an irrational reference only within a
      relative 1e-6 and one unit of its last written digit (3.14, 3.1416, 1.414, 0.785 are refused for pi,
      sqrt 2, pi/4, and 157079.5 for 50000 pi); against a rational
      reference it is compared exactly (0.333 is not 1/3; `0.\\overline{3}` is). A decimal *reference* is
      the exact rational it writes: an exact answer must equal it exactly, with no rounding tolerance
      (`\\sqrt{10.3}` is not 3.21, 2 pi is not 6.283; 321/100 is 3.21).
    - **Identities by algebra, then exact points.** Expressions are equal when their difference expands
      or cancels to zero, or is exactly zero at 16 rational points chosen per pair from a hash of it
      (prime denominators 10^5..10^6, so no response can vanish at them: `\\sin(21000\\pi x)` is not 0),
      at least 12 tested, at most 4 skipped, none skipped where the reference is defined and the answer
      is not (evalf's own accuracy decides when a point gives an irrational value); a difference of
      10^-40 is a difference. Floor, ceiling and
      other step functions need a proof.
    - **Units and words.** Whitelisted units and counted nouns are dropped (`5 L`, `3 m`, `9 m^2`,
      `20 km/h`, "18 eggs") when one side only carries a unit; when both do, the units must be the same
      (spellings normalised): an answer in another unit, or in degrees against radians, is refused as a
      conversion left to do (500 cm is not 5 m here). Scale words that name a number are read into it ("5
      thousand" = 5000, "5 hundredths" = 0.05); qualifying or negating words ("at most", "about", "not", "is
      wrong", "or more", "maybe") and two numbers side by side (`2 \\quad 3`) are refused. `2 1/2` is the
      mixed number 5/2. Number words ("five", "twenty-one") and "infinity" are read.
    - **Percent.** One reading per answer, so one response never matches two different values: against
      a reference written with %, the answers 25 and 25% state 25% (0.25 does not: it would also match
      0.25%); against a bare reference, x% is read as x (data sets write "what percent" answers bare),
      never also as x/100. Against a reference in cents "50 cents" and a bare 50 are 50 cents (not also 50
      dollars); against a bare (dollar) reference an answer in cents is a conversion left to do.
    - **Relations are not values.** `x \\neq 5`, `x < 5` are not `x = 5`; `x = 5` equals 5. Assignments to
      several variables are read in the order of their names (`y = 2, x = 3` is the point (3, 2)).
    - **Arithmetic left to do is not an answer.** Against a reference whose value is a rational number, the
      answer must be one number written out (an integer, decimal, fraction or ratio in lowest terms, mixed
      number, scientific notation, a power of ten, a scale word naming a number): a whitelist (math_judge),
      so that a policy cannot copy the question's expression, function or power, in any spelling, instead
      of computing it.
    """

    _pools: dict[int, WorkerPool] = {}  # one pool per process for all instances: workers are costly

    def __init__(self, timeout_s: float = 2.0, max_workers: int | None = None):
        self.timeout_s = float(timeout_s)
        self.max_workers = max_workers or max(4, _cores())
        if os.getpid() not in _WARMED:
            # Importing sympy and the LaTeX parser takes a second or two: start now, in the
            # background, so that the first pair needing them does not wait for it.
            threading.Thread(target=_warm_up, name="math-verifier-warm-up", daemon=True).start()

    def verify(self, response: str, reference) -> Verdict:
        return self.verify_batch([(response, reference)])[0]

    def verify_batch(self, pairs: Iterable[tuple[str, object]], workers: int | None = None) -> list[Verdict]:
        """Verdicts in input order: fast-path answers in this process, the rest spread over the workers."""
        pairs = list(pairs)
        verdicts: list[Verdict | None] = [None] * len(pairs)
        prepared: dict[int, tuple[tuple[str, ...], list]] = {}
        jobs: list[tuple[int, int, tuple]] = []  # (pair, answer index, worker job)
        for i, (response, reference) in enumerate(pairs):
            try:
                verdict, answers, decisions, slow = self._prepare(response, reference)
            except Exception as exc:  # noqa: BLE001  a bug here must cost one reward, not a training run
                verdict = Verdict(False, 0.0, f"not equal: could not read the answer ({type(exc).__name__})", None)
            if verdict is not None:
                verdicts[i] = verdict
                continue
            prepared[i] = (answers, decisions)
            jobs.extend((i, k, job) for k, job in slow)
        if jobs:
            try:
                # one deadline per response: its answers together get `timeout_s`, not each of them
                outcomes = self._pool().map([job for _, _, job in jobs], self.timeout_s, workers or _cores(),
                                            groups=[i for i, _, _ in jobs])
            except OSError as exc:  # no process could be started (a process limit): say so in each verdict
                outcomes = [("error", f"no worker process: {exc}")] * len(jobs)
            for (i, k, _), (status, result) in zip(jobs, outcomes):
                decisions = prepared[i][1]
                if status == "ok":
                    decisions[k] = tuple(result)
                elif status == "timeout":
                    decisions[k] = (False, "timeout")
                else:
                    decisions[k] = (False, f"comparison failed ({result})")
        for i, (answers, decisions) in prepared.items():
            reference = str(pairs[i][1])
            timed_out = [k for k, d in enumerate(decisions) if d == (False, "timeout")]
            if timed_out and all(d is not None and (d[0] or d[1] == "timeout") for d in decisions):
                verdicts[i] = Verdict(False, 0.0, f"timeout after {self.timeout_s}s", answers[timed_out[0]],
                                      {"detail": "timeout"})
            else:
                verdicts[i] = _combine(answers, decisions, reference)
        return verdicts  # type: ignore[return-value]

    def _prepare(self, response, reference) -> tuple[Verdict | None, tuple[str, ...], list, list]:
        """The verdict if the caller can decide; else the final answers, the decisions made so far
        (None where pending) and the worker jobs `(answer index, job)` still needed."""
        if not isinstance(reference, str):
            reference = str(reference)
        answers = final_answers(response) if isinstance(response, str) else ()
        if not answers:
            hidden = isinstance(response, str) and has_hidden(response)
            reason = "no visible answer found (hidden, struck-out or commented-out text is not read)" if hidden \
                else "no answer found"
            return Verdict(False, 0.0, reason, None), (), [], []
        ref = _normalise_reference(reference)
        if one_value(ref):
            answers = _alternatives_apart(answers)
        if len(answers) > _MAX_DISTINCT_ANSWERS:
            detail = f"hedged between {len(answers)} different final answers"
            return Verdict(False, 0.0, f"not equal: {detail}", answers[-1][:200], {"detail": detail}), (), [], []
        if len(answers) > 1 and _differing_numbers(answers):
            # two final answers that are different plain numbers: a hedge, whatever the reference, with
            # no comparison needed (so several slow answers beside them cost nothing)
            return _combine(answers, [(False, "not compared")] * len(answers), reference), (), [], []
        decisions: list = [None] * len(answers)
        slow = []
        for k, extracted in enumerate(answers):
            if len(extracted) > _MAX_ANSWER_CHARS:
                decisions[k] = (False, f"an answer of {len(extracted)} characters")
            elif len(extracted) > _CALLER_CHARS:
                slow.append((k, (extracted, ref)))  # normalised in the worker, under the time bound
            else:
                answer = normalise(extracted)
                decided = judge_fast(answer, ref)
                if decided is None:
                    slow.append((k, (answer, ref)))
                else:
                    decisions[k] = decided
            if decisions[k] is not None and not decisions[k][0]:
                # one wrong final answer decides the response: the others need no comparison
                return _combine(answers, [d or (True, "not compared") for d in decisions], reference), (), [], []
        if not slow:
            return _combine(answers, decisions, reference), (), [], []
        return None, answers, decisions, slow

    def _pool(self) -> WorkerPool:
        _warm_up()  # workers are forked from this process: it must hold warm parsers first
        with _POOL_LOCK:
            pool = MathVerifier._pools.get(os.getpid())
            if pool is None:
                pool = MathVerifier._pools[os.getpid()] = WorkerPool(judge_with_sympy, self.max_workers)
        return pool


def _differing_numbers(answers: tuple[str, ...]) -> bool:
    """Two of the answers are plain numbers (no unit, percent or other flag) of different value."""
    values = set()
    for extracted in answers:
        if len(extracted) > _CALLER_CHARS:
            continue
        answer = normalise(extracted)
        if answer.problem or answer.unit or answer.percent or answer.degrees or answer.cents:
            continue
        value = parse_rational(answer.text)
        if value is not None:
            values.add(value)
    return len(values) > 1


def _alternatives_apart(answers: tuple[str, ...]) -> tuple[str, ...]:
    """Against a reference that is one value, "12, 15 or 18" and `\\frac{7}{2} \\text{ or } 3.5` are several
    final answers, each judged: right only if every one equals the reference."""
    out: list[str] = []
    for extracted in answers:
        parts = []
        if len(extracted) <= _CALLER_CHARS:
            answer = normalise(extracted)
            flagged = answer.unit or answer.cents or answer.percent or answer.degrees or answer.approximately
            if not (answer.problem or answer.is_text or answer.choice or flagged):
                # a unit, cents, %, degrees or `\\approx` is set aside for the whole answer, so its parts would
                # lose it (`18 \\text{ cents or } \\$18` is no two 18s): such an answer is judged whole
                parts = split_top_level(answer.text, ALTERNATIVE_SEPARATORS)
        out.extend(parts if len(parts) > 1 and all(parts) else [extracted])
    return tuple(dict.fromkeys(out))


def _cores() -> int:
    """Cores this process may run on (a container's share, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _warm_up() -> None:
    """Import and exercise the parsers once per process before forking, so every worker starts warm.

    Idempotent and thread-safe: a caller that needs the workers waits here for a warm-up that a
    background thread has already begun.
    """
    with _WARM_LOCK:
        if os.getpid() in _WARMED:
            return
        try:
            judge_with_sympy(normalise("\\frac{\\sqrt{2}}{2} + x"), normalise("x + 1/\\sqrt{2}"))
            judge_with_sympy(normalise("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"), normalise("|x|"))
        except Exception:  # noqa: BLE001  warming is an optimisation; the workers will report real errors
            pass
        _WARMED.add(os.getpid())
