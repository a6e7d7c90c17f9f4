"""Deciding whether two parsed answers have the same value.

Order of tests, cheapest and most certain first: identical trees; exact rational values; the symbolic
difference expanding (or cancelling) to zero, which is a proof. Without a proof, the difference is
evaluated at 16 exact rational points chosen per pair (`sample_points`: seeded by a hash of the pair,
prime denominators between 10^5 and 10^6, both signs, several sizes), so that no answer can be written to
vanish exactly at them, as `\\sin(21000 \\pi x)` vanishes at every point with a small denominator.
There most answers evaluate to exact rationals (so `5 + 10^{-40} x` against 5 leaves exactly 10^{-40} x, which is
not zero), and where they do not, sympy's evalf is asked whether the difference at that point is zero
to 600 digits, with the accuracy it reports: a value it can bound away from zero is a difference,
however small (`\\pi + 10^{-27}` is not `\\pi`). Floor, ceiling and other step functions are accepted
only by proof, since they are constant between the points that would tell them apart
(`\\lfloor x^2/100 \\rfloor` is 0 near 0).

A decimal is the exact rational it writes: against an irrational value (`1.414` for `\\sqrt{2}`) it is a
different value, and a decimal reference (`3.21`) must be equalled exactly (`\\sqrt{10.3}` is not 3.21).
Two rationals are always compared exactly, so `0.0001` is never `0.0002` and `0.333` is not `1/3`.

Structures compare by their own rules: sets and solution lists order-free, tuples and points in order,
intervals by endpoints and openness, matrices element by element, equations up to a nonzero constant
factor and inequalities up to a positive one.
"""

from __future__ import annotations

import hashlib
import random
import re

import sympy

from verifiers.math_parse import IntervalValue, Items, MatrixValue, Relation, UnionValue, as_less_than, relation_as_interval

_DIGITS = 30
_PRECISION_BITS = 200  # asked of evalf for a difference at a point: about 60 digits
_MAX_PRECISION_BITS = 2000  # how far evalf may raise its working precision to resolve a cancellation
_SAMPLE_POINTS = 16  # points tried for an identity with no algebraic proof, chosen per pair (sample_points)
_NEEDED_POINTS = 12  # of which this many must be tested (both sides defined) and zero
_MAX_SKIPPED = 4  # points where neither side is defined; more than this and the identity is not accepted
_STEP_FUNCTIONS = (sympy.floor, sympy.ceiling, sympy.frac, sympy.sign, sympy.Mod, sympy.Heaviside, sympy.Piecewise,
                   sympy.Max, sympy.Min)


def equal_values(x, y) -> bool:
    """True if the two parsed answers are the same mathematical object."""
    if isinstance(x, Relation) != isinstance(y, Relation):
        relation, other = (x, y) if isinstance(x, Relation) else (y, x)
        as_value = _assignment_value(relation) if relation.op == "==" else relation_as_interval(relation)
        return as_value is not None and equal_values(as_value, other)
    if isinstance(x, Relation):
        return equal_relations(x, y)
    if isinstance(x, Items) and isinstance(y, Items):
        if x.kind == "tuple" and y.kind == "tuple" or {x.kind, y.kind} == {"tuple", "list"}:
            if _one_variables_solutions(x) or _one_variables_solutions(y):
                return False  # `x = -\\sqrt{3} \\text{ and } x = \\sqrt{3}` solves an equation; `(-\\sqrt{3}, \\sqrt{3})` is not that
            return _ordered(_by_name(x.elements), _by_name(y.elements))
        if "tuple" in (x.kind, y.kind):
            return False
        return _unordered(x.elements, y.elements)
    if isinstance(x, Items) or isinstance(y, Items):
        items, other = (x, y) if isinstance(x, Items) else (y, x)
        if isinstance(other, IntervalValue):
            return _pair_as_open_interval(items, other)
        if isinstance(other, MatrixValue):
            return _vector_matches(other, items)
        return items.kind != "tuple" and len(items.elements) == 1 and equal_values(items.elements[0], other)
    if isinstance(x, IntervalValue) and isinstance(y, IntervalValue):
        return (x.left_open, x.right_open) == (y.left_open, y.right_open) and equal_values(x.lo, y.lo) and equal_values(x.hi, y.hi)
    if isinstance(x, UnionValue) and isinstance(y, UnionValue):
        return _unordered(x.parts, y.parts)
    if isinstance(x, MatrixValue) and isinstance(y, MatrixValue):
        return len(x.rows) == len(y.rows) and all(_ordered(a, b) for a, b in zip(x.rows, y.rows))
    if isinstance(x, sympy.Basic) and isinstance(y, sympy.Basic):
        return equal_expressions(x, y)
    return False


