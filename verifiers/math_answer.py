"""The `math` verifier: the final answer of a response, compared by value with a reference.

    v = verifiers.get("math")
    v.verify("... so the answer is $\\boxed{\\dfrac{3}{4}}$.", "0.75")   # Verdict(correct=True, ...)

The stages, one module each:
  math_extract    the answer in the response (last \\boxed{}, "answer:", ####, last expression)
  math_normalise  one canonical notation (\\dfrac, \\left, \\$, units, %, degrees, 1{,}000, letters)
  math_numbers    exact rationals for plain arithmetic, without sympy
  math_judge      the fast in-process decision, else the sympy comparison
  math_parse      answer string -> sympy value or structure (set, tuple, interval, matrix, equation)
  math_equiv      equality of values (exact, symbolic, numeric within the precision written)
  math_worker     persistent killable worker processes that enforce the time bound

Time bound: extraction, normalisation and the fast path are bounded by construction and run in the
caller; anything needing sympy runs in a worker process that is killed at `timeout_s`, which gives a
verdict whose reason starts with "timeout". The in-process stages take microseconds on ordinary
responses and well under a second on a million characters, so no input makes `verify` raise or run
much past the bound.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from functools import lru_cache

from verifiers.base import Verdict, Verifier, register
from verifiers.math_extract import extract_answer
from verifiers.math_judge import judge_fast, judge_with_sympy
from verifiers.math_normalise import Answer, normalise
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
_SHOWN_CHARS = 60


@lru_cache(maxsize=8192)
def _normalise_reference(reference: str) -> Answer:
    return normalise(reference)


def _short(s: str) -> str:
    return s if len(s) <= _SHOWN_CHARS else s[: _SHOWN_CHARS - 3] + "..."


def _verdict(correct: bool, extracted: str, reference: str, detail: str) -> Verdict:
    if correct:
        reason = f"equal: {_short(extracted)} == {_short(reference)} ({detail})"
    else:
        reason = f"not equal: extracted {_short(extracted)}, expected {_short(reference)} ({detail})"
    return Verdict(correct, 1.0 if correct else 0.0, reason, extracted, {"detail": detail})


@register("math")
class MathVerifier(Verifier):
    """Final-answer verifier for math: extraction, normalisation, then comparison by value."""

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
        """Verdicts in input order: fast-path pairs in this process, the rest spread over the workers."""
        pairs = list(pairs)
        verdicts: list[Verdict | None] = [None] * len(pairs)
        slow: list[tuple[int, str, Answer, Answer]] = []
        for i, (response, reference) in enumerate(pairs):
            try:
                verdict, prepared = self._prepare(response, reference)
            except Exception as exc:  # noqa: BLE001  a bug here must cost one reward, not a training run
                verdict = Verdict(False, 0.0, f"not equal: could not read the answer ({type(exc).__name__})", None)
            if verdict is not None:
                verdicts[i] = verdict
            else:
                slow.append((i, *prepared))
        if slow:
            jobs = [(answer, ref) for _, _, answer, ref in slow]
            parallel = workers or _cores()
            try:
                outcomes = self._pool().map(jobs, self.timeout_s, parallel)
            except OSError as exc:  # no process could be started (a process limit): say so in each verdict
                outcomes = [("error", f"no worker process: {exc}")] * len(jobs)
            for (i, extracted, _, ref), (status, result) in zip(slow, outcomes):
                reference = str(pairs[i][1])
                if status == "ok":
                    verdicts[i] = _verdict(result[0], extracted, reference, result[1])
                elif status == "timeout":
                    verdicts[i] = Verdict(False, 0.0, f"timeout after {self.timeout_s}s", extracted, {"detail": "timeout"})
                else:
                    verdicts[i] = Verdict(False, 0.0, f"not equal: comparison failed ({result})", extracted,
                                          {"detail": "error"})
        return verdicts  # type: ignore[return-value]

    def _prepare(self, response, reference) -> tuple[Verdict | None, tuple]:
        """The verdict if the fast path decides, else what the sympy path needs."""
        if not isinstance(reference, str):
            reference = str(reference)
        extracted = extract_answer(response) if isinstance(response, str) else None
        if extracted is None:
            return Verdict(False, 0.0, "no answer found", None), ()
        if len(extracted) > _MAX_ANSWER_CHARS:
            return Verdict(False, 0.0, f"not equal: extracted answer of {len(extracted)} characters", extracted[:200]), ()
        answer, ref = normalise(extracted), _normalise_reference(reference)
        decided = judge_fast(answer, ref)
        if decided is not None:
            return _verdict(decided[0], extracted, reference, decided[1]), ()
        return None, (extracted, answer, ref)

    def _pool(self) -> WorkerPool:
        _warm_up()  # workers are forked from this process: it must hold warm parsers first
        with _POOL_LOCK:
            pool = MathVerifier._pools.get(os.getpid())
            if pool is None:
                pool = MathVerifier._pools[os.getpid()] = WorkerPool(judge_with_sympy, self.max_workers)
        return pool


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
