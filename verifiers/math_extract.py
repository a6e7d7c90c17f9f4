"""Finding the final answer in a model's whole response.

The order of preference follows how answers are conventionally marked: the last `\\boxed{}` or
`\\fbox{}` (a model that boxes several candidates means the last one), then an explicit "final answer
is" / "answer:" phrase, then GSM8K's `####` line, and only then the last mathematical expression or
number, so that a response with no marker still gets judged on what it ends with.

Every scan here is linear in the length of the response (no backtracking regular expressions over the
whole text), so even a million-character response costs well under a second, in the caller's process.
"""

from __future__ import annotations

import re

_BOX_COMMANDS = ("\\boxed", "\\fbox")
# Long responses are searched backwards in windows: answers sit at the end, and a bounded window keeps
# the regular expressions cheap whatever the response's length.
_TAIL = 4000
_MAX_ANSWER_CHARS = 2000
_MAX_BOX_TRIES = 8

_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped brace `\{` is one token, not a brace
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d*\.\d+|-?\d+")
# `\$` is an escaped dollar sign (currency), never a math delimiter.
_MATH_SPANS = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_SINGLE_VARIABLE = re.compile(r"\s*[A-Za-z](?:_\{?\w+\}?)?\s*")
_LEADING_NUMBER = re.compile(r"\\?\$?\s*-?\d(?:[\d,]*\d)?(?:\.\d+)?(?:\s*\\?%)?")
_EXPLANATION = re.compile(r",?\s+(?:because|since|as|which|so|that|from|after|when|for|by|and\s+[a-z])\b")
_ANSWER_PHRASES = (
    re.compile(r"final answer\s*(?:is|:)\s*:?", re.IGNORECASE),
    re.compile(r"\banswer\s*(?:is|:)\s*:?", re.IGNORECASE),
)


def matching_brace(text: str, open_index: int) -> int:
    """Index of the `}` that closes the `{` at `open_index`, or -1 if it is never closed.

    Steps from brace to brace with a compiled pattern rather than character by character, so an
    unclosed brace at the start of a million-character response costs milliseconds.
    """
    depth = 0
    for m in _BRACE_TOKENS.finditer(text, open_index):
        token = m.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return -1


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` (nested braces matched), or None.

    `\\boxed 5` (no braces, as some models write) is accepted up to the next space or `$`.
    """
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    tries = 0
    while start >= 0:
        cmd = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
        j = start + len(cmd)
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = matching_brace(text, j)
            if end > 0:
                return text[j + 1 : end].strip()
        elif j > start + len(cmd) and j < len(text):
            m = re.match(r"[^\s$]+", text[j : j + _MAX_ANSWER_CHARS])
            if m:
                return m.group(0)
        # Unclosed or empty box: fall back to an earlier one, a few times at most, since each try
        # scans to the end of the text.
        tries += 1
        start = max(text.rfind(cmd, 0, start) for cmd in _BOX_COMMANDS) if tries < _MAX_BOX_TRIES else -1
    return None


def _strip_math_delimiters(s: str) -> str:
    s = s.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            return s[len(left) : len(s) - len(right)].strip()
    return s


def _after_phrase(text: str) -> tuple[int, str | None]:
    """Where the last "final answer is" / "answer:" phrase is (-1 if none), and the answer written
    after it, up to the end of its sentence."""
    offset = max(0, len(text) - _TAIL)
    tail = text[offset:]
    for phrase in _ANSWER_PHRASES:
        matches = list(phrase.finditer(tail))
        if not matches:
            continue
        position = offset + matches[-1].start()
        return position, _answer_in_line(tail[matches[-1].end() :])
    return -1, None


def _answer_in_line(rest: str) -> str | None:
    """The answer at the start of `rest`: a math span, a number before an explanation, or the sentence."""
    rest = rest.lstrip(" *_:\t")  # "**Answer:** 12" in markdown
    line = rest.split("\n", 1)[0].strip()
    span = _MATH_SPANS.search(line)
    if span:
        return _span_text(span)
    line = re.split(r"\.\s+", line, maxsplit=1)[0]  # the first sentence: "12. Then we check..."
    line = line.rstrip(" .;*").lstrip("*")  # the full stop ("3." is 3 anyway) and markdown bold
    # "12 because 3 x 4 = 12", "18, which is the total": the number, not the explanation after it
    number = _LEADING_NUMBER.match(line)
    if number and _EXPLANATION.match(line, number.end()):
        return number.group(0).strip()
    return line[:_MAX_ANSWER_CHARS] or None


def _span_text(m: re.Match) -> str:
    return next(g for g in m.groups() if g is not None).strip()


def _last_math_or_number(text: str) -> str | None:
    """The last `$...$`-style span or bare number, whichever ends later in the text."""
    window = text[-_TAIL:]
    spans = list(_MATH_SPANS.finditer(window))
    numbers = list(_NUMBER.finditer(window))
    if not spans and not numbers and len(text) > _TAIL:
        numbers = list(_NUMBER.finditer(text))  # rare: the only number sits far from the end
    span = spans[-1] if spans else None
    number = numbers[-1] if numbers else None
    if span is not None and (number is None or span.end() >= number.end()):
        content = _span_text(span)
        # "so $2 + 3 = 5$": the value is what follows the last `=`; but "$x = 5$" stays whole, since
        # an equation may itself be the answer and the comparison knows `x = 5` against a bare 5.
        if "=" in content and not re.search(r"[<>]|\\[lg]e|\\neq", content):
            lhs, rhs = content.rsplit("=", 1)
            if rhs.strip() and not _SINGLE_VARIABLE.fullmatch(lhs):
                content = rhs.strip()
        return content[:_MAX_ANSWER_CHARS] if content else None
    if number is not None:
        return number.group(0)
    return None


def extract_answer(response: str) -> str | None:
    """The final answer written in `response`, as a string still in the model's notation; None if none."""
    if not isinstance(response, str) or not response.strip():
        return None
    boxed = last_boxed(response)
    if boxed:
        return boxed
    # An answer phrase and GSM8K's `####`: whichever comes last is the model's final word.
    phrase_at, phrase = _after_phrase(response)
    hashes = response.rfind("####")
    if phrase and phrase_at > hashes:
        boxed = last_boxed(phrase)
        return _strip_math_delimiters(boxed or phrase)
    if hashes >= 0:
        line = response[hashes + 4 :].strip().split("\n", 1)[0].strip()
        if line:
            return _strip_math_delimiters(line)[:_MAX_ANSWER_CHARS]
    return _last_math_or_number(response)
