"""Reading a normalised answer into a value that can be compared: a sympy expression, or a structure
of them (set, tuple, interval, union, matrix, equation or inequality).

Structures are split off by hand first, at top level only, because what a bracket means is a question
of answer conventions (`(1,2]` is an interval, `(1,2)` a point or an interval, `3, 5, 7` a list of
solutions) that general LaTeX parsers answer differently from graders. Each piece is then parsed:

- the common LaTeX subset (fractions, roots, powers, pi, trig and logs) is rewritten to plain text and
  read with sympy's own parser under a token whitelist, which is the fast path (about 0.5 ms);
- any other LaTeX goes to `latex2sympy2_extended`, the maintained parser math-verify uses.

Nothing is ever passed to `eval` by this module, and every token reaching sympy's parser is checked
against a whitelist, so a response cannot name Python objects. Parsing never evaluates: expressions
are built unevaluated, checked for sizes that would make evaluation run for ever (`9^{9^{9^9}}`,
`100000!`), and only then evaluated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    rationalize,
    standard_transformations,
)

from verifiers.math_normalise import split_top_level  # sympy-free, so the caller can use it without importing sympy

# `rationalize` reads decimals as exact rationals (0.1 is 1/10), so written decimals compare exactly.
_TRANSFORMATIONS = standard_transformations + (implicit_multiplication_application, convert_xor, rationalize)
_FUNCTIONS = {
    "sqrt": sympy.sqrt, "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot,
    "sec": sympy.sec, "csc": sympy.csc, "asin": sympy.asin, "acos": sympy.acos, "atan": sympy.atan,
    "sinh": sympy.sinh, "cosh": sympy.cosh, "tanh": sympy.tanh, "log": sympy.log, "ln": sympy.log,
    "exp": sympy.exp, "Abs": sympy.Abs, "abs": sympy.Abs, "binomial": sympy.binomial,
    # unevaluated, so that check_size can refuse 10000000! before anything computes it
    "factorial": lambda n: sympy.factorial(n, evaluate=False),
    "root": lambda x, n: sympy.Pow(x, 1 / n, evaluate=False),  # unevaluated, so that math_form sees the 16 of `\sqrt[3]{16}`
    "floor": sympy.floor, "ceiling": sympy.ceiling,
    "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan,
}
_CONSTANTS = {"pi": sympy.pi, "E": sympy.E, "e": sympy.E, "I": sympy.I, "i": sympy.I, "oo": sympy.oo}
# The only names the code sympy's parser generates may use (plus the whitelisted local names).
_PARSER_GLOBALS = {name: getattr(sympy, name) for name in
                   ("Integer", "Float", "Rational", "Symbol", "Function", "Add", "Mul", "Pow", "factorial")}
_MIXED_NUMBER = re.compile(r"(?<![\w.^/*)}\\])(\d+)\s*\\frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")
_NUMBER_LITERAL = re.compile(r"(?<![\w.])(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_SAFE_CHARS = re.compile(r"[A-Za-z0-9_+\-*/^().!,\s]*")
_MAX_PARSE_CHARS = 50_000

_LATEX_SIMPLE = {
    r"\pi": " pi ", r"\infty": " oo ", r"\cdot": "*", r"\times": "*", r"\ast": "*", r"\div": "/",
    r"\ln": " ln ", r"\log": " log ", r"\exp": " exp ", r"\sin": " sin ", r"\cos": " cos ",
    r"\tan": " tan ", r"\cot": " cot ", r"\sec": " sec ", r"\csc": " csc ", r"\arcsin": " asin ",
    r"\arccos": " acos ", r"\arctan": " atan ", r"\sinh": " sinh ", r"\cosh": " cosh ", r"\tanh": " tanh ",
    r"\theta": " theta ", r"\alpha": " alpha ", r"\beta": " beta ", r"\gamma": " gamma_ ", r"\lambda": " lamda ",
    r"\mu": " mu ", r"\phi": " phi ", r"\omega": " omega ", r"\sigma": " sigma ", r"\tau": " tau ",
}
_FUNCTION_NAMES = r"\\(sin|cos|tan|cot|sec|csc|ln|log|sinh|cosh|tanh|arcsin|arccos|arctan)(?![A-Za-z])"
# A bare argument is a product, as TeX writers mean it: `\\sin 2x` is sin(2x), `\\sin x^2` sin(x^2), `\\cos \\pi x`
# cos(pi x), `\\cos 2\\theta` cos(2 theta); it ends at an operator, a bracket or a command (`2\\sin x\\cos x`).
_ARGUMENT_POWER = r"(?:\^(?:\([^()]*\)|\d+|[A-Za-z]))?"
_FUNCTION_ARGUMENT = (r"((?:(?:sqrt|root)\([^()]*\)|\\[A-Za-z]+|\d+\.?\d*|\.\d+|[A-Za-z](?![A-Za-z])|\([^()]*\))"
                      + _ARGUMENT_POWER + r"(?:[ \t]*(?:\\(?:pi|theta|alpha|beta|gamma|phi|omega|varphi|vartheta)(?![A-Za-z])|[A-Za-z](?![A-Za-z(]))" + _ARGUMENT_POWER + r")*)")
_FUNCTION_POWER = re.compile(_FUNCTION_NAMES + r"\s*\^\s*[{(]?\s*(\d+)\s*[})]?\s*" + _FUNCTION_ARGUMENT)
_FUNCTION_BARE_ARGUMENT = re.compile(_FUNCTION_NAMES + r"\s*(?![\s(])" + _FUNCTION_ARGUMENT)
_LOG_BASE = re.compile(r"\\log_\s*[{(]?\s*(\d+|e)\s*[})]?\s*" + _FUNCTION_ARGUMENT)
_INEQUALITY = re.compile(r"(\\leq?(?![A-Za-z])|\\geq?(?![A-Za-z])|<=|>=|<|>)")
_FUNCTION_NOTATION = re.compile(r"\s*[A-Za-z]\s*\(\s*[A-Za-z]\s*\)\s*")
_GREEK = {"theta", "alpha", "beta", "gamma_", "lamda", "mu", "phi", "omega", "sigma", "tau"}
_RELATIONS = (("\\leq", "<="), ("\\geq", ">="), ("\\le", "<="), ("\\ge", ">="), ("\\neq", "!="), ("\\ne", "!="),
              ("<=", "<="), (">=", ">="), ("≤", "<="), ("≥", ">="), ("=", "=="), ("<", "<"), (">", ">"))


class ParseError(ValueError):
    """The answer could not be read as mathematics: for an extracted answer, a wrong answer."""


class TooLarge(ValueError):
    """Evaluating the answer would take unbounded time or memory (a tower of powers, a huge factorial)."""


@dataclass(frozen=True)
class Items:
    """A bracketed or bare list: kind is "set" (order-free, `\\{1,2\\}`), "list" (order-free, `3, 5, 7`
    and `1 \\pm \\sqrt{2}`) or "tuple" (ordered, `(1,2,3)`); a two-element "tuple" written with
    parentheses may also be an open interval."""

    kind: str
    elements: tuple


@dataclass(frozen=True)
class IntervalValue:
    left_open: bool
    lo: object
    hi: object
    right_open: bool


@dataclass(frozen=True)
class UnionValue:
    parts: tuple


@dataclass(frozen=True)
class MatrixValue:
    rows: tuple  # tuple of tuples of values


@dataclass(frozen=True)
class Relation:
    op: str  # "==", "<", "<=", ">", ">=", "!="
    lhs: object
    rhs: object


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += (c in "([{") - (c in ")]}")
        if depth < 0:
            return False
    return depth == 0


def strip_outer_parentheses(s: str) -> str:
    """`((((1))))` -> `1`, in one linear pass; one pair is kept around a top-level comma, `((1,2))` -> `(1,2)`.

    Redundant nesting is cheap to write and expensive to parse (Python's parser, which sympy's uses,
    refuses more than 200 levels), so it is removed before any parser sees it.
    """
    n = len(s)
    if n < 2 or s[0] != "(" or s[-1] != ")":
        return s
    match, stack = {}, []
    for i, c in enumerate(s):
        if c == "(":
            stack.append(i)
        elif c == ")":
            if not stack:
                return s
            match[stack.pop()] = i
    if stack:
        return s
    depth = 0
    while depth < n // 2 and s[depth] == "(" and match.get(depth) == n - 1 - depth:
        depth += 1
    inner = s[depth : n - depth]
    if depth and len(split_top_level(inner, (",",))) > 1:
        depth -= 1
    return s[depth : n - depth].strip()


def parse_answer(s: str):
    """The value of a normalised answer string. Raises ParseError or TooLarge."""
    s = strip_outer_parentheses(s.strip())
    if not s:
        raise ParseError("empty answer")
    if len(s) > _MAX_PARSE_CHARS:
        raise TooLarge(f"answer of {len(s)} characters")

    if re.match(r"\\begin\{[vV]matrix\}", s):
        raise ParseError("a determinant (vmatrix) is a number to compute, not a matrix")
    matrix = re.fullmatch(r"\\begin\{([pbB]?matrix|array)\}(?:\{[^{}]*\})?(.*)\\end\{\1\}", s, re.DOTALL)
    if matrix:
        rows = [r for r in re.split(r"\\\\", matrix.group(2)) if r.strip()]
        return MatrixValue(tuple(tuple(parse_answer(c) for c in r.split("&")) for r in rows))

    union = split_top_level(s, ("\\cup", "∪"))
    if len(union) > 1:
        return UnionValue(tuple(parse_answer(p) for p in union))

    alternatives = split_top_level(s, (" or ", "\\lor", "\\vee"))
    if len(alternatives) > 1 and all(alternatives):
        # `x < -1 \text{ or } x > 1` and `0 < x < 9 \text{ or } 9 < x < 36` are unions of intervals;
        # `x = 1 or x = 2` a list of solutions
        values = [parse_answer(p) for p in alternatives]
        intervals = [relation_as_interval(v) if isinstance(v, Relation) else
                     v if isinstance(v, IntervalValue) and _inequality_chain(p) is not None else None
                     for p, v in zip(alternatives, values)]
        if all(intervals):
            return UnionValue(tuple(intervals))
        return Items("list", tuple(e for v in values for e in (v.elements if isinstance(v, Items) and v.kind == "list" else (v,))))

    chain = _inequality_chain(s)
    if chain is not None:
        return chain
    for symbol, op in _RELATIONS:
        parts = split_top_level(s, (symbol,))
        if len(parts) == 2 and parts[0] and parts[1]:
            if op == "==" and _FUNCTION_NOTATION.fullmatch(parts[0]):
                # `f(x) = x^2` defines f: it is compared like `y = x^2`, by its right-hand side
                return Relation(op, sympy.Symbol(parts[0].replace(" ", "")), parse_answer(parts[1]))
            return Relation(op, parse_answer(parts[0]), parse_answer(parts[1]))
        if len(parts) > 2 and op != "==":
            break  # chains like 1 < x < 3 are left to the expression parser (and usually fail)

    if s.startswith("\\{") and s.endswith("\\}"):
        inner = s[2:-2].strip()
        return Items("set", _elements(split_top_level(inner, (",", ";"))) if inner else ())

    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and _balanced(s[1:-1]):
        parts = split_top_level(s[1:-1], (",",))
        if len(parts) >= 2:
            values = tuple(parse_answer(p) for p in parts)
            if len(values) == 2 and not (s[0] == "(" and s[-1] == ")"):
                return IntervalValue(s[0] == "(", values[0], values[1], s[-1] == ")")
            if (s[0] == "(") != (s[-1] == ")"):
                raise ParseError("mismatched brackets around a list of more than two elements")
            return Items("tuple", values)

    parts = split_top_level(s, (", and ", ", or ", ",", ";", "\\text{ and }", " and ", " or "))
    if len(parts) > 1 and all(parts):
        return Items("list", _elements(parts))

    pm = split_top_level(s, ("\\pm", "±"))
    if len(pm) == 2 and pm[1]:
        first, rest = pm[1], ""
        if not pm[0].strip():  # `\\pm\\sqrt{19} + 1` is 1 \\pm \\sqrt{19}: the sign takes the next term only
            terms = _split_sum(pm[1])
            first, rest = terms[0][1], "".join(f"{sign}({term})" for sign, term in terms[1:])
        base = parse_expression(pm[0] if pm[0].strip() else rest) if (pm[0].strip() or rest) else sympy.Integer(0)
        delta = parse_expression(first)
        return Items("list", (base + delta, base - delta))

    return parse_expression(s)


def relation_as_interval(r: Relation) -> IntervalValue | None:
    """`x > 2` as (2, oo) and `x \\le 3` as (-oo, 3]: a one-variable inequality is a set of numbers."""
    r = as_less_than(r)
    if r.op not in ("<", "<="):
        return None
    strict = r.op == "<"
    if isinstance(r.lhs, sympy.Symbol) and isinstance(r.rhs, sympy.Expr) and not r.rhs.free_symbols:
        return IntervalValue(True, -sympy.oo, r.rhs, strict)
    if isinstance(r.rhs, sympy.Symbol) and isinstance(r.lhs, sympy.Expr) and not r.lhs.free_symbols:
        return IntervalValue(strict, r.lhs, sympy.oo, True)
    return None


def as_less_than(r: Relation) -> Relation:
    flipped = {">": "<", ">=": "<="}
    return Relation(flipped[r.op], r.rhs, r.lhs) if r.op in flipped else r


def _inequality_chain(s: str) -> IntervalValue | None:
    """`1 < x \\le 3` as the interval (1, 3]; `3 > x > 1` too. None if `s` is not a two-sided chain."""
    pieces = _INEQUALITY.split(s)
    if len(pieces) != 5:
        return None
    lo, op1, middle, op2, hi = (p.strip() for p in pieces)
    up = {op: op in ("<", "<=") or op.startswith("\\le") for op in (op1, op2)}
    if not re.fullmatch(r"[A-Za-z]", middle) or up[op1] != up[op2]:
        raise ParseError(f"not an interval: {s[:50]!r}")
    strict1, strict2 = op1 in ("<", ">"), op2 in ("<", ">")
    if up[op1]:
        return IntervalValue(strict1, parse_answer(lo), parse_answer(hi), strict2)
    return IntervalValue(strict2, parse_answer(hi), parse_answer(lo), strict1)


def _elements(parts: list[str]) -> tuple:
    """Parsed list elements, with `a \\pm b` contributing both of its values."""
    out = []
    for p in parts:
        value = parse_answer(p)
        out.extend(value.elements if isinstance(value, Items) and value.kind == "list" else (value,))
    return tuple(out)


@lru_cache(maxsize=4096)
def parse_expression(s: str) -> sympy.Expr:
    """A sympy expression for one LaTeX or plain-text expression, size-checked and then evaluated."""
    s = s.strip()
    if not s:
        raise ParseError("empty expression")
    if len(s) > _MAX_PARSE_CHARS:
        raise TooLarge(f"expression of {len(s)} characters")
    plain = latex_to_plain(s)
    try:
        expr = _parse_plain(plain) if plain is not None else _parse_latex(s)
    except ParseError:
        if plain is None or "\\" not in s:
            raise
        expr = _parse_latex(s)  # the rewrite missed a LaTeX idiom the full parser knows
    check_size(expr)
    return evaluate(expr)


def latex_to_plain(s: str) -> str | None:
    """Plain-text form of the LaTeX subset sympy's parser can read, or None if `s` uses more."""
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _MIXED_NUMBER.sub(_mixed_number, s)
    for _ in range(1000):  # innermost \frac / \sqrt first, so their arguments are already plain
        m = re.search(r"\\frac\s*(\{[^{}]*\}|\d)\s*(\{[^{}]*\}|\d|[A-Za-z])", s)
        if m:
            s = s[: m.start()] + f"(({_arg(m.group(1))})/({_arg(m.group(2))}))" + s[m.end() :]
            continue
        m = re.search(r"\\sqrt\s*\[([^\[\]{}]*)\]\s*(?:\{([^{}]*)\}|(\d|[A-Za-z]))", s)  # \sqrt[3]{16}, \sqrt[3]2
        if m:
            s = s[: m.start()] + f" root({m.group(2) or m.group(3)},{m.group(1)})" + s[m.end() :]  # " ": `i\\sqrt` is i times
            continue
        m = re.search(r"\\sqrt\s*(\{[^{}]*\}|\d|[A-Za-z])", s)
        if m:
            s = s[: m.start()] + f" sqrt({_arg(m.group(1))})" + s[m.end() :]
            continue
        m = re.search(r"\^\s*\{([^{}]*)\}", s)
        if m:
            s = s[: m.start()] + f"^({m.group(1)})" + s[m.end() :]
            continue
        break
    # `\sin^2 x` is (sin x)^2 and `\sin 2x` is sin(2x): LaTeX's convention, not Python's.
    s = _LOG_BASE.sub(r"log(\2, \1)", s)
    s = _FUNCTION_POWER.sub(r"(\1(\3))^(\2)", s)
    s = _FUNCTION_BARE_ARGUMENT.sub(r" \1(\2)", s)  # " ": `a\\sin x` is a times sin(x), not asin(x)
    for latex, plain in _LATEX_SIMPLE.items():
        if latex in s:
            s = re.sub(re.escape(latex) + r"(?![A-Za-z])", plain, s)
    s = s.replace("{", "(").replace("}", ")")
    if "\\" in s or "[" in s or not _SAFE_CHARS.fullmatch(s):
        return None
    s = re.sub(r"_\(?(\w+)\)?", r"_\1", s)  # a_{1} -> a_1, one symbol
    s = re.sub(r"(?<![\w.])0+(?=\d)", "", s)  # 010 is ten; Python's tokenizer refuses leading zeros
    s = re.sub(r"(?<![\w.])(\d+)\s*!", r"factorial(\1)", s) if "!" in s else s
    if "!" in s:
        return None
    return s


