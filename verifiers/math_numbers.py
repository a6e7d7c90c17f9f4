"""Exact rational values of plain numeric answers, without sympy.

Most references (all of GSM8K, most of MATH) are numbers, fractions and decimals. Reading them as
`fractions.Fraction` decides those pairs exactly (`0.1 + 0.2` really is `3/10`, and `1e-10` is not
`2e-10`) in microseconds, in the calling process, with no worker round trip. Anything this small
grammar does not know (symbols, roots, pi) returns None and goes to the sympy path.

The grammar: numbers (`12`, `-3.5`, `.25`, `1.2e-5`), `\\frac{a}{b}` / `\\frac34`, `a/b`, `+ - * /`,
`\\cdot`, `\\times`, `^` with small integer exponents, parentheses and braces, and mixed numbers
(`1\\frac{4}{5}` is 9/5). Sizes are bounded, so no input can make the arithmetic run long.
"""

from __future__ import annotations

import re
from fractions import Fraction

_MAX_DIGITS = 400  # longer integers are left to the bounded worker
_MAX_EXPONENT = 64
_MAX_LENGTH = 200

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)|(?P<frac>\\frac)(?![A-Za-z])"
    r"|(?P<op>\\cdot|\\times|[-+*/^(){}])|(?P<other>\S))"
)


class _NotRational(Exception):
    """The string is outside this grammar (or too big for it): use the sympy path instead."""


def _tokens(s: str) -> list[str]:
    out = []
    for m in _TOKEN.finditer(s):
        if m.group("other") is not None:
            raise _NotRational
        tok = m.group("num") or m.group("frac") or m.group("op")
        if tok == "\\cdot" or tok == "\\times":
            tok = "*"
        out.append(tok)
    return out


class _Parser:
    """Recursive descent: expr := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*;
    unary := '-' unary | power; power := atom ('^' unary)?; atom := number | frac | (expr) | {expr}."""

    def __init__(self, tokens: list[str]):
        self.toks, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _NotRational
        self.i += 1
        return tok

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                value *= self.unary()
            else:
                divisor = self.unary()
                if divisor == 0:
                    raise _NotRational
                value /= divisor
        return value

    def unary(self) -> Fraction:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        if self.peek() == "+":
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() == "^":
            self.take()
            exponent = self.unary_atom()
            if exponent.denominator != 1 or abs(exponent) > _MAX_EXPONENT or (base == 0 and exponent < 0):
                raise _NotRational
            base = base ** int(exponent)
        _check_size(base)
        return base

    def unary_atom(self) -> Fraction:
        """An exponent: `^2`, `^{-3}`, `^(2)`; `2^-1` too, as people type it."""
        if self.peek() == "-":
            self.take()
            return -self.atom()
        return self.atom()

    def atom(self) -> Fraction:
        tok = self.take()
        if tok in ("(", "{"):
            value = self.expr()
            self.take(")" if tok == "(" else "}")
            return value
        if tok == "\\frac":
            num, den = self._frac_argument(), self._frac_argument()
            if den == 0:
                raise _NotRational
            return num / den
        if tok[0].isdigit() or tok[0] == ".":
            digits = len(tok.split("e")[0].split("E")[0])
            if digits > _MAX_DIGITS or ("e" in tok.lower() and abs(int(re.split("[eE]", tok)[1])) > _MAX_DIGITS):
                raise _NotRational
            value = Fraction(tok)
            return self._mixed(value) if re.fullmatch(r"\d+", tok) else value
        raise _NotRational

    def _mixed(self, whole: Fraction) -> Fraction:
        """`1\\frac{4}{5}` is the mixed number 1 4/5, as MATH writes it, not 1 times 4/5."""
        if self.peek() == "\\frac" and whole.denominator == 1 and whole >= 0:
            self.take()
            num, den = self._frac_argument(), self._frac_argument()
            if den == 0 or num.denominator != 1 or den.denominator != 1 or not 0 <= num < den:
                raise _NotRational
            return whole + num / den
        return whole

    def _frac_argument(self) -> Fraction:
        """`\\frac{12}{5}` takes braced arguments; `\\frac34` takes single digits."""
        tok = self.peek()
        if tok == "{":
            self.take()
            value = self.expr()
            self.take("}")
            return value
        if tok is not None and tok.isdigit():
            self.take()
            if len(tok) > 1:  # `\frac34` tokenised as "34": split it back into its two digits
                self.toks.insert(self.i, tok[1:])
            return Fraction(int(tok[0]))
        raise _NotRational


def _check_size(value: Fraction) -> None:
    if value.numerator.bit_length() > 3 * _MAX_DIGITS or value.denominator.bit_length() > 3 * _MAX_DIGITS:
        raise _NotRational


def parse_rational(s: str) -> Fraction | None:
    """The exact value of `s` if it is plain arithmetic on numbers, else None. Never raises."""
    if not s or len(s) > _MAX_LENGTH:
        return None
    s = re.sub(r"(?<=\d)\s*\\times\s*10\s*\^", "*10^", s)
    try:
        parser = _Parser(_tokens(s))
        value = parser.expr()
        if parser.peek() is not None:
            return None
        return value
    except (_NotRational, ValueError, ZeroDivisionError, OverflowError, IndexError, RecursionError):
        return None


def format_rational(value: Fraction) -> str:
    """`3/4`, `-2`, or the exact decimal when it is short: for human-readable reasons."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"
