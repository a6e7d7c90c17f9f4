"""The two halves of a comparison: a fast path that runs in the caller's process, and the sympy path
that runs in a killable worker.

The fast path decides what needs no computer algebra: identical canonical strings, multiple-choice
letters, word answers, numbers in a base (`2516_8`), and plain arithmetic on exact rationals. Its cost
is bounded by construction (short strings, linear scans, size-capped integers), so it is safe to run
without a time limit. Everything else returns None there and goes to `judge_with_sympy` in a worker,
whose time the caller bounds by killing it.

Both return `(correct, detail)`; the verifier turns them into the verdict's reason.
"""

from __future__ import annotations

import math
import re
import warnings
from functools import lru_cache

from verifiers.math_normalise import Answer, split_top_level
from verifiers.math_numbers import format_rational, parse_rational
from verifiers.math_units import conversion

_LABELLED_CHOICE = re.compile(r"\(([A-E])\)\s+\S")
# x = 5, DE = 5, x_1 = 5, (a, b) = (1, 2): a name, or a tuple of names, given a value
_ASSIGNMENT = re.compile(r"(?:[A-Za-z]{1,3}(?:_\{?\w+\}?)?|\(\s*[A-Za-z](?:\s*,\s*[A-Za-z])+\s*\))\s*=\s*(?=[^=]*$)")
# digits (at least one a decimal digit, so `a_1` stays a variable) in a base from 2 to 36
_BASE_NUMBER = re.compile(r"(?=[^_]*\d)([0-9A-Za-z]+)_\{?([2-9]|[12]\d|3[0-6])\}?")


_NUMBER = r"(?:[1-9](?:\.\d+)?[eE][-+]?\d+|\d+\.?\d*|\.\d+)"  # 1.2e-5: scientific notation's mantissa in [1, 10)
_FRACTION_PART = r"(?:\{\s*[-+]?\s*\d+\s*\}|\d)"  # \frac's argument: {12}, {-9} or one digit
_INTEGER = r"(?:\d+|\(\s*[-+]?\s*\d+\s*\))"
_SLASH = r"(?:/|:|\\over(?![A-Za-z]))"  # 3/4, the ratio 3:4, TeX's 3 \over 4
_FRACTION_FORMS = rf"(?:(?P<whole>\d+)\s*)?\\frac\s*{_FRACTION_PART}\s*{_FRACTION_PART}|{_INTEGER}\s*{_SLASH}\s*{_INTEGER}"
_FRACTION = re.compile(rf"[-+]?\s*(?:{_FRACTION_FORMS})")  # \frac{3}{4}, the mixed 2\frac12, 3/4
_FRACTION_TERMS = re.compile(rf"\\frac\s*({_FRACTION_PART})\s*({_FRACTION_PART})|({_INTEGER})\s*{_SLASH}\s*({_INTEGER})")
_LITERAL = re.compile(
    rf"[-+]?\s*(?:{_NUMBER}"  # 12, -3.5, .25, 1.2e-5
    rf"|{_FRACTION_FORMS}"
    rf"|[1-9](?:\.\d+)?\s*(?:\\times|\\cdot|\*)\s*10\^\{{?[-+]?\d+\}}?|10\^\{{?[-+]?\d+\}}?)"  # 1.2 \times 10^{5}, 10^{6}
)
_ONE_ELEMENT = re.compile(r"\\\{(.*)\\\}|\[(.*)\]")  # \{63\}, [63]: a set or list of one number


