"""Exact answers against irrational and complex references: equal by value is not enough, the answer must
be in simplified form.

Against a rational reference an answer must be one number written out (`math_judge.arithmetic_left_to_do`).
Against a reference whose value is an irrational or complex number (`11\\sqrt2`, `\\frac{\\sqrt{3}}{3}`,
`7\\pi`, `6 - 5i`) the same hole is open wider: "Simplify $\\sqrt{242}$" is answered by copying
`\\sqrt{242}`, "Simplify $\\frac{3}{\\sqrt{27}}$" by copying the fraction, and a decimal a tool computed
passes for `\\sqrt{3}`. So an answer equal by value passes only if its own unevaluated tree is simplified:

- numbers: whole numbers, and at most one numerator and one denominator per product, with no common
  factor (`\\frac{2\\sqrt{5}}{2}`, `\\frac{6\\sqrt{3}}{4}`, `\\frac{2+2\\sqrt{5}}{4}` and `\\frac{160000}{8\\pi}`
  are refused), no fraction inside a denominator, no zero term;
  no arithmetic between numbers (`\\pi(48+15)`, `2^{3}\\sqrt{2}`) and no decimal (an approximation), unless
  the reference writes a decimal itself;
- radicals: `\\sqrt{n}`, `\\sqrt[k]{n}` or `n^{1/k}` of a whole number n > 1 with no k-th power factor and
  no lower root (`\\sqrt{12}` is `2\\sqrt{3}`, `\\sqrt[4]{25}` is `\\sqrt{5}`), never under a power, never in
  a denominator (rationalised), at most one of an index per product (`\\sqrt{3}\\sqrt{17}` is `\\sqrt{51}`),
  never times a sum (`\\sqrt{2}(\\sqrt{2}+1)`);
- i likewise: never in a denominator, under a power, twice in a product or times a sum (`i(7+2i)`);
- like terms combined: no two terms of a sum share a part (`48\\pi + 15\\pi`, `1 + 2 + \\sqrt{3}`); at most one
  sum per product, none under a power (`(2-i)(3-i)` and `(1+\\sqrt{2})^2` are to be expanded);
- pi and e at most once per product (`\\pi^2`, not `\\pi \\cdot \\pi` or `\\pi^1`); a power of e only where it
  stays one (`e^{i\\pi/2}` is i, `e^{\\frac12\\ln 242}` is `11\\sqrt{2}`); functions (`\\sin`, `\\arctan`, `\\log`,
  `\\binom`, `!`) only where they do not evaluate away (`\\sin\\frac{\\pi}{6}` is 1/2, `4\\arctan 1` is pi;
  `\\log 3` stays). sympy evaluates some calls while it builds the tree, so the function names are read
  from the text as well.

What a whitelist of this kind cannot read (LaTeX outside the parser's common subset) is refused too: a
policy must not find the spelling the check skips. The reference's own form (`same after normalisation`)
is accepted before any of this.
"""

from __future__ import annotations

import math
import re

import sympy

from verifiers.math_parse import _parse_plain, evaluate, latex_to_plain, leaves

_DECIMAL = re.compile(r"\d*\.\d")
_CONSTANTS = (sympy.pi, sympy.E)
_WORD = re.compile(r"[A-Za-z]+")
_TIMES_ONE = re.compile(r"(?:\\cdot|\\times|\*)\s*\{?1(?![\d.])|(?<![\d.])1\}?\s*(?:\\cdot|\\times|\*)")
# Function names of the plain text, and what each stays as when it does not evaluate away. sympy evaluates
# some calls while the tree is built (`atan(1)` is pi/4 at once), so the check reads the names in the text.
_FUNCTION_CLASSES = {
    "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot, "sec": sympy.sec, "csc": sympy.csc,
    "asin": sympy.asin, "acos": sympy.acos, "atan": sympy.atan, "arcsin": sympy.asin, "arccos": sympy.acos,
    "arctan": sympy.atan, "sinh": sympy.sinh, "cosh": sympy.cosh, "tanh": sympy.tanh, "log": sympy.log,
    "ln": sympy.log, "exp": sympy.exp, "Abs": sympy.Abs, "abs": sympy.Abs, "binomial": sympy.binomial,
    "factorial": sympy.factorial, "floor": sympy.floor, "ceiling": sympy.ceiling,
}