def _assignment_value(r: Relation):
    """`x = 3` read as the value 3, so it can be compared with a bare answer; else None (`x = 2x + 3` is an
    equation to solve, not a value of x)."""
    if r.op == "==" and isinstance(r.lhs, sympy.Symbol) and not (isinstance(r.rhs, sympy.Basic) and r.rhs.has(r.lhs)):
        return r.rhs
    return None


def _one_variables_solutions(items: Items) -> bool:
    """A list of values of one variable (`x = 1, x = 2`): a solution set, never a point or an interval."""
    names = [str(e.lhs) for e in items.elements if isinstance(e, Relation) and _assignment_value(e) is not None]
    return items.kind == "list" and len(names) == len(items.elements) > 1 and len(set(names)) == 1


def _by_name(elements: tuple) -> tuple:
    """Assignments to distinct variables in their conventional order, where there is one: x, y, z (`y = 2, x = 3`
    is the point (3, 2), not (2, 3)) and numbered names by number (`x_2 = 10, x_{10} = 2` is (10, 2)). Other
    names have no order of their own (`(m, b)` is the question's order, not the alphabet's): written in
    alphabetical order they are read as written, else they match nothing (`b = 2, a = 3`,
    `m = \\frac{3}{2}, b = -13`). Anything else as written."""
    names = [str(e.lhs) for e in elements if isinstance(e, Relation) and _assignment_value(e) is not None]
    if len(names) != len(elements):
        return elements
    if len(set(names)) != len(names):
        return ()  # `x = 1, y = 2, x = 3` gives x two values and a third one none: no point
    if set(names) <= {"x", "y", "z"}:
        return tuple(sorted(elements, key=lambda e: str(e.lhs)))
    numbered = [re.fullmatch(r"([A-Za-z]+)_\{?(\d+)\}?", n) for n in names]
    if all(numbered) and len({m.group(1) for m in numbered}) == 1:
        return tuple(e for _, e in sorted(zip((int(m.group(2)) for m in numbered), elements), key=lambda p: p[0]))
    if names != sorted(names):
        return ()  # which of `b = 2, a = 3` comes first is the question's to say, not ours: no match
    return elements


def _ordered(xs, ys) -> bool:
    return len(xs) == len(ys) and all(equal_values(a, b) for a, b in zip(xs, ys))


def _unordered(xs, ys) -> bool:
    """Every element matched with a distinct equal element (a multiset comparison)."""
    if len(xs) != len(ys):
        return False
    unmatched = list(ys)
    for a in xs:
        for j, b in enumerate(unmatched):
            if equal_values(a, b):
                del unmatched[j]
                break
        else:
            return False
    return True


def _pair_as_open_interval(items: Items, interval: IntervalValue) -> bool:
    """`(1, 2)` is both a point and an open interval; it equals an interval only as the latter."""
    return (items.kind == "tuple" and len(items.elements) == 2 and interval.left_open and interval.right_open
            and equal_values(items.elements[0], interval.lo) and equal_values(items.elements[1], interval.hi))


def _vector_matches(matrix: MatrixValue, items: Items) -> bool:
    """A column or row vector written as a matrix equals the same entries written as a tuple."""
    if items.kind != "tuple":
        return False
    if all(len(r) == 1 for r in matrix.rows):
        return _ordered(tuple(r[0] for r in matrix.rows), items.elements)
    if len(matrix.rows) == 1:
        return _ordered(matrix.rows[0], items.elements)
    return False


def equal_relations(x: Relation, y: Relation) -> bool:
    """Equations equal up to a nonzero constant factor, inequalities up to a positive one
    (`y = 2x + 3` is `2x - y + 3 = 0`; `x > 2` is `2 < x`)."""
    x, y = as_less_than(x), as_less_than(y)
    if x.op != y.op:
        return False
    if not all(isinstance(v, sympy.Basic) for v in (x.lhs, x.rhs, y.lhs, y.rhs)):
        return False
    if x.lhs == y.lhs and isinstance(x.lhs, sympy.Symbol) and equal_expressions(x.rhs, y.rhs):
        return True
    dx, dy = sympy.expand(x.lhs - x.rhs), sympy.expand(y.lhs - y.rhs)
    if dy == 0 or dx == 0:
        return dx == dy
    ratio = sympy.cancel(dx / dy)
    if ratio.free_symbols or not ratio.is_number or ratio == 0:
        return False
    return x.op in ("==", "!=") or bool(ratio > 0)