def arithmetic_left_to_do(text: str) -> bool:
    """Whether `text` leaves work to do rather than being one number written out: an integer, a decimal, a
    fraction or ratio in lowest terms or a mixed number with a proper one, scientific notation with its
    mantissa in [1, 10), a power of ten, or a set of one such number. Anything else (`2 \\cdot 52`, `2(52)`,
    `\\frac{126}{2}`, `2^{10}`, `\\binom{16}{5}`, a variable) is refused against a number: a policy could copy
    the question's expression instead of computing it, and every list of forbidden spellings missed some."""
    text = text.strip()
    while len(text) > 1 and text[0] + text[-1] in ("()", "{}") and _closes_at_end(text):
        text = text[1:-1].strip()
    if len(re.findall(r"[-−]", re.sub(r"(?:[eE]|\^\s*\{?)\s*[-−]", "", text))) > 1:
        return True  # `-\\frac{-3}{4}`, `\\frac{-3}{-4}`: signs left to combine (an exponent's own sign aside)
    if _LITERAL.fullmatch(text) is None:
        one = _ONE_ELEMENT.fullmatch(text)  # anything else leaves work: an operation in any spelling, a
        # function (`\\binom{16}{5}` copies "compute C(16, 5)"), a power, a variable, `2|52|`, `48'+15`
        return arithmetic_left_to_do(one.group(1) or one.group(2) or "") if one and "," not in text else True
    fraction = _FRACTION.fullmatch(text)
    if fraction is None:
        return False
    if fraction.group("whole") is not None and "-" in text[fraction.end("whole"):]:
        return True  # `2\\frac{-1}{2}` is no mixed number: a product left to do
    return not _in_lowest_terms(_FRACTION_TERMS.findall(text)[-1], fraction.group("whole") is not None)


def _in_lowest_terms(terms: tuple[str, ...], mixed: bool) -> bool:
    """A fraction's (numerator, denominator) in lowest terms, not over 1, and proper when it follows a whole
    number: `\\frac{126}{2}` is a division left to do, and so is a mixed number whose fraction is not proper."""
    numerator, denominator = (int(re.sub(r"\D", "", part)) for part in terms if part)
    return math.gcd(numerator, denominator) == 1 and denominator != 1 and not (mixed and numerator >= denominator)


def _arithmetic_refused(a_text: str, r_text: str) -> str | None:
    """The reason to refuse an answer that leaves arithmetic to do against a number, or against a tuple,
    list, set, interval, `\\pm` pair or matrix of numbers (each element must then be one written out), or
    None. Equations are judged by their value sides: `x = 48 + 15` against `x = 63` leaves it too, `x_1 = 63`
    and `63 = x` do not."""
    if _name_of(r_text) and _name_of(a_text) and _name_of(a_text) != _name_of(r_text):
        r_text = _named_value(r_text)  # `x(2) = 126` for `x = 63`: not the value named, an equation left to solve
    else:
        a_text, r_text = _named_value(a_text), _named_value(r_text)
    if a_text.replace(" ", "") == r_text.replace(" ", ""):
        return None  # the reference's own form
    if parse_rational(_reference_number(r_text)) is not None and arithmetic_left_to_do(a_text):
        return "arithmetic left to do: against a number, the answer must be one number written out"
    r_parts, a_parts = _elements(r_text), _elements(a_text)
    rational = all(parse_rational(_reference_number(part)) is not None for part in r_parts or [r_text])
    if rational and any(piece.strip() for piece in split_top_level(a_text, ("\\pm", "±"))[:-1]):
        return "arithmetic left to do: `a \\pm b` against numbers leaves a sum and a difference to compute"  # `5 \\pm 3`
    if r_parts and a_parts and rational and any(arithmetic_left_to_do(_named_value(part)) for part in a_parts):
        return "arithmetic left to do: against numbers, each must be one number written out"
    return None


_BRACKETS = re.compile(r"^(?:\\begin\{[pbvV]?matrix\}(.*)\\end\{[pbvV]?matrix\}|[(\[](.*)[)\]]|\\\{(.*)\\\})$", re.DOTALL)
_RELATION = re.compile(r"\\(?:leq?|geq?|lt|gt|neq?)(?![A-Za-z])|[<>]")
_INFINITY = re.compile(r"[-+]?\s*\\infty")
_ELEMENT_SEPARATORS = (",", ";", "&", "\\\\", " or ", " and ", "\\lor", "\\vee")


def _elements(text: str) -> list[str] | None:
    """The numbers of a tuple, list, set, interval or union of them, matrix, `\\pm` pair or inequality
    (`(1, 2)`, `1, -6`, `\\pm 63`, `(-\\infty, 1) \\cup (2, 3]`, `x \\ge 63`: names and infinities left out),
    or None for one value."""
    text = text.strip()
    for sign in ("\\pm", "±"):
        if text.startswith(sign):
            return [text[len(sign):].strip()]
    pieces = [piece.strip() for piece in split_top_level(text, ("\\cup",))]
    structured = len(pieces) > 1 or bool(_RELATION.search(text))
    parts = []
    for piece in pieces:
        inner = _BRACKETS.match(piece)
        structured |= inner is not None
        piece = next(g for g in inner.groups() if g is not None) if inner else piece
        parts += [bound.strip() for part in split_top_level(piece, _ELEMENT_SEPARATORS) for bound in _RELATION.split(part)]
    parts = [part for part in parts if part and not _VARIABLE.fullmatch(part) and not _INFINITY.fullmatch(part)]
    return parts if len(parts) > 1 or structured else None