def form_problem(text: str, reference_text: str, reference_value=None) -> str | None:
    """Why `text`, one exact value equal to an irrational or complex reference (`reference_value`, parsed), is
    not simplified; None if it is."""
    if _DECIMAL.search(text) and not _DECIMAL.search(reference_text):
        return "an approximation: against an exact value, the answer must be exact"
    if _TIMES_ONE.search(text):  # `\\frac{\\pi}{2} \\cdot 1`: the parser's products are flat, so read the text
        return "not simplified: a product by 1"
    plain = latex_to_plain(text)
    if plain is None:
        return "not simplified: written in a form whose simplification cannot be checked"
    try:
        tree = _parse_plain(plain)
        value = evaluate(tree)
    except Exception:  # noqa: BLE001  sympy's parser raises many types on malformed input
        return "not simplified: written in a form whose simplification cannot be checked"
    for name in set(_WORD.findall(plain)) & set(_FUNCTION_CLASSES):  # `arctan 1`, `atan(1)`, `abs sqrt(2)`
        if not value.has(_FUNCTION_CLASSES[name]):
            return f"not simplified: {name} of these arguments has a simpler value"
    kept = {type(f) for f in value.atoms(sympy.Function)} - _functions_of(reference_value)
    if kept:  # `4\\sin\\frac{4\\pi}{9} - \\tan\\frac{4\\pi}{9}` for `-\\sqrt{3}`: sympy cannot evaluate it, a reader can
        return f"not simplified: {sorted(f.__name__ for f in kept)[0]} left to evaluate, where the value has none"
    if _logarithms(tree) > _logarithms(reference_value):  # `\\ln 6 - \\ln 2` for `\\ln 3`, `2\\ln 2 + \\ln 3` for `\\ln 12`
        return "not simplified: logarithms left to combine"
    return _problem(tree)


def _functions_of(value) -> set:
    """The function classes in a parsed reference, whatever its structure."""
    return {type(f) for leaf in leaves(value) if isinstance(leaf, sympy.Basic) for f in leaf.atoms(sympy.Function)}


def _logarithms(value) -> int:
    """How many logarithms a tree or a parsed reference writes, whatever its structure."""
    return sum(isinstance(node, sympy.log) for leaf in leaves(value) if isinstance(leaf, sympy.Basic)
               for node in sympy.preorder_traversal(leaf))


def _problem(node: sympy.Basic) -> str | None:
    if isinstance(node, (sympy.Integer, sympy.Rational)) or node in _CONSTANTS or node is sympy.I:
        return None
    if isinstance(node, sympy.Symbol):
        return None  # names are not numbers: the value comparison has decided about them
    if isinstance(node, sympy.Add):
        return _sum_problem(node)
    if isinstance(node, sympy.Mul):
        return _product_problem(node)
    if isinstance(node, sympy.Pow):
        return _power_problem(node)
    if isinstance(node, sympy.log) and isinstance(node.args[0], sympy.Integer) and node.args[0] > 1 \
            and math.gcd(*sympy.factorint(int(node.args[0])).values()) > 1:
        return "not simplified: a logarithm of a power (`\\ln 8` is `3\\ln 2`)"
    if isinstance(node, sympy.functions.elementary.trigonometric.TrigonometricFunction):
        turns = evaluate(node.args[0]) / sympy.pi  # `\\cos\\frac{20\\pi}{9}`, `\\sin 400^\\circ`: a whole turn to take off
        if turns.is_Rational and not 0 <= turns < 2:
            return "not simplified: an angle left to reduce"
    if isinstance(node, sympy.Function) or node.args:
        if _evaluates_away(node):
            return f"not simplified: {node.func.__name__} of these arguments has a simpler value"
        return next((p for p in map(_problem, node.args) if p), None)
    return None