def equal_expressions(a: sympy.Basic, b: sympy.Basic) -> bool:
    """Same value for sympy expressions: structure, exact numbers, algebra, then exact points."""
    if a == b:
        return True
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
        return False
    if a.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) or b.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
        return sympy.simplify(a - b) == 0 if not (a.is_infinite or b.is_infinite) else a == b
    if a.is_Rational and b.is_Rational:
        return False  # already unequal as exact numbers
    difference = a - b
    if difference.is_Rational:  # sympy cancelled everything but a number: `\pi + 10^{-27} - \pi`
        return difference == 0
    symbols = a.free_symbols | b.free_symbols
    if not symbols:
        return _is_zero(difference) is True
    if _proved_zero(difference):
        return True
    if difference.has(*_STEP_FUNCTIONS):
        return _simplifies_to_zero(difference)
    return _zero_at_points(difference, b, sorted(symbols, key=str))


def _proved_zero(d: sympy.Expr) -> bool:
    """Zero by expansion (polynomials) or by cancelling a common denominator (rational functions)."""
    if sympy.expand(d) == 0:
        return True
    try:
        return not d.has(sympy.Function) and sympy.cancel(sympy.together(d)) == 0
    except (sympy.PolynomialError, ValueError, TypeError):
        return False


def _simplifies_to_zero(d: sympy.Expr) -> bool:
    try:
        return sympy.simplify(d) == 0
    except (ValueError, TypeError, NotImplementedError, RecursionError):
        return False


def _is_zero(d: sympy.Expr) -> bool | None:
    """True if `d` (a number) is zero to the precision evalf can reach, False if evalf bounds it away
    from zero (its reported accuracy says so), None if it cannot tell (undefined, unevaluable).

    A zero that is only a zero to evalf's precision is not trusted when `d` holds a number beyond that
    precision (`\\sin^2 1 + \\cos^2 1 + 10^{-1000}` against 1): the tiny part could be all there is.
    """
    zero = _evalf_zero(d)
    if zero is True and not d.is_Rational and _has_extreme_number(d):
        return None
    return zero


_EXTREME_BITS = 1000  # a number below 2^-1000 or above 2^1000 (about 300 digits): beyond evalf's reach here
_MAX_NODES_SCANNED = 5000


def _has_extreme_number(d: sympy.Expr) -> bool:
    for k, node in enumerate(sympy.preorder_traversal(d)):
        if k > _MAX_NODES_SCANNED:
            return True
        if isinstance(node, sympy.Rational):
            if max(abs(node.p).bit_length(), node.q.bit_length()) > _EXTREME_BITS:
                return True
        elif isinstance(node, (sympy.Pow, sympy.exp)) and node.is_number and abs(node.args[-1]) > 1:
            bits = _magnitude_bits(node)
            if bits is None or abs(bits) > _EXTREME_BITS:
                return True
    return False


def _evalf_zero(d: sympy.Expr) -> bool | None:
    """evalf's verdict alone: zero, nonzero (known to 20 bits or more), or None if unevaluable."""
    from sympy.core.evalf import evalf as evalf_with_accuracy

    if d.is_Rational:
        return d == 0
    try:
        re_part, im_part, re_acc, im_acc = evalf_with_accuracy(d, _PRECISION_BITS, {"maxprec": _MAX_PRECISION_BITS})
    except (NotImplementedError, ValueError, TypeError, ZeroDivisionError, OverflowError, AttributeError):
        value = d.evalf(_DIGITS)
        if not value.is_number or value.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
            return None
        return abs(value) < sympy.Float(10) ** (5 - _DIGITS) if value != 0 else True
    for part, accuracy in ((re_part, re_acc), (im_part, im_acc)):
        if part and part[1] and accuracy is not None and accuracy > 20:
            return False  # a nonzero value known to at least 20 bits
    return True


def _magnitude_bits(term: sympy.Expr) -> int | None:
    """log2 of |term|, roughly, from evalf at low precision (a single term rarely cancels)."""
    from sympy.core.evalf import evalf as evalf_with_accuracy

    try:
        re_part, im_part, _, _ = evalf_with_accuracy(term, 53, {"maxprec": 200})
    except (NotImplementedError, ValueError, TypeError, ZeroDivisionError, OverflowError, AttributeError):
        return None
    sizes = [part[2] + part[3] for part in (re_part, im_part) if part and part[1]]
    return max(sizes) if sizes else None