def _reference_number(text: str) -> str:
    """The number a reference states, in a form `parse_rational` reads: `\\{63\\}`, `[63]`, `\\boxed{63}` and
    `x = 63` state 63, the ratio `3:4` states 3/4."""
    text = _named_value(text.strip())
    m = re.fullmatch(r"\\boxed\s*\{(.*)\}|\\\{(.*)\\\}|\[(.*)\]", text)
    if m and "," not in text:
        text = _named_value(next(g for g in m.groups() if g is not None).strip())
    return re.sub(r"^\s*(\d+)\s*:\s*(\d+)\s*$", r"\1/\2", text)


_GREEK = r"\\(?:alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|lambda|mu|nu|xi|rho|sigma|tau|phi|varphi|chi|psi|omega)"
_VARIABLE = re.compile(rf"(?:[A-Za-z]|{_GREEK})(?:_\{{?\w+\}}?)?")  # x, x_1, \theta: an inequality's variable
# x, x_1, S_{10}, P(A), f(-1), \theta, AB, m\angle A, Area: a name, never a number or an expression
# A name: letters or commands such as `\\theta`, never a function or constant that makes it a value (`\\ln(3)`).
_NAME_COMMAND = r"\\(?!(?:ln|log|lg|exp|sqrt|sinh?|cosh?|tanh?|cot|sec|csc|arc(?:sin|cos|tan)|frac|dfrac|tfrac|binom|pi)(?![A-Za-z]))[A-Za-z]+"
_NAME = re.compile(rf"(?:{_NAME_COMMAND}|[A-Za-z])(?:\s*(?:{_NAME_COMMAND}|[A-Za-z]))*(?:_\{{?[\w-]+\}}?)?(?:\([^=()]*\))?")


def _name_and_value(text: str) -> tuple[str, str] | None:
    """`x = 63`, `63 = x`, `f(-1) = 63` -> (name without spaces, value); None when `text` names no value
    (`3x + 5 = 20` is an equation left to solve)."""
    sides = [side.strip() for side in split_top_level(text, ("=",))]
    if len(sides) != 2:
        return None
    named = [_NAME.fullmatch(side) is not None for side in sides]
    if named.count(True) != 1:
        return None
    return sides[named.index(True)].replace(" ", ""), sides[named.index(False)]


def _name_of(text: str) -> str | None:
    """The name an equation gives a value (`x`, `f(-1)`), or None."""
    pair = _name_and_value(text)
    return pair[0] if pair else None


def _named_value(text: str) -> str:
    """`x = 63`, `x_1 = 63`, `63 = x`, `P(A) = \\frac{1}{2}` -> the value named; anything else as it is."""
    pair = _name_and_value(text)
    return pair[1] if pair else text


def _closes_at_end(text: str) -> bool:
    """Whether the bracket that opens `text` is closed by its last character (`(5)`, not `(1)(2)`)."""
    depth = 0
    for i, c in enumerate(text):
        depth += (c in "({") - (c in ")}")
        if depth == 0:
            return i == len(text) - 1
    return False


def judge_fast(answer: Answer, reference: Answer) -> tuple[bool, str] | None:
    """A decision without sympy, or None when the pair needs the sympy path."""
    decided = _judge_fast(answer, reference)
    if decided is None or not decided[0] or answer.approximately is None:
        return decided
    value = parse_rational(answer.text)  # `\\frac13 \\approx 0.333`: the decimal must be near the value
    if value is None:
        return None  # an irrational value: the sympy path evaluates it
    return (True, decided[1]) if _near(value, parse_rational(answer.approximately)) else (False, _FAR_APPROXIMATION)


_FAR_APPROXIMATION = "hedged: the decimal after the approximation sign is another value"