def _terms(node: sympy.Basic) -> list[sympy.Basic]:
    return [t for arg in node.args for t in (_terms(arg) if isinstance(arg, sympy.Add) else [arg])]


def _factors(node: sympy.Basic) -> list[sympy.Basic]:
    return [f for arg in node.args for f in (_factors(arg) if isinstance(arg, sympy.Mul) else [arg])]


def _sum_problem(node: sympy.Add) -> str | None:
    seen: set = set()
    for term in _terms(node):
        problem = _problem(term)
        if problem:
            return problem
        parts = {part.as_coeff_Mul()[1] for part in sympy.Add.make_args(sympy.expand(evaluate(term)))}
        if evaluate(term) == 0:
            return "not simplified: a term that is zero"
        if parts & seen:
            return "not simplified: like terms left to combine"
        seen |= parts
    return None


def _product_problem(node: sympy.Mul) -> str | None:
    numbers, denominators, contents, counts, signs, below_kinds = [], [], [], {}, 0, set()
    for factor in _factors(node):
        if factor == -1:
            signs += 1
            continue
        problem = _problem(factor)
        if problem:
            return problem
        if isinstance(factor, sympy.Integer):
            numbers.append(abs(int(factor)))
        elif isinstance(factor, sympy.Pow) and factor.exp == -1:
            below = _factors(factor.base) if isinstance(factor.base, sympy.Mul) else [factor.base]
            denominators += [int(f) for f in below if isinstance(f, sympy.Integer)]
            below_kinds |= {_kind(f) for f in below} - {None}
        else:
            kind = _kind(factor)
            counts[kind] = counts.get(kind, 0) + 1
            if isinstance(factor, sympy.Add):
                contents.append(_content(factor))
    if signs > 1:
        return "not simplified: signs left to combine"
    if len(numbers) > 1 or len(denominators) > 1:
        return "not simplified: arithmetic between numbers left to do"
    if below_kinds & set(counts):
        return "not simplified: a factor left to cancel"  # `\\frac{\\pi^2}{\\pi}`, `\\frac{e^2}{e}`
    # `1\\pi`, `\\sqrt{2} \\cdot 1`, `\\frac{20000}{1\\pi}` (`\\frac{1}{2}\\sqrt{3}` and `\\frac{1}{\\pi}` are no such product)
    divided = any(isinstance(f, sympy.Pow) and f.exp == -1 for f in _factors(node))
    if 1 in denominators or numbers == [1] and not divided and len(_factors(node)) > 1 + signs:  # `-1` is a sign and 1
        return "not simplified: a product by 1"
    roots = sum(count for kind, count in counts.items() if isinstance(kind, tuple))
    if roots > 1 or any(count > 1 for kind, count in counts.items() if kind is not None):
        return "not simplified: a product left to multiply out"  # `\\sqrt{3}\\sqrt{17}`, `\\sqrt[3]{2}\\sqrt[6]{2}`
    if counts.get("sum") and any(isinstance(kind, tuple) or kind == "i" for kind in counts):
        return "not simplified: a product left to multiply out"  # `\sqrt{2}(\sqrt{2}+1)`, `i(7+2i)`
    if denominators and math.gcd(math.prod(numbers + contents), denominators[0]) > 1:
        return "not simplified: a fraction not in lowest terms"
    return None


def _kind(factor: sympy.Basic):
    """What a product may hold once: i, a sum, a root of each index, pi and e (with their powers)."""
    if factor is sympy.I or isinstance(factor, sympy.Add):
        return "i" if factor is sympy.I else "sum"
    if _root_index(factor):
        return ("root", _root_index(factor))
    base = factor.base if isinstance(factor, sympy.Pow) else factor
    return base if base in _CONSTANTS else None


