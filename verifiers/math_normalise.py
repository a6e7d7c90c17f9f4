"""Rewriting an answer string into one canonical notation before any comparison.

Models and datasets write the same value many ways (`\\dfrac{1}{2}`, `\\left(1,2\\right)`, `\\$1{,}200`,
`90^\\circ`, `5\\text{ cm}`, `½`, `0.\\overline{3}`, "five"). Folding these into one notation here lets the
cheap string comparison decide most pairs, and keeps the parsers downstream free of presentation details.
What the folding throws away that can change the value (a percent sign, a degree sign, "cents") is kept
as a flag, so that the comparison can apply the grading policy's one reading instead of silently
dropping it.

Words are never dropped silently (the policy of math_answer.py):
- units on the whitelist (`5 L`, `3 m`, `9 m^2`, `20 km/h`, `12 cm`, "hours") and, after a plain number,
  up to three ordinary words naming what is counted ("18 eggs") are dropped;
- scale words that name a number are read into it ("5 thousand" is 5000, "5 hundredths" 0.05, "5 halves"
  5/2); "7 dozen" stays the product 7 * 12 and operator words become operators ("12 squared" is 12^{2},
  "5 factorial" 5!), which the judge refuses against a number as work left to do;
- words that qualify, negate or hedge a value ("at most", "about", "not", "is wrong", "or more",
  "maybe", `\\approx` with nothing exact before it, a trailing "?") make the answer `problem`, which
  the verifier refuses with that reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from verifiers.math_extract import _BOX_COMMAND, matching_brace, remove_hidden
from verifiers.math_units import Unit, read_unit

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
                          "\u00a0": " ", "\u2009": " ", "\u202f": " ",
                          # vulgar fractions: `2½` becomes the mixed number `2\frac{1}{2}`
                          "½": "\\frac{1}{2}", "⅓": "\\frac{1}{3}", "⅔": "\\frac{2}{3}", "¼": "\\frac{1}{4}",
                          "¾": "\\frac{3}{4}", "⅕": "\\frac{1}{5}", "⅖": "\\frac{2}{5}", "⅗": "\\frac{3}{5}",
                          "⅘": "\\frac{4}{5}", "⅙": "\\frac{1}{6}", "⅚": "\\frac{5}{6}", "⅛": "\\frac{1}{8}",
                          "⅜": "\\frac{3}{8}", "⅝": "\\frac{5}{8}", "⅞": "\\frac{7}{8}"})
# `√75` is the root of 75 (not TeX's `\\sqrt7 5`), `√(13)` of 13
_UNICODE_ROOT = re.compile(r"\u221a\s*(?:\(([^()]{1,40})\)|(\d+(?:\.\d+)?|[A-Za-z]))")
_CURRENCY_NAMES = {"$": "dollar", "\\$": "dollar", "us$": "dollar", "usd": "dollar", "dollar": "dollar",
                   "€": "euro", "\\euro": "euro", "euro": "euro", "£": "GBP", "\\pound": "GBP", "¥": "yen", "₹": "rupee"}
_PHANTOM = re.compile(r"\\[hv]?phantom\s*\{")
_APPROX = re.compile(r"\\approx|≈|≃|\\simeq|\\sim(?![A-Za-z])|^~")
_EMPTY_SET = re.compile(r"\\(?:emptyset|varnothing)(?![A-Za-z])|∅")
_FRAC_VARIANTS = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_TEXT_COMMANDS = re.compile(r"\\(?:text|textbf|textit|textrm|mbox|mathrm|mathbf|mathit|operatorname|mathsf|textnormal)\s*\{")
_CURRENCY = re.compile(r"\\\$|\$|US\$|€|£|¥|₹|\\euro|\\pounds|\b(?:USD|dollars?|euros?)\b")
_CENTS = re.compile(r"(?<!\bper )\bcents?\b|¢|\\cent\b")  # "20 per cent" is a percentage
# No pattern here starts with `\s*`: searched from every position of a long run of spaces, that
# would cost quadratic time; the spaces left behind are collapsed afterwards.
_PERCENT = re.compile(r"\\%|%|\bper ?cent\b|\\text\{\s*per ?cent\s*\}")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree|\bdegrees?\b")
_THOUSANDS_BRACED = re.compile(r"(?<=\d)\{,\}(?=\d{3})")
_THOUSANDS_SPACED = re.compile(r"(?<=\d),\s*\\!\s*(?=\d{3})|(?<=\d)\\,(?=\d{3}(?!\d))")
_THOUSANDS_PLAIN = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_THOUSANDS_SPACE = re.compile(r"-?\d{1,3}(?: \d{3})+(?:\.\d+)?")  # "1 000 000", as SI and many languages write it
_CHOICE = re.compile(r"\(?\s*([A-E])\s*\)?[.:]?")
_MEMBERSHIP = re.compile(r"^[A-Za-z]\s*\\in\s*")
# Unit words after a number or a closing brace ("5 apples", "\frac{1}{2} cm^2"), three at most ("5 ab ab ab
# ..." is not a number and its unit), separated by spaces so that the pattern cannot backtrack exponentially
# on a long run of letters. Words, not letters: a counted word apart from its number ("18 eggs", "4 sq.
# units") has four letters or more, or is a common three-letter noun or an abbreviation; `2xy`, `\frac12 bh`,
# `2\pi rh` and `2 lwh` are products of variables, never a number and its unit.
_THREE_LETTER_NOUNS = (r"(?:egg|cup|day|box|pen|car|cat|dog|hen|pig|cow|bag|jar|can|toy|bus|hat|bee|pie|man|men|boy"
                       r"|cap|fan|ton|sec|min|hrs|yrs|mph|lbs|mos|pts|way|row|set|kid|fly|ant|owl|elf|per)")
_COUNTED_WORD = (rf"(?:[A-Za-z]{{4,}}|{_THREE_LETTER_NOUNS}(?![A-Za-z])|[A-Za-z]{{2}}\.|(?:sq|ft|in|yd|mi|oz|lb|kg|cm|mm|km"
                 r"|hr|ml)(?![A-Za-z])|(?:an?|each)\s+[A-Za-z]{3,})")
# after the number: counted words apart from it, or a rate (`18/hour`, `\\$18/hr`); then up to two more words
_WORDS_AFTER = rf"(?:\s+|\s*/\s*){_COUNTED_WORD}(?:\.?\s+[A-Za-z]{{2,}}|\s*/\s*{_COUNTED_WORD}){{0,2}}"
_UNIT_WORDS = re.compile(rf"(?:(?<=[\d}}])|(?<=\\pi)){_WORDS_AFTER}\.?\s*(?:\^\s*\{{?\s*[23]\s*\}}?)?$")
_PLAIN_NUMBER_THEN_WORDS = re.compile(rf"(-?(?:\d+(?:\.\d+)?|\.\d+)(?:/\d+)?)({_WORDS_AFTER})\s*(?:\^\{{?[23]\}}?)?")
# Words that are mathematics, not units: "2 pi" is 2*pi, never 2 of a unit called "pi".
_MATH_WORDS = {"pi", "sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "oo", "inf", "infty",
               "infinity", "and", "or", "mod", "abs", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh"}
_WORD_ANSWER = re.compile(r"[A-Za-z]{2,}(?:[ -][A-Za-z]+)*")


_OVERLINE = re.compile(r"(?<![\d.])(-?)(\d*)\.(\d*)\\overline\s*\{?\s*(\d+)\s*\}?")
_NUMBER_WORDS = {w: n for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_NUMBER_WORDS.update({w: 10 * k for k, w in enumerate("thirty forty fifty sixty seventy eighty ninety".split(), start=3)})
# "twenty-one" joins a tens word and a unit word; any other two number words side by side ("twelve seven")
# stay two numbers, which the normaliser refuses, rather than being added.
_NUMBER_WORD = re.compile(r"(?i)\b(?:(twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)[- ]"
                          r"(one|two|three|four|five|six|seven|eight|nine)|(" + "|".join(_NUMBER_WORDS) + r"))\b")
_INFINITY_WORDS = re.compile(r"(?i)(negative\s+|minus\s+|-\s*)?(?:positive\s+|\+\s*)?\binfinity\b")
# Patterns that start at a number start only where a number starts (the look-behind), so a long run
# of digits is scanned once, not once per digit.
_PLAIN = r"(?<![\d.])-?\d+(?:\.\d+)?"
# Scale and operator words, applied to the number right before them.
_SCALES = {"thousand": 1000, "thousands": 1000, "million": 10**6, "millions": 10**6, "billion": 10**9,
          "trillion": 10**12, "hundred": 100, "dozen": 12, "half": Fraction(1, 2), "halves": Fraction(1, 2),
          "third": Fraction(1, 3), "thirds": Fraction(1, 3), "quarter": Fraction(1, 4), "quarters": Fraction(1, 4),
          "fourth": Fraction(1, 4), "fourths": Fraction(1, 4), "fifth": Fraction(1, 5), "fifths": Fraction(1, 5),
          **{word: Fraction(1, n) for n, root in enumerate(("sixth", "seventh", "eighth", "ninth"), 6)
             for word in (root, root + "s")},
          **{word: Fraction(1, n) for n, root in ((11, "eleventh"), (12, "twelfth"), (20, "twentieth"))
             for word in (root, root + "s")},
          "tenth": Fraction(1, 10), "tenths": Fraction(1, 10), "hundredth": Fraction(1, 100),
          "hundredths": Fraction(1, 100), "thousandth": Fraction(1, 1000), "thousandths": Fraction(1, 1000)}
_SCALE_WORD = re.compile(rf"({_PLAIN})\s*({'|'.join(sorted(_SCALES, key=len, reverse=True))})\b", re.IGNORECASE)
_OPERATOR_WORD = re.compile(rf"({_PLAIN})\s+(squared|cubed|factorial)\b", re.IGNORECASE)
_OPERATORS = {"squared": "^{2}", "cubed": "^{3}", "factorial": "!"}
# Words that qualify, negate or hedge a value, or whose multiple is ambiguous ("pairs", "score"):
# an answer holding one of them next to a number is refused, never read without it.
_QUALIFIERS = frozenset(
    "about approximately approx approximate roughly around nearly almost circa estimate estimated guess maybe "
    "perhaps probably possibly likely either least most more less fewer greater smaller larger bigger over under "
    "above below upto max maximum minimum not no never none wrong incorrect false invalid mistake error unless "
    "if except ish between plus minus pairs pair score gross couple several some many few extra answer "
    "thousand thousands million millions billion trillion hundred hundreds dozen dozens half halves third "
    "thirds quarter quarters fourth fourths fifth fifths sixth sixths seventh sevenths eighth eighths ninth "
    "ninths eleventh elevenths twelfth twelfths twentieth twentieths tenth tenths hundredth hundredths thousandth "
    "thousandths squared cubed factorial times bound bounds upper lower best worst tops unsure uncertain "
    "unclear unknown guessed guessing doubt doubtful est nope hopefully upwards upward beyond exceeding "
    "rounded truncated approximation estimation inexact ballpark tentative tentatively presumably supposedly "
    "allegedly apparently arguably conceivably potentially unverified unconfirmed speculative suspect think "
    "believe idk hmm nah appx abt ca cca prob range varies depends assuming supposing conditional average "
    "ceiling floor bad mistaken erroneous bogus untrue retracted impossible unlikely kidding false wrongly "
    "invalidated disproved rejected withdrawn scratch ignore".split())
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_LETTER = re.compile(r"[A-Za-z]")
_DECIMAL_APPROXIMATION = re.compile(r"\s*-?(?:\d[\d,]*)?\.\d+\s*(?:\.\.\.|\\[lc]?dots|…)?\s*")  # a decimal: 1.414
_APPROXIMATE_HEDGE = "hedged: a letter or word is no value to approximate"
_DOTS_REPEAT = re.compile(r"^(-?\d*)\.(\d*?)(\d)\3{2,}\s*(?:\.\.\.|\\[lc]?dots|…)$")
_NEGATIVE = re.compile(r"^negative\s+(?=[\d.\\])", re.IGNORECASE)
# Units: dropped after a number. Single letters only where what is left is a plain number, so that
# `3 m` is 3 but `2x + 3 m` is never `2x + 3`.
_UNIT_NAMES = ("km|cm|mm|nm|m|kg|mg|g|lb|lbs|oz|ml|mL|L|l|s|sec|min|h|hr|hrs|ft|in|yd|mi|mph|kph|N|J|W|V|Hz|"
               "kWh|kW|Pa|kPa|cal|kcal|km/h|m/s")
_UNIT_AT_END = re.compile(rf"(?<=[\d}}.\s])\s*(?:{_UNIT_NAMES})(?:\s*/\s*(?:{_UNIT_NAMES}))?"
                          r"\s*(?:\^\s*\{?\s*[23]\s*\}?|\s+squared|\s+cubed)?\s*$")
_PLAIN_NUMBER = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:\s*\\frac\{\d+\}\{\d+\})?")
_SIDE_BY_SIDE = re.compile(r"(?<![\w.^_])\d+(?:\.\d+)?\s+\.?\d")
_MIXED = re.compile(r"(-?)(\d+)\s+(\d+)\s*/\s*(\d+)")
_TRIG = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])")
# A number, a letter or a bracketed expression in degrees (`\\sin 30^\\circ`, `\\sin x^\\circ`, `\\sin (x+30)^\\circ`)
_DEGREE_NUMBER = re.compile(r"(?<![\d.\w\\])(\d+(?:\.\d+)?\s*(?:[A-Za-z](?![A-Za-z])|\\[A-Za-z]+)?|[A-Za-z]|\\[A-Za-z]+"
                            r"|\{[^{}]*\}|\([^()]*\))\s*(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°|\\degree)")


@dataclass(frozen=True)
class Answer:
    """An answer in canonical notation, with what normalising had to set aside."""

    text: str  # canonical LaTeX-ish string, single spaces
    percent: bool = False  # a % sign was removed: what it means is the grading policy's call
    degrees: bool = False  # a degree sign was removed: 90 degrees may be compared with pi/2
    is_text: bool = False  # a word answer ("Evelyn", "even"), compared case-insensitively
    choice: str | None = None  # a multiple-choice letter, "C" for `(C)`, `\\text{(C)}`, `C`
    cents: bool = False  # "cents" was removed: against a reference not in cents, a conversion left to do
    problem: str | None = None  # why the answer is refused whatever it is compared with ("qualified: at most")
    unit: Unit | None = None  # the unit written and removed (math_units compares it with the reference's)
    approximately: str | None = None  # the decimal written after `\\approx`: it must be near the value

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
        apart = " " if inner[:1].isalpha() and s[m.start() - 1 : m.start()].strip() else ""  # `5\\text{cents}`: a word
        s = s[: m.start()] + apart + inner + s[i:]
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


_SIMPLE_NUMBER = re.compile(r"-?(?:\d{1,400}(?:\.\d*)?|\.\d+)")


@lru_cache(maxsize=8192)
def normalise(raw: str) -> Answer:
    """The canonical form of an extracted answer or of a reference (cached: samples of one prompt
    repeat their answers)."""
    if _SIMPLE_NUMBER.fullmatch(raw):  # most answers: nothing to fold
        return Answer(raw.rstrip(".") if raw[-1] == "." and len(raw) > 1 else raw)
    s = _UNICODE_ROOT.sub(lambda m: "\\sqrt{" + (m.group(1) or m.group(2)) + "}", raw) if "\u221a" in raw else raw
    s = s.translate(_UNICODE).strip()
    if "phantom" in s:
        s = remove_hidden(s, _PHANTOM).strip()
        if not s:
            return Answer("", problem="no visible answer: its content is a \\phantom")
    if _BOX_COMMAND.search(s):
        return Answer(s, problem="hedged: a box inside the answer, with more around it, is not one committed answer")
    for left, right in (("$$", "$$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= 4:
            s = s[2:-2]
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$" and s.count("$") == 2:
        s = s[1:-1]
    s = _DOTS_REPEAT.sub(r"\1.\2\\overline{\3}", s.strip())  # "0.1666..." repeats its last digit
    s = s.strip().rstrip(".").strip()
    s = s[1:].strip() if s.startswith("=") else s  # "= 5", left over from a cut-off derivation
    problem = approximately = None
    exact, *approximation = _APPROX.split(s, 1)  # "\\sqrt{2} \\approx 1.414": the exact value comes first
    exact = exact.strip()
    if approximation:
        if not exact:
            problem = "qualified: an approximate value"
        elif not _DECIMAL_APPROXIMATION.fullmatch(approximation[0]) or re.fullmatch(r"-?\d[\d,]*(?:\.\d+)?", exact):
            # `2\\sqrt{3} \\sim 3\\sqrt{2}`, `5 \\approx 6`: a second value, not the first one's decimal
            problem = "hedged: two values joined by a sign of approximation"
        else:  # whether the decimal is near the value is the comparison's to check (`\\frac13 \\approx 0.9` is not)
            approximately = re.sub(r"\.\.\.|\\[lc]?dots|…|,|\s", "", approximation[0])
        s = exact or s
    if s.rstrip("} ").endswith("?"):  # "5?", `\\text{Evelyn?}`
        problem = "qualified: a question mark"
    s = _FRAC_VARIANTS.sub(r"\\frac", s)
    s = _EMPTY_SET.sub(r"\\{\\}", s)
    s = _LAYOUT.sub("", s)
    s = s.replace("\\langle", "(").replace("\\rangle", ")")  # a vector `\\langle 1, 2 \\rangle` is the tuple (1, 2)
    s = _THOUSANDS_BRACED.sub("", s)
    s = _THOUSANDS_SPACED.sub("", s)
    s = _SPACES.sub(lambda m: m.group(1) or " ", s)

    choice = _choice_letter(s)
    if choice:
        return Answer(choice, choice=choice, problem=problem or (_APPROXIMATE_HEDGE if approximately else None))

    s, whole_text = unwrap_text_commands(s) if "\\" in s else (s, False)
    letters = _LETTER.search(s) is not None
    if letters:
        s = _INFINITY_WORDS.sub(lambda m: "-\\infty" if m.group(1) else "\\infty", s)
    s, n_cents = _CENTS.subn("", s) if letters or "¢" in s else (s, 0)
    currency = _CURRENCY.search(s)
    s = _CURRENCY.sub("", s).strip()
    s, n_percent = _PERCENT.subn("", s)
    if _TRIG.search(s):  # `\cos 60^\circ`: the degrees are the function's argument, in radians here
        s = _DEGREE_NUMBER.sub(r"(\1 \\cdot \\frac{\\pi}{180})", s)
    s, n_degrees = _DEGREES.subn("", s)
    s = _MEMBERSHIP.sub("", s.strip())
    s = re.sub(r"\s+", " ", s).strip().rstrip(".").strip()
    if letters:
        s = _NUMBER_WORD.sub(_number_word, s) if _NUMBER_WORD.search(s) else s
        s = _NEGATIVE.sub("-", s)
        if _WORD_ANSWER.fullmatch(s):
            return Answer(s, is_text=True, problem=problem or (_APPROXIMATE_HEDGE if approximately else None))
    if "\\overline" in s:
        s = _OVERLINE.sub(_repeating_decimal, s)
    if letters:
        s = _SCALE_WORD.sub(_scaled, s)
        s = _OPERATOR_WORD.sub(lambda m: f"{m.group(1)}{_OPERATORS[m.group(2).lower()]}", s)
        if problem is None and re.search(r"[\d\\]", s):  # a number or math (`\\pi \\text{ maybe}`), not a word answer
            qualifier = next((w for w in _WORD.findall(s) if w.lower() in _QUALIFIERS), None)
            if qualifier:
                problem = f"qualified by the word {qualifier.lower()!r}"
        s, unit_text = strip_unit_words(s)
    else:
        unit_text = None
    s = strip_thousands_separators(s)
    s, problem = _side_by_side(s, problem)
    if n_cents:
        unit_text = "cents"
    elif currency:
        unit_text = _CURRENCY_NAMES.get(currency.group(0).lower().rstrip("s"), "dollar")
    elif n_degrees:
        unit_text = "degrees"
    return Answer(s, percent=n_percent > 0, degrees=n_degrees > 0, cents=n_cents > 0, problem=problem,
                  unit=read_unit(unit_text), approximately=approximately)


def _scaled(m: re.Match) -> str:
    """"5 thousand" -> 5000, "5 hundredths" -> 0.05: a scale word that names a number is read into it, so that
    nothing a response writes itself (`5 \\cdot 1000`) reads as a number written with a scale word. A whole
    number of fractional parts stays the fraction it names ("126 halves" is \\frac{126}{2}, a division left
    to do); "7 dozen" and "1.5 halves" stay products."""
    number, scale = Fraction(m.group(1)), Fraction(_SCALES[m.group(2).lower()])
    decimal_place = scale.denominator in (10, 100, 1000) and abs(number) < scale.denominator  # "5 hundredths"
    if scale.numerator == 1 and scale.denominator > 1 and number.denominator == 1 and not decimal_place:
        sign = "-" if number < 0 else ""  # written as the fraction it names, so that 126/2 is judged unreduced
        return f"{sign}\\frac{{{abs(number.numerator)}}}{{{scale.denominator}}}"
    if scale < 1 and number.denominator != 1:  # "1.5 halves", "12.6 tenths": a product left to do
        return f"({m.group(1)} \\cdot \\frac{{1}}{{{scale.denominator}}})"
    if scale == 12:  # "7 dozen" is 7 twelves: against a number, a product left to do ("What is 7 * 12?")
        return f"({m.group(1)} \\cdot 12)"
    value = number * scale
    if value.denominator == 1:
        return str(value.numerator)
    if 10**12 % value.denominator == 0:  # a short exact decimal: 2.5, 0.05
        return _decimal(value)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _decimal(value: Fraction) -> str:
    """The exact decimal of a fraction whose denominator divides 10^12."""
    digits = 12
    scaled = abs(value.numerator) * (10**digits // value.denominator)
    whole, frac = divmod(scaled, 10**digits)
    text = f"{whole}.{frac:0{digits}d}".rstrip("0").rstrip(".")
    return ("-" if value < 0 else "") + text


def _number_word(m: re.Match) -> str:
    if m.group(3):
        return str(_NUMBER_WORDS[m.group(3).lower()])
    return str(_NUMBER_WORDS[m.group(1).lower()] + _NUMBER_WORDS[m.group(2).lower()])


def _repeating_decimal(m: re.Match) -> str:
    """`0.1\\overline{6}` -> `\\frac{1}{6}`: whole part, digits before the repeat, the repeating digits."""
    from fractions import Fraction

    sign, whole, fixed, repeat = m.groups()
    value = int(whole or 0) + (Fraction(int(fixed or 0)) + Fraction(int(repeat), 10 ** len(repeat) - 1)) / 10 ** len(fixed)
    if value.denominator == 1:  # 0.\\overline{9} is 1
        return f"{sign}{value.numerator}"
    return f"{sign}\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _side_by_side(s: str, problem: str | None) -> tuple[str, str | None]:
    """`2 1/2` is the mixed number 5/2; any other two numbers with only a space between (`2 \\quad 3`)
    are not one answer, and never their product."""
    mixed = _MIXED.fullmatch(s)
    if mixed and int(mixed.group(3)) < int(mixed.group(4)):
        sign, whole, num, den = mixed.groups()
        return f"{sign}\\frac{{{int(whole) * int(den) + int(num)}}}{{{den}}}", problem
    if _SIDE_BY_SIDE.search(s) and problem is None:
        problem = "two numbers side by side"
    return s, problem


def split_top_level(s: str, separators: tuple[str, ...]) -> list[str]:
    """Split `s` at separators that are outside every (), [], {} and `\\{ \\}` pair."""
    if not any(sep in s for sep in separators):
        return [s.strip()]
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        if s.startswith("\\{", i):
            depth += 1
            i += 2
            continue
        if s.startswith("\\}", i):
            depth -= 1
            i += 2
            continue
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            for sep in separators:
                if s.startswith(sep, i) and not (sep[-1].isalpha() and s[i + len(sep) : i + len(sep) + 1].isalpha()):
                    parts.append(s[start:i])
                    start = i + len(sep)
                    i = start - 1
                    break
        i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


def strip_unit_words(s: str) -> tuple[str, str | None]:
    """`5 apples` -> `5`, `864 inches^2` -> `864`, `\\frac{1}{2} cm` -> `\\frac{1}{2}`, `20 km/h` -> `20`;
    never `2 pi` -> `2`, and a one-letter unit only after a plain number (`3 m`, not `2x + 3 m`).
    Also the unit's text as written (None if nothing was stripped), for math_units to compare."""
    unit = _UNIT_AT_END.search(s)
    if unit and len(re.match(r"\s*([A-Za-z]*)", unit.group(0)).group(1)) == 1 and not unit.group(0)[:1].isspace():
        unit = None  # `3h`, `4s^2`: a one-letter unit only apart from its number (`3 h`), else it is a variable
    if unit and unit.start() > 0:
        rest = s[: unit.start()].strip()
        if _PLAIN_NUMBER.fullmatch(rest) or len(unit.group(0).strip().split("/")[0].split("^")[0].strip()) > 1 \
                and re.search(r"(?:[\d}]|\\pi)$", rest) and not re.search(r"[A-Za-z]", _strip_latex_names(rest)):
            return rest, unit.group(0).strip()
    m = _PLAIN_NUMBER_THEN_WORDS.fullmatch(s)
    if m and not _mentions_math(m.group(2)):
        return m.group(1), s[m.end(1) :].strip()
    m = _UNIT_WORDS.search(s)
    if m and not _mentions_math(m.group(0)) and not re.search(r"[A-Za-z]", _strip_latex_names(s[: m.start()])):
        return s[: m.start()].strip(), m.group(0).strip()  # not after variables: `x^2 + 2 eggs` is no quantity
    return s, None


def _mentions_math(words: str) -> bool:
    return any(w.lower().rstrip(".") in _MATH_WORDS for w in re.findall(r"[A-Za-z.]+", words))


def _choice_letter(s: str) -> str | None:
    """`C`, `(C)`, `\\text{(C)}`, `\\textbf{(C)}` -> "C"; anything else -> None."""
    inner, _ = unwrap_text_commands(s.strip())
    m = _CHOICE.fullmatch(inner.strip())
    if m and (inner.strip().startswith("(") or len(inner.strip()) <= 2):
        return m.group(1)
    return None


def _strip_latex_names(s: str) -> str:
    return re.sub(r"\\[A-Za-z]+", " ", s)