def _near(value, decimal) -> bool:
    """A decimal within 1% of the value (an approximation of it, not a second answer)."""
    return decimal is not None and abs(value - decimal) <= abs(value) / 100


def _judge_fast(answer: Answer, reference: Answer) -> tuple[bool, str] | None:
    if answer.problem:  # refused, unless the reference says the very same thing ("at least 3")
        same = answer.problem == reference.problem and answer.key == reference.key
        return (True, "same after normalisation") if same else (False, answer.problem)
    units = conversion(answer.unit, reference.unit)
    if units is not None and units.refused:
        return False, units.refused
    conversion_left = _conversion_left(answer, reference, units)
    if conversion_left:
        return False, conversion_left
    if reference.choice:
        letters = {x.upper() for x in _CHOICE_LABELS.findall(answer.text) + _BARE_CHOICES.findall(answer.text)}
        if len(letters | ({answer.choice} if answer.choice else set())) > 1:
            return False, "hedged between choices " + ", ".join(sorted(letters))
    hedge = _alternatives(answer, reference)
    if hedge:
        return False, hedge
    if answer.key and answer.key == reference.key and (answer.percent, answer.cents) == (reference.percent, reference.cents) \
            and (units is None or units.identity) and not _degrees_for_radians(answer, reference):
        return True, "same after normalisation"
    if reference.choice:
        labelled = _LABELLED_CHOICE.match(answer.text)  # "(C) 12": the option's letter and its content
        loose = re.fullmatch(r"(?:(?:option|choice)\s+)?([a-e])", _words(answer.text))  # `c`, `(c)`, `\\text{Option C}`
        letter = answer.choice or (labelled.group(1) if labelled else None) or (loose.group(1).upper() if loose else None)
        return letter == reference.choice, "choice letter"
    if reference.is_text:
        return _words(answer.text) == _words(reference.text), "text answer"
    base = _BASE_NUMBER.fullmatch(reference.key)
    if base:
        other = _BASE_NUMBER.fullmatch(answer.key)
        digits, radix = (other.group(1), other.group(2)) if other else (answer.key, base.group(2))
        return (digits.lower(), radix) == (base.group(1).lower(), base.group(2)), f"number in base {base.group(2)}"
    # `x = 18` against a bare 18 is compared by value; two equations go to the sympy path
    a_text, r_text = _value_sides(answer, reference)
    refused = _arithmetic_refused(a_text, r_text)
    if refused:
        return False, refused
    a, r = parse_rational(a_text), parse_rational(r_text)
    if a is not None and r is not None:
        return a == r, f"{format_rational(a)} {'==' if a == r else '!='} {format_rational(r)}"
    return None


_CHOICE_LABELS = re.compile(r"\(\s*([A-Ea-e])\s*\)")  # "(d)" names option D as "(D)" does
_BARE_CHOICES = re.compile(r"(?<![A-Za-z\\])([A-Ea-e])(?![A-Za-z])")
_OR = re.compile(r"\bor\b|\\lor(?![A-Za-z])|\\vee(?![A-Za-z])|\beither\b|\\mid(?![A-Za-z])", re.IGNORECASE)
_SEVERAL = re.compile(r"\bor\b|\band\b|\\cup|,|;|\\pm|±|\\lor|\\vee")
_LIST_SEPARATORS = (",", ";", " and ", "\\pm", "±")
ALTERNATIVE_SEPARATORS = (",", ";", " and ", " or ", "\\lor", "\\vee")  # what joins several final answers in one


def one_value(reference: Answer) -> bool:
    """A reference with no list, union, alternative or `\\pm` in it: one number, expression or word."""
    return not _SEVERAL.search(reference.text)


def _alternatives(answer: Answer, reference: Answer) -> str | None:
    """"2 or 3", "12, 15, 18", `x = 1 \\text{ or } x = 2`, `5 \\pm 1`: several values offered against a
    reference that is one value. (Against `x < -1 \\text{ or } x > 1` or a list of roots, "or" and
    commas join the parts of one answer.)"""
    if not one_value(reference):
        if _OR.search(answer.text) and _is_tuple(reference.text):
            return "hedged: alternatives are not an ordered tuple"
        return None
    if _OR.search(answer.text):
        return "hedged: the answer offers alternatives"
    if reference.is_text:
        return None
    if answer.text.startswith("\\{") and "," in answer.text:
        return "hedged: a set of several values for one value"
    if len(split_top_level(answer.text, _LIST_SEPARATORS)) > 1:
        return "hedged: the answer lists several values"
    return None