def _mixed_number(m: re.Match) -> str:
    """`1\\frac{4}{5}` is 1 + 4/5, as in math_numbers; a whole part times an improper fraction is kept."""
    whole, num, den = m.group(1), m.group(2) or m.group(3), m.group(4) or m.group(5)
    return f"({whole}+{num}/{den})" if int(num) < int(den) else m.group(0)


def _arg(group: str) -> str:
    return group[1:-1] if group.startswith("{") else group


def _parse_plain(s: str) -> sympy.Expr:
    """sympy's parser on whitelisted tokens only: numbers, operators and known names.

    Long sums are parsed term by term: Python's compiler, which sympy's parser goes through, nests
    `a + b + c ...` one level per term and overflows its recursion limit near a thousand terms.
    """
    terms = _split_sum(s) if len(s) > 2000 else None
    if terms and len(terms) > _SUM_CHUNK:
        chunks = ["".join(f"{sign}({t})" for sign, t in terms[k : k + _SUM_CHUNK]) for k in range(0, len(terms), _SUM_CHUNK)]
        return sympy.Add(*[_parse_plain(c) for c in chunks], evaluate=False)
    if any(abs(int(e)) > _MAX_DECIMAL_EXPONENT for e in _DECIMAL_EXPONENT.findall(s)):
        raise TooLarge("a number written with an enormous exponent (1e100000000)")
    if _nesting_depth(s) > _MAX_NESTING:
        # Python's parser, under sympy's, stops at 200 levels; LaTeX parsers slow to a crawl well before
        raise TooLarge(f"parentheses nested more than {_MAX_NESTING} deep")
    names = {}
    for name in set(_IDENTIFIER.findall(_NUMBER_LITERAL.sub(" ", s))):  # `1e3` holds no name `e3`
        if name in _FUNCTIONS:
            names[name] = _FUNCTIONS[name]
        elif name in _CONSTANTS:
            names[name] = _CONSTANTS[name]
        elif name in _GREEK or re.fullmatch(r"[A-Za-z](?:_[A-Za-z0-9]+)?", name):
            names[name] = sympy.Symbol(name)
        elif re.fullmatch(r"[A-Za-z]+", name) and len(name) <= 6:
            # `xy` or `ab`: implicit products of one-letter symbols, as in the LaTeX they came from
            names[name] = sympy.Mul(*[sympy.Symbol(c) for c in name], evaluate=False)
        else:
            raise ParseError(f"unknown name {name!r}")
    if "__" in s or "." in re.sub(r"\d\.\d*|\.\d", "", s):
        raise ParseError("unexpected token")
    try:
        expr = parse_expr(s, local_dict=names, global_dict=dict(_PARSER_GLOBALS),
                          transformations=_TRANSFORMATIONS, evaluate=False)
    except (SyntaxError, TypeError, ValueError, AttributeError, TokenError_, RecursionError) as exc:
        raise ParseError(f"cannot parse {s!r}: {type(exc).__name__}") from None
    if not isinstance(expr, sympy.Expr):
        raise ParseError(f"not an expression: {s!r}")
    return expr


