"""Deciding whether two parsed answers have the same value.

Order of tests, cheapest and most certain first: identical trees; exact rational values; the symbolic
difference expanding to zero; numeric agreement at high precision (30 digits for constants; for
expressions with variables, 20 digits at random points, which decides in milliseconds what
`simplify` can take minutes over). A decimal compared with an irrational value (`1.414` against
`\\sqrt{2}`) is accepted only within half a unit of its last written digit and only with at least
three significant digits, so a rounded guess does not pass for an exact answer; two rationals are
always compared exactly, so `0.0001` is never `0.0002` and `0.333` is not `1/3`.

Structures compare by their own rules: sets and solution lists order-free, tuples and points in order,
intervals by endpoints and openness, matrices element by element, equations up to a nonzero constant
factor and inequalities up to a positive one.
"""

from __future__ import annotations

import random
import re

import sympy

from verifiers.math_parse import IntervalValue, Items, MatrixValue, Relation, UnionValue

_DIGITS = 30
_SIG_DIGITS_FOR_APPROX = 3
_RANDOM_POINTS = 4
_PLAIN_DECIMAL = re.compile(r"-?(\d*)\.(\d+)")


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
            return _ordered(x.elements, y.elements)
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
    """`x = 3` read as the value 3, so it can be compared with a bare answer; else None."""
    if r.op == "==" and isinstance(r.lhs, sympy.Symbol):
        return r.rhs
    return None


def relation_as_interval(r: Relation) -> IntervalValue | None:
    """`x > 2` as (2, oo) and `x \\le 3` as (-oo, 3]: a one-variable inequality is a set of numbers."""
    r = _as_less_than(r)
    if r.op not in ("<", "<="):
        return None
    strict = r.op == "<"
    if isinstance(r.lhs, sympy.Symbol) and isinstance(r.rhs, sympy.Expr) and not r.rhs.free_symbols:
        return IntervalValue(True, -sympy.oo, r.rhs, strict)
    if isinstance(r.rhs, sympy.Symbol) and isinstance(r.lhs, sympy.Expr) and not r.lhs.free_symbols:
        return IntervalValue(strict, r.lhs, sympy.oo, True)
    return None


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
    x, y = _as_less_than(x), _as_less_than(y)
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


def _as_less_than(r: Relation) -> Relation:
    flipped = {">": "<", ">=": "<="}
    return Relation(flipped[r.op], r.rhs, r.lhs) if r.op in flipped else r


def equal_expressions(a: sympy.Basic, b: sympy.Basic) -> bool:
    """Same value for sympy expressions: structure, exact numbers, symbolic difference, high-precision numbers."""
    if a == b:
        return True
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
        return False
    if a.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) or b.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
        return sympy.simplify(a - b) == 0 if not (a.is_infinite or b.is_infinite) else a == b
    if a.is_Rational and b.is_Rational:
        return False  # already unequal as exact numbers
    symbols = a.free_symbols | b.free_symbols
    if not symbols:
        return _numerically_equal(a, b)
    # Unequal expressions almost always differ at the first random point: that check comes first.
    if not _equal_at_random_points(a, b, symbols):
        return False
    # Then proof by expansion where it works (polynomials), else agreement at four more points: for
    # identities expansion does not show (trigonometric, logarithmic, rational functions). `simplify`
    # would be proof too, but takes seconds to minutes on large inputs and could not change the verdict.
    return sympy.expand(a - b) == 0 or _equal_at_random_points(a, b, symbols, seed=1)


def _numerically_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Agreement to 25 of 30 significant digits, relative to the larger value (or to 1 near zero)."""
    va, vb = a.evalf(_DIGITS), b.evalf(_DIGITS)
    if not (va.is_number and vb.is_number) or va.has(sympy.nan, sympy.zoo) or vb.has(sympy.nan, sympy.zoo):
        return False
    scale = max(abs(va), abs(vb), 1)
    return bool(abs(va - vb) <= scale * sympy.Float(10) ** (5 - _DIGITS))


def _equal_at_random_points(a: sympy.Expr, b: sympy.Expr, symbols, seed: int = 0) -> bool:
    """Agreement to about 20 significant digits at a few random points of moderate size.

    Relative, not absolute: at x = 3, `x^3000` is 10^1431, and both sides carry the same rounding.
    """
    rng = random.Random(seed)
    tested = 0
    for _ in range(2 * _RANDOM_POINTS):
        point = {s: sympy.Float(rng.choice((-1, 1)) * rng.uniform(0.3, 3.0), _DIGITS) for s in symbols}
        # 30-digit Floats put in place evaluate as they combine: four times faster than evalf(subs=)
        va, vb = a.xreplace(point).evalf(_DIGITS), b.xreplace(point).evalf(_DIGITS)
        if not (va.is_number and vb.is_number) or va.has(sympy.zoo, sympy.nan) or vb.has(sympy.zoo, sympy.nan):
            continue  # hit a pole or an undefined point: this point says nothing
        scale = max(abs(va), abs(vb), 1)
        if abs(va - vb) > scale * sympy.Float(10) ** (10 - _DIGITS):
            return False
        tested += 1
        if tested == _RANDOM_POINTS:
            break
    return True


def close_to_written_precision(decimal_text: str, exact: sympy.Expr) -> bool:
    """`1.414` against `\\sqrt{2}`: equal if within half a unit of the last written digit, and only
    for decimals with enough significant digits to be a real answer rather than a rough guess."""
    m = _PLAIN_DECIMAL.fullmatch(decimal_text.strip())
    if not m or not exact.is_number or exact.is_Rational:
        return False
    significant = len((m.group(1) + m.group(2)).lstrip("0"))
    if significant < _SIG_DIGITS_FOR_APPROX:
        return False
    places = len(m.group(2))
    value = sympy.N(exact, _DIGITS)
    if not value.is_real:
        return False
    return bool(abs(value - sympy.Rational(decimal_text.strip())) <= sympy.Rational(1, 2) * sympy.Rational(10) ** -places)
