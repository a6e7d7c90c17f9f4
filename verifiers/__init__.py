"""Verifiers turn a model's response and a task's reference into a reward.

    import verifiers
    v = verifiers.get("math")
    verdict = v.verify(response, reference)   # Verdict(correct, reward, reason, extracted, details)
    v.verify_batch([(response, reference), ...])
    verifiers.names()

Add your own with `@verifiers.register("name")` on a `Verifier` subclass or a plain function, or from
another installed package through the entry-point group `reasoner.verifiers`.
"""

from verifiers.base import (
    Verdict,
    Verifier,
    UnknownVerifierError,
    get,
    names,
    register,
    verify_many,
)
from verifiers import math_answer as _math_answer  # noqa: F401  (registers "math")
from verifiers import code_tests as _code_tests  # noqa: F401  (registers "code")

__all__ = ["Verdict", "Verifier", "UnknownVerifierError", "get", "names", "register", "verify_many"]