_MAX_NESTING = 150
_MAX_LATEX_FALLBACK_CHARS = 300
_MAX_DECIMAL_EXPONENT = 10_000  # `rationalize` turns 1e100000000 into an exact integer: refuse first
# Both patterns start only at the beginning of a number, so a long run of digits is scanned once.
_DECIMAL_EXPONENT = re.compile(r"(?<![\w.])(?:\d+(?:\.\d*)?|\.\d+)[eE]([-+]?\d{1,12})")


def _nesting_depth(s: str) -> int:
    depth = deepest = 0
    for c in s:
        if c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
    return deepest


_SUM_CHUNK = 200  # terms per parser call: well under the compiler's nesting limit, few calls


def _split_sum(s: str) -> list[tuple[str, str]]:
    """Top-level terms of a sum as (sign, term); a sign right after an operator is unary, not a split."""
    terms, depth, start, sign = [], 0, 0, "+"
    previous = ""
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c in "+-" and depth == 0 and previous and previous not in "+-*/^(eE":
            terms.append((sign, s[start:i]))
            sign, start = c, i + 1
        if not c.isspace():
            previous = c
    terms.append((sign, s[start:]))
    return [(sg, t) for sg, t in terms if t.strip()]


try:
    from sympy.parsing.sympy_parser import TokenError as TokenError_