def _is_tuple(text: str) -> bool:
    """`(2, 3)`: one parenthesised group with a comma at its top level (a point, or an open interval)."""
    text = text.strip()
    return text.startswith("(") and _closes_at_end(text) and len(split_top_level(text[1:-1], (",",))) > 1


def _conversion_left(answer: Answer, reference: Answer, units) -> str | None:
    """The reason to refuse an answer in another unit than the reference's, or None: converting is the work
    a "convert 3.5 hours to minutes" or "150 degrees in radians" question asks for, so the question's own
    quantity must not pass for the answer (an attacker review found both). What passes is compared as it
    is written, one reading only, so that one response never matches two different values: against a
    reference written with %, `25` and `25%` state 25% (never also 0.25, which would then match both 25%
    and 0.25%); against a bare reference `25%` is 25; against a reference in cents a bare 50 is 50 cents."""
    if units is not None and not units.identity:
        return f"conversion left to do: the answer is in {answer.unit.name}, the reference in {reference.unit.name}"
    if answer.cents and not reference.cents:
        return "conversion left to do: the answer is in cents, the reference in dollars"
    if _degrees_for_radians(answer, reference):
        return "conversion left to do: the answer is in degrees, the reference in radians"
    if reference.degrees and not answer.degrees and "\\pi" in answer.text:
        return "conversion left to do: the answer is in radians, the reference in degrees"
    return None


def _degrees_for_radians(answer: Answer, reference: Answer) -> bool:
    """An answer in degrees against a reference with no unit written in terms of pi (radians)."""
    return answer.degrees and reference.unit is None and "\\pi" in reference.text


def _value_sides(answer: Answer, reference: Answer) -> tuple[str, str]:
    """The texts to compare: `x = 18` against a bare 18 is its value side; two equations stay whole."""
    a_text = answer.text if "=" in reference.text else _value_side(answer.text)
    r_text = reference.text if "=" in answer.text else _value_side(reference.text)
    return a_text, r_text


def _value_side(text: str) -> str:
    """`x = 18` -> `18`: an assignment to one variable is compared by its value (as in math_equiv). A tuple of
    names gives its values only in an order that is no choice of the answer's (math_equiv._by_name): distinct
    names in alphabetical order, as many as the values (`(a, b) = (1, 2)`; not `(y, x) = (2, 1)`, which says
    (1, 2), nor `(x, x) = (1, 2)`)."""
    m = _ASSIGNMENT.match(text)
    if not m:
        return text
    names = re.findall(r"[A-Za-z]", m.group(0)) if m.group(0).lstrip().startswith("(") else None
    value = text[m.end() :]
    name = m.group(0).split("=")[0].strip()
    if names is None and re.search(rf"(?<![A-Za-z\\]){re.escape(name)}(?![A-Za-z])", value):
        return text  # `x = 2x + 3` is an equation to solve, not a value of x
    if names is not None:
        inner = value.strip()
        values = split_top_level(inner[1:-1], (",",)) if inner[:1] in "([" and inner[-1:] in ")]" else []
        if names != sorted(set(names)) or len(values) != len(names):
            return text
    return value