def _content(node: sympy.Add) -> int:
    """The gcd of the whole-number coefficients of a sum's terms as written (`2 + 2\\sqrt{5}`: 2)."""
    coefficients = []
    for term in _terms(node):
        numbers = [abs(int(f)) for f in (_factors(term) if isinstance(term, sympy.Mul) else [term])
                   if isinstance(f, sympy.Integer) and f != -1]
        coefficients.append(numbers[0] if len(numbers) == 1 else 1)
    return math.gcd(*coefficients)


def _root_index(node: sympy.Basic) -> int | None:
    """k for a k-th root as written (`\\sqrt{5}`, `\\sqrt[3]{2}`, `2^{1/3}`, `2^{\\frac{1}{3}}`), else None: an
    exponent or index with arithmetic left in it (`2^{\\frac{3}{6}}`, `\\sqrt[2+1]{2}`) is no root as written."""
    if not isinstance(node, sympy.Pow):
        return None
    exp = node.exp
    if not isinstance(exp, sympy.Rational):  # `1/3` as written: 1 times 3 to the -1, or 3 to the -1
        factors = [f for f in _factors(exp) if f != 1] if isinstance(exp, sympy.Mul) else [exp]
        if len(factors) != 1 or not (isinstance(factors[0], sympy.Pow) and factors[0].exp == -1
                                     and isinstance(factors[0].base, sympy.Integer)):
            return None
        exp = evaluate(exp)
    if isinstance(exp, sympy.Rational) and exp.p == 1 and exp.q > 1:
        return int(exp.q)
    return None


def _power_problem(node: sympy.Pow) -> str | None:
    base, exp = node.base, node.exp
    index = _root_index(node)
    if index:
        if not isinstance(base, sympy.Integer) or base <= 1:
            return "not simplified: a root of something other than a whole number"
        multiplicities = sympy.factorint(int(base)).values()
        if any(m >= index for m in multiplicities) or math.gcd(index, *multiplicities) > 1:
            return f"not simplified: a root of {int(base)} has a factor to take out"  # \sqrt{12}, \sqrt[4]{25}
        return None
    if base in _CONSTANTS and exp.is_Integer and exp > 1:
        return None  # \pi^2, e^2
    if base is sympy.E:
        value = evaluate(node)
        if not (isinstance(value, sympy.exp) or (isinstance(value, sympy.Pow) and value.base is sympy.E)) \
                or exp.has(sympy.log) or exp.has(sympy.I):
            return "not simplified: a power of e with a simpler value"  # e^{i\pi/2}, e^{\frac12 \ln 242}
        return _problem(exp)
    if exp == -1:
        if any(_root_index(p) or p is sympy.I for p in sympy.preorder_traversal(base)):
            return "not simplified: a root or i left in a denominator"
        if any(isinstance(p, sympy.Pow) and p.exp.is_negative for p in sympy.preorder_traversal(base)):
            return "not simplified: a fraction inside a denominator"
        if isinstance(base, sympy.Integer):
            return None if base > 1 else "not simplified: a division by 1 or by a negative number"
        return _problem(base)
    return "not simplified: a power left to compute"


def _evaluates_away(node: sympy.Basic) -> bool:
    """Whether evaluating the function call gives something other than the same call (`\\sin\\frac{\\pi}{6}`)."""
    try:
        value = evaluate(node)
        arguments = tuple(evaluate(argument) for argument in node.args)
    except (TypeError, ValueError, ArithmeticError):
        return False
    if isinstance(node, sympy.log) and len(node.args) == 2:  # `\\log_2 3` is log(3)/log(2); `\\log_2 8` is 3
        return not value.has(sympy.log)
    # `\\cos\\frac{20\\pi}{9}` stays a cosine, of another angle: sympy reduced it while building the value
    return not (isinstance(value, sympy.Function) and value.func == node.func and value.args == arguments)