except ImportError:  # pragma: no cover - older sympy keeps it in tokenize
    from tokenize import TokenError as TokenError_


def _parse_latex(s: str) -> sympy.Expr:
    """Full LaTeX through latex2sympy2_extended, for what the plain-text rewrite does not cover.

    Only for short strings: its parser can take minutes on a few thousand characters of malformed
    LaTeX, and the answers that need it (absolute values, logs with bases, odd commands) are short.
    """
    if len(s) > _MAX_LATEX_FALLBACK_CHARS:
        raise ParseError(f"LaTeX outside the common subset, {len(s)} characters long")
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.latex2sympy2 import ConversionConfig
    from latex2sympy2_extended.math_normalization import NormalizationConfig

    config = NormalizationConfig(basic_latex=True, units=False, malformed_operators=False, nits=False,
                                 boxed="none", equations=False)
    # Keep the case of symbols, as the plain-text path does: `R` and `r` may be different quantities.
    conversion = ConversionConfig(interpret_as_mixed_fractions=True, interpret_simple_eq_as_assignment=False,
                                  interpret_contains_as_eq=True, lowercase_symbols=False)
    try:
        expr = latex2sympy(s, normalization_config=config, conversion_config=conversion)
    except Exception as exc:  # the parser raises bare Exceptions for malformed LaTeX
        raise ParseError(f"cannot parse LaTeX {s[:50]!r}: {type(exc).__name__}") from None
    if isinstance(expr, sympy.MatrixBase):
        return MatrixValue(tuple(tuple(expr.row(i)) for i in range(expr.rows)))
    if not isinstance(expr, sympy.Expr):
        raise ParseError(f"not an expression: {s[:50]!r}")
    expr = expr.subs(sympy.Symbol("i"), sympy.I) if sympy.Symbol("i") in expr.free_symbols else expr
    return expr