def _zero_at_points(d: sympy.Expr, reference: sympy.Expr, symbols: list) -> bool:
    """`d` (answer minus reference) is exactly zero at every point of `sample_points`, with at most
    `_MAX_SKIPPED` points skipped and at least `_NEEDED_POINTS` tested.

    A point is skipped only where the reference itself is undefined (or too large to evaluate); where the
    reference is defined and the answer is not, the two differ. Each point is substituted unevaluated and
    size-checked first, so that `x^{x^x}` at a point is skipped rather than computed.
    """
    tested = skipped = 0
    for point in sample_points(d, reference, symbols):
        value = _value_at(d, point)
        if value is None:
            ref_value = _value_at(reference, point)
            if ref_value is not None and ref_value is not _TOO_LARGE and _is_zero(ref_value) is not None:
                return False  # the reference is defined here and the answer is not
        zero = None if value is None or value is _TOO_LARGE else _is_zero(value)
        if zero is None:
            skipped += 1
            if skipped > _MAX_SKIPPED:
                return False
            continue
        if not zero:
            return False
        tested += 1
    return tested >= _NEEDED_POINTS


_TOO_LARGE = object()


def _value_at(e: sympy.Expr, point: dict):
    """`e` evaluated exactly at `point`; None where it is undefined (a pole, a parse failure), `_TOO_LARGE`
    where the size check refuses to evaluate it."""
    from verifiers.math_parse import TooLarge, check_size, evaluate

    try:
        with sympy.evaluate(False):
            substituted = e.xreplace(point)
        check_size(substituted)
        value = evaluate(substituted)
    except (TooLarge, RecursionError, OverflowError):
        return _TOO_LARGE
    except (ValueError, TypeError, ZeroDivisionError):
        return None
    if value.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo) or value.free_symbols:
        return None  # a pole or an undefined point
    return value


def _beyond_kinks(d: sympy.Expr) -> int:
    """A size past every kink of the absolute values, maxima and minima in `d` (5 when there are none): an
    expression with one can equal a polynomial on any bounded range (`x^2 + |x-2000| + |x+2000| - 4000` is
    x^2 for |x| < 2000), so every fourth point goes beyond the range its numbers could have placed a kink in."""
    roots = any(isinstance(p, sympy.Pow) and not p.exp.is_Integer and p.base.free_symbols for p in sympy.preorder_traversal(d))
    if not roots and not d.has(sympy.Abs, sympy.Max, sympy.Min):  # `\\sqrt{(x-2000)^2}` is |x - 2000|
        return 5
    sizes = [sympy.Integer(1)]  # an unwritten coefficient
    for node in sympy.preorder_traversal(d):  # every number, `e^{20}` included, may place a kink
        if node.is_number and node != 0:
            try:
                sizes.append(sympy.Rational(abs(complex(node.evalf(15))), 1) if not node.is_Rational else abs(node))
            except (TypeError, ValueError, OverflowError, ArithmeticError):
                continue
    return int(min(10**60, 10 * max(sizes) / min(sizes) + 1000))


def sample_points(d: sympy.Expr, reference: sympy.Expr, symbols: list) -> list[dict]:
    """`_SAMPLE_POINTS` points for the variables, pseudo-random but fixed for the pair (seeded by a hash of
    the difference and the reference), so that no response can be written to vanish at them.

    Every coordinate is a rational whose denominator is a prime between 10^5 and 10^6 (so `\\sin(N \\pi x)`
    vanishes there only if that unpredictable prime divides N) and whose numerator makes it a number of
    size between about 0.01 and 5, or, at every fourth point, up to about 1000, and at another fourth beyond
    the kinks of any absolute value (`_beyond_kinks`); both signs.
    """
    seed = hashlib.sha256(f"{sympy.srepr(d)}|{sympy.srepr(reference)}".encode()).digest()
    rng = random.Random(seed)
    far = _beyond_kinks(d)
    points = []
    for k in range(_SAMPLE_POINTS):
        point = {}
        for s in symbols:
            q = sympy.prevprime(rng.randrange(10**5, 10**6))
            size = 1000 if k % 4 == 3 else far if k % 4 == 1 else 5
            p = rng.randrange(q // 100, size * q)
            if p % q == 0:
                p += 1
            point[s] = sympy.Rational(p if rng.random() < 0.5 else -p, q)
        points.append(point)
    return points