def _words(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


@lru_cache(maxsize=2048)
def _parse_reference(text: str):
    """References repeat across samples of one prompt: parse each once per worker."""
    from verifiers.math_parse import parse_answer

    return parse_answer(text)


def judge_with_sympy(answer: Answer | str, reference: Answer) -> tuple[bool, str]:
    """The full comparison with sympy; may be slow, so it runs where it can be killed.

    `answer` may be the raw extracted string: answers too long to normalise safely in the caller are
    normalised (and given the fast path) here, under the worker's time bound.
    """
    if isinstance(answer, str):
        from verifiers.math_normalise import normalise

        answer = normalise(answer)
        decided = judge_fast(answer, reference)
        if decided is not None:
            return decided
    refused = _arithmetic_refused(*_value_sides(answer, reference)) or _conversion_left(
        answer, reference, conversion(answer.unit, reference.unit))
    if refused:
        return False, refused
    with warnings.catch_warnings():
        # sympy warns about odd trees that malformed answers produce; the verdict already says so
        warnings.simplefilter("ignore")
        return _judge_with_sympy(answer, reference)


def _judge_with_sympy(answer: Answer, reference: Answer) -> tuple[bool, str]:
    from verifiers.math_equiv import equal_values
    from verifiers.math_parse import TooLarge, parse_answer

    try:
        ref_value = _parse_reference(reference.text)
    except TooLarge:
        return False, "reference too large to evaluate"
    except Exception as exc:  # noqa: BLE001  parsers raise many types on malformed input
        return False, f"reference unreadable ({type(exc).__name__})"
    try:
        value = parse_answer(_value_sides(answer, reference)[0])  # `DE = \\sqrt{51}` against `\\sqrt{51}`: its value
    except TooLarge:
        return False, "too large to evaluate"
    except Exception:  # noqa: BLE001  a malformed answer is a wrong answer, whatever the parser raised
        return False, "could not parse the extracted answer"
    try:
        if not equal_values(value, ref_value):
            return False, "different values"
    except Exception as exc:  # noqa: BLE001  sympy fails on some odd trees; that is no proof of equality
        return False, f"comparison failed ({type(exc).__name__})"
    refused = _form_refused(answer, reference, value, ref_value)
    if refused:
        return False, refused
    if answer.approximately is not None and not _approximates(answer.approximately, ref_value):
        return False, _FAR_APPROXIMATION  # `\\sqrt{2} \\approx 7.5`
    return True, "equal by value"


def _approximates(decimal: str, value) -> bool:
    """Whether the decimal written after `\\approx` is within 1% of the value (a number; a structure has none)."""
    import sympy

    written = parse_rational(decimal)
    if written is None or not isinstance(value, sympy.Expr) or not value.is_number:
        return False
    try:
        number = complex(sympy.N(value, 30))
    except (TypeError, ValueError):
        return False
    return number.imag == 0 and abs(number.real - float(written)) <= abs(number.real) / 100


def _form_refused(answer: Answer, reference: Answer, value, ref_value) -> str | None:
    """Against numbers (a number, or a structure of them), the reason an answer equal to them by value
    (parsed: `value`) is not in final form, or None: each rational number written out (as the fast path
    asks, here also against references only sympy reads, `\\sqrt{3969}`), each irrational or complex one in
    simplified form (math_form)."""
    import sympy

    from verifiers.math_form import form_problem

    a_full, r_full = _value_sides(answer, reference)
    a_text, r_text = _named_value(a_full), _named_value(r_full)
    if not _numbers_only(ref_value) or a_text.replace(" ", "") == r_text.replace(" ", ""):
        return None  # the reference's own form is its final form
    if "=" in a_full and _name_of(a_full) != _name_of(r_full):  # `3x = \\pi` for `x = \\frac{\\pi}{3}`
        return "an equation left to solve: against a named value, the answer must name the same"
    for part in [a_text] if isinstance(value, sympy.Expr) else _elements(a_text) or [a_text]:
        for piece in split_top_level(_named_value(part), ("\\pm", "±")):
            if not piece.strip():
                continue
            piece_value = _parsed(piece)  # None where unreadable: left to the form check
            if not _VARIABLE.fullmatch(piece.strip()) and getattr(piece_value, "free_symbols", None):
                return "left to solve: against numbers, no variable but the one an inequality bounds"  # `2x > 2\\pi`
            if isinstance(piece_value, sympy.Expr) and piece_value.is_Rational:  # its form: `arithmetic_left_to_do`
                if arithmetic_left_to_do(piece):
                    return "arithmetic left to do: each number must be one written out"
            elif problem := form_problem(piece, reference.text, ref_value):
                return problem
    return None


def _numbers_only(value) -> bool:
    """Whether a reference's value is numbers only: a number, or a structure of them."""
    import sympy

    from verifiers.math_parse import leaves

    expressions = list(leaves(value))
    return bool(expressions) and all(isinstance(x, sympy.Expr) and not x.free_symbols for x in expressions)


def _parsed(text: str):
    """A piece's parsed value, or None if it does not parse."""
    from verifiers.math_parse import parse_answer

    try:
        return parse_answer(text)
    except Exception:  # noqa: BLE001  parsers raise many types on malformed input
        return None