_MAX_BITS = 100_000  # about 30,000 digits: beyond this, numbers are compared by form, not value
_MAX_NODES = 50_000


def _magnitude(number, bound: float) -> float:
    """|number| (a numeric tree already checked to be of bounded size), at most `bound`."""
    try:
        return min(bound, abs(complex(number.evalf(15))))
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return bound


def check_size(expr) -> None:
    """Raise TooLarge if evaluating `expr` could build an enormous integer or take unbounded time.

    Walks the unevaluated tree bottom-up with an estimate of each numeric node's size in bits.
    """
    nodes = 0

    def bits(e) -> float:
        """Upper estimate of log2 of |e| for numeric subtrees (1 for symbols and other leaves)."""
        nonlocal nodes
        nodes += 1
        if nodes > _MAX_NODES:
            raise TooLarge("expression too large")
        if isinstance(e, sympy.Integer):
            return float(abs(int(e)).bit_length())
        if isinstance(e, sympy.Rational):
            return float(max(abs(e.p).bit_length(), e.q.bit_length()))
        if not isinstance(e, sympy.Basic) or not e.args:
            return 1.0
        arg_bits = [bits(a) for a in e.args]
        if isinstance(e, sympy.Pow):
            base_bits, exp_bits = arg_bits
            exponent = e.args[1]
            if exp_bits > 64:
                raise TooLarge("power with an enormous exponent")
            if exponent.is_number and e.args[0].is_number:
                # the exponent's value, not its size: `2^{123457/100003}` is about 2^1.2
                estimate = base_bits * max(1.0, _magnitude(exponent, 2.0 ** min(exp_bits, 64)))
                if estimate > _MAX_BITS:
                    raise TooLarge("power too large to evaluate")
                return estimate
            return base_bits
        if isinstance(e, (sympy.factorial, sympy.binomial, sympy.gamma)) or e.func.__name__ in ("factorial", "factorial2"):
            n = _magnitude(e.args[0], 2.0 ** arg_bits[0]) if e.args[0].is_number else 2.0 ** arg_bits[0]
            if n > 8192:
                raise TooLarge("factorial too large to evaluate")
            return n * math.log2(max(n, 2))
        if isinstance(e, sympy.Mul):
            return sum(arg_bits)
        return max(arg_bits) + 1

    bits(expr)


def evaluate(expr):
    """Rebuild an unevaluated, size-checked tree with evaluation on, bottom-up."""
    if isinstance(expr, sympy.Basic) and expr.args and not isinstance(expr, (sympy.Symbol, sympy.Number)):
        try:
            return expr.func(*[evaluate(a) for a in expr.args])
        except (TypeError, ValueError):
            return expr
    return expr


def leaves(value):
    """The expressions of a parsed value, whatever its structure."""
    for field in ("elements", "parts", "rows"):
        if hasattr(value, field):
            for item in getattr(value, field):
                yield from leaves(item)
            return
    if hasattr(value, "lo"):  # an interval
        yield from leaves(value.lo)
        yield from leaves(value.hi)
    elif hasattr(value, "op"):  # a relation: `x = 5 \sqrt{2}` names a number, `x` is no leaf
        for side in (value.lhs, value.rhs):
            if not getattr(side, "is_Symbol", False):
                yield from leaves(side)
    elif isinstance(value, tuple):
        for item in value:
            yield from leaves(item)
    else:
        yield value
