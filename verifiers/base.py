"""The one verdict type, the verifier base class and the registry of verifiers by name.

A verifier takes a model's whole response and a task's reference and returns a `Verdict`. It never
raises on bad model output and never runs past its time bound. Plug-in verifiers come from
`@register("name")` or from installed packages through the entry-point group `reasoner.verifiers`.
"""

from __future__ import annotations

import abc
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

ENTRY_POINT_GROUP = "reasoner.verifiers"


@dataclass(frozen=True)
class Verdict:
    """What a verifier decided about one response."""

    correct: bool
    reward: float  # in [0, 1]
    reason: str  # short and human-readable: what was extracted, why it failed, "timeout", ...
    extracted: str | None = None  # the answer or program taken from the response; None if none found
    details: dict[str, Any] = field(default_factory=dict)  # verifier-specific (per-test outcomes, ...)

    @property
    def timed_out(self) -> bool:
        return self.reason.startswith("timeout")

    @property
    def no_answer(self) -> bool:
        return self.extracted is None


class Verifier(abc.ABC):
    """Base class: subclasses implement `verify`; `verify_batch` spreads the work over every core."""

    name: str = ""

    @abc.abstractmethod
    def verify(self, response: str, reference: Any) -> Verdict:
        """Judge one response against one reference. Must not raise on bad model output."""

    def verify_batch(self, pairs: Iterable[tuple[str, Any]], workers: int | None = None) -> list[Verdict]:
        """Verdicts for `(response, reference)` pairs, in input order, using every core."""
        pairs = list(pairs)
        workers = min(workers or os.cpu_count() or 1, len(pairs))
        if workers <= 1 or len(pairs) < 8:
            return [self.verify(r, ref) for r, ref in pairs]
        context = multiprocessing.get_context("fork")
        with context.Pool(workers) as pool:
            return pool.starmap(self.verify, pairs, chunksize=max(1, len(pairs) // (4 * workers)))


class FunctionVerifier(Verifier):
    """Wraps a plain callable `fn(response, reference) -> Verdict | bool | float` as a verifier."""

    def __init__(self, name: str, fn: Callable[[str, Any], Any]):
        self.name, self.fn = name, fn

    def verify(self, response: str, reference: Any) -> Verdict:
        try:
            out = self.fn(response, reference)
        except Exception as exc:  # a plug-in's bug must not kill a training run; it becomes a verdict
            return Verdict(False, 0.0, f"verifier {self.name!r} raised {type(exc).__name__}: {exc}")
        if isinstance(out, Verdict):
            return out
        reward = float(out)
        return Verdict(reward >= 1.0, min(max(reward, 0.0), 1.0), "ok" if reward >= 1.0 else "wrong")


class UnknownVerifierError(KeyError):
    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0])


_REGISTRY: dict[str, Callable[[], Verifier]] = {}
_entry_points_loaded = False


def register(name: str):
    """Decorator registering a `Verifier` subclass or a plain function under `name`."""

    def decorate(obj):
        if isinstance(obj, type) and issubclass(obj, Verifier):
            obj.name = name
            _REGISTRY[name] = obj
        elif callable(obj):
            _REGISTRY[name] = lambda: FunctionVerifier(name, obj)
        else:
            raise TypeError(f"cannot register {obj!r} as verifier {name!r}: not a Verifier class or callable")
        _instances.pop(name, None)
        return obj

    return decorate


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            register(ep.name)(ep.load())


_instances: dict[str, Verifier] = {}


def get(name: str) -> Verifier:
    """The verifier registered as `name` (one shared instance per name)."""
    if name not in _REGISTRY:
        _load_entry_points()
    if name not in _REGISTRY:
        raise UnknownVerifierError(f"unknown verifier {name!r}; registered verifiers: {', '.join(names())}")
    if name not in _instances:
        _instances[name] = _REGISTRY[name]()
    return _instances[name]


def names() -> list[str]:
    """Every registered verifier name, built-in and plug-in, sorted."""
    _load_entry_points()
    return sorted(_REGISTRY)


def verify_many(items: Sequence[tuple[str, str, Any]]) -> list[Verdict]:
    """Verdicts for `(verifier_name, response, reference)` triples, batched per verifier, in input order."""
    verdicts: list[Verdict | None] = [None] * len(items)
    by_name: dict[str, list[int]] = {}
    for i, (name, _, _) in enumerate(items):
        by_name.setdefault(name, []).append(i)
    for name, idx in by_name.items():
        for i, v in zip(idx, get(name).verify_batch([(items[i][1], items[i][2]) for i in idx])):
            verdicts[i] = v
    return verdicts  # type: ignore[return-value]
