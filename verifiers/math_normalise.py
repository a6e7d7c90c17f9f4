"""Rewriting an answer string into one canonical notation before any comparison.

Models and datasets write the same value many ways (`\\dfrac{1}{2}`, `\\left(1,2\\right)`, `\\$1{,}200`,
`90^\\circ`, `5\\text{ cm}`). Folding these into one notation here lets the cheap string comparison
decide most pairs, and keeps the parsers downstream free of presentation details. What the folding
throws away that can change the value (a percent sign, a degree sign) is kept as a flag, so that the
comparison can try both readings instead of silently dropping one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from verifiers.math_extract import matching_brace

# Commands that only change how something looks.
_LAYOUT = re.compile(
    r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg)(?![A-Za-z])|\\displaystyle|\\textstyle"
)
# A row break `\\\\` is matched first so that its second backslash is never read as the space `\\ `.
_SPACES = re.compile(r"(\\\\)|\\[,:;! ]|\\q?quad(?![A-Za-z])|~|\\hspace\*?\{[^{}]*\}|\\mathord")
# Unicode that models write for LaTeX: the minus sign (U+2212) above all, which looks like "-".
_UNICODE = str.maketrans({"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u22c5": "\\cdot ",
                          "\u00b7": "\\cdot ", "\u00f7": "/", "\u03c0": "\\pi ", "\u221e": "\\infty ",
                          "\u221a": "\\sqrt", "\u2264": "\\le ", "\u2265": "\\ge ", "\u2260": "\\ne ",
                          "\u00a0": " ", "\u2009": " ", "\u202f": " "})
_APPROX = re.compile(r"\\approx|≈|\\sim(?![A-Za-z])")
_EMPTY_SET = re.compile(r"\\(?:emptyset|varnothing)(?![A-Za-z])|∅")
_FRAC_VARIANTS = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_TEXT_COMMANDS = re.compile(r"\\(?:text|textbf|textit|textrm|mbox|mathrm|mathbf|mathit|operatorname|mathsf|textnormal)\s*\{")
_CURRENCY = re.compile(r"\\\$|\$|US\$|€|£|¥|₹|\\euro|\\pounds|\b(?:USD|dollars?|euros?|cents?)\b")
# No pattern here starts with `\s*`: searched from every position of a long run of spaces, that
# would cost quadratic time; the spaces left behind are collapsed afterwards.
_PERCENT = re.compile(r"\\%|%|\bpercent\b|\\text\{\s*percent\s*\}")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree|\bdegrees?\b")
_THOUSANDS_BRACED = re.compile(r"(?<=\d)\{,\}(?=\d{3})")
_THOUSANDS_SPACED = re.compile(r"(?<=\d),\s*\\!\s*(?=\d{3})|(?<=\d)\\,(?=\d{3}(?!\d))")
_THOUSANDS_PLAIN = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_THOUSANDS_SPACE = re.compile(r"-?\d{1,3}(?: \d{3})+(?:\.\d+)?")  # "1 000 000", as SI and many languages write it
_CHOICE = re.compile(r"\(?\s*([A-E])\s*\)?[.:]?")
_MEMBERSHIP = re.compile(r"^[A-Za-z]\s*\\in\s*")
# Unit words after a number or a closing brace ("5 apples", "\frac{1}{2} cm^2"). Words must be
# separated by spaces so the pattern cannot backtrack exponentially on a long run of letters.
_UNIT_WORDS = re.compile(r"(?<=[\d}.])\s*[A-Za-z]{2,}(?:\.?\s+[A-Za-z]{2,})*\.?\s*(?:\^\s*\{?\s*[23]\s*\}?)?$")
_PLAIN_NUMBER_THEN_WORDS = re.compile(r"(-?[\d.]+(?:/\d+)?)\s+([A-Za-z]{2,}(?:\s+[A-Za-z]{2,})*)\s*(?:\^\{?[23]\}?)?")
# Words that are mathematics, not units: "2 pi" is 2*pi, never 2 of a unit called "pi".
_MATH_WORDS = {"pi", "sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "oo", "inf", "infty",
               "infinity", "and", "or", "mod", "abs", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh"}
_WORD_ANSWER = re.compile(r"[A-Za-z]{2,}(?:[ -][A-Za-z]+)*")


@dataclass(frozen=True)
class Answer:
    """An answer in canonical notation, with what normalising had to set aside."""

    text: str  # canonical LaTeX-ish string, single spaces
    percent: bool = False  # a % sign was removed: 25% may mean 25 or 0.25
    degrees: bool = False  # a degree sign was removed: 90 degrees may be compared with pi/2
    is_text: bool = False  # a word answer ("Evelyn", "even"), compared case-insensitively
    choice: str | None = None  # a multiple-choice letter, "C" for `(C)`, `\text{(C)}`, `C`

    @property
    def key(self) -> str:
        """What two answers must share to be equal by string: the text without any spaces."""
        return self.text.replace(" ", "").lower() if self.is_text else self.text.replace(" ", "")


def unwrap_text_commands(s: str) -> tuple[str, bool]:
    """Replace `\\text{...}`-like commands by their content; also say whether one wrapped everything.

    Braces are matched by hand because the content may itself hold braces (`\\text{cm}^{2}` does
    not, but `\\mathrm{\\frac{1}{2}}` does).
    """
    whole = False
    for _ in range(50):  # a bound, not a loop we expect to need: each pass removes one command
        m = _TEXT_COMMANDS.search(s)
        if not m:
            break
        close = matching_brace(s, m.end() - 1)
        if close < 0:
            break
        i = close + 1
        inner = s[m.end() : close]
        if m.start() == 0 and i == len(s):
            whole = True
        s = s[: m.start()] + inner + s[i:]
    return s, whole


def strip_thousands_separators(s: str) -> str:
    """Drop digit-group commas where the answer is one number: `1{,}000`, `1,\\!000`, `1,000`.

    A plain comma only counts as a separator when the whole answer is a single number with groups
    of three, since `1,2` and `(1,000, 2)` are lists, not numbers.
    """
    s = _THOUSANDS_BRACED.sub("", s)
    s = _THOUSANDS_SPACED.sub("", s)
    if _THOUSANDS_PLAIN.fullmatch(s) or _THOUSANDS_SPACE.fullmatch(s):
        s = s.replace(",", "").replace(" ", "")
    return s


def normalise(raw: str) -> Answer:
    """The canonical form of an extracted answer or of a reference."""
    s = raw.translate(_UNICODE).strip()
    for left, right in (("$$", "$$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= 4:
            s = s[2:-2]
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$" and s.count("$") == 2:
        s = s[1:-1]
    s = s.strip().rstrip(".").strip()
    s = s[1:].strip() if s.startswith("=") else s  # "= 5", left over from a cut-off derivation
    s = _APPROX.split(s, 1)[0].strip() or s  # "\\sqrt{2} \\approx 1.414": the exact value comes first
    s = _FRAC_VARIANTS.sub(r"\\frac", s)
    s = _EMPTY_SET.sub(r"\\{\\}", s)
    s = _LAYOUT.sub("", s)
    s = _THOUSANDS_BRACED.sub("", s)
    s = _THOUSANDS_SPACED.sub("", s)
    s = _SPACES.sub(lambda m: m.group(1) or " ", s)

    choice = _choice_letter(s)
    if choice:
        return Answer(choice, choice=choice)

    s, whole_text = unwrap_text_commands(s)
    s = _CURRENCY.sub("", s).strip()
    s, n_percent = _PERCENT.subn("", s)
    s, n_degrees = _DEGREES.subn("", s)
    s = _MEMBERSHIP.sub("", s.strip())
    s = re.sub(r"\s+", " ", s).strip().rstrip(".").strip()
    if (whole_text or _WORD_ANSWER.fullmatch(s)) and _WORD_ANSWER.fullmatch(s):
        return Answer(s, is_text=True)
    s = strip_unit_words(s)
    s = strip_thousands_separators(s)
    return Answer(s, percent=n_percent > 0, degrees=n_degrees > 0)


def strip_unit_words(s: str) -> str:
    """`5 apples` -> `5`, `864 inches^2` -> `864`, `\\frac{1}{2} cm` -> `\\frac{1}{2}`; never `2 pi` -> `2`."""
    m = _PLAIN_NUMBER_THEN_WORDS.fullmatch(s)
    if m and not _mentions_math(m.group(2)):
        return m.group(1)
    m = _UNIT_WORDS.search(s)
    if m and not _mentions_math(m.group(0)):
        return s[: m.start()].strip()
    return s


def _mentions_math(words: str) -> bool:
    return any(w.lower().rstrip(".") in _MATH_WORDS for w in re.findall(r"[A-Za-z.]+", words))


def _choice_letter(s: str) -> str | None:
    """`C`, `(C)`, `\\text{(C)}`, `\\textbf{(C)}` -> "C"; anything else -> None."""
    inner, _ = unwrap_text_commands(s.strip())
    m = _CHOICE.fullmatch(inner.strip())
    if m and (inner.strip().startswith("(") or len(inner.strip()) <= 2):
        return m.group(1)
    return None
