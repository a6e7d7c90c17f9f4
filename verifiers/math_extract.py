"""Finding the final answers in a model's whole response, and which of them it commits to.

Where answers are looked for, in the conventional markers: every box (`\\boxed{}`, `\\fbox{}`,
`\\framebox{}`, `\\colorbox{c}{}`, `\\fcolorbox{c}{c}{}`), every answer phrase ("final answer is",
"answer:", "the answer is", "my answer is", `**Answer**:`, "answer equals", a table cell), every line
"Ans: 6" / "Solution: 6" / "Result: 6", every GSM8K `####` line; only when a response has none of these,
the last mathematical expression or number it ends with. A box holding a box with anything else in it
is kept whole (and refused by normalising), not read as its inner box.

Which of them count (the grading policy of math_answer.py, applied to the text):
- a candidate the response disowns does not count: "The answer is not \\boxed{5}", "\\boxed{24} is
  incorrect", "The answer isn't 5, it's 6" (5 is disowned, 6 is the answer);
- a candidate followed by an explicit self-correction ("wait", "actually", "mistake", "wrong",
  "on reflection", "instead", ...) and then another candidate is withdrawn: the response is judged on
  the answer it ends committed to;
- all other candidates stand together: `\\boxed{2} or \\boxed{3}`, two "Final answer" lines,
  `#### 17` then `#### 18`, or an unmarked ending that lists several numbers ("12, 15 or 18", "17 eggs.
  Or 18 eggs.", numbered lines) are all returned, and the verifier refuses the response as hedged
  unless every one is right;
- after the final answer, values offered with no marker of their own are more final answers
  (`_answers_after`: joined to it on its line by anything or nothing, in an offering sentence, under a
  condition, on a line of their own, in a code block or table row).

Every scan here is linear in the length of the response (no backtracking regular expression runs over
unbounded text; answer lines are cut to a bounded length before any pattern sees them), so even a
million-character response costs well under a second in the caller's process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Every command that draws a box around its last argument is a box: `\\framebox[2cm]{6}`, `\\colorbox{yellow}{6}`,
# `\\fcolorbox[rgb]{1,0,0}{1,1,1}{6}`, MathJax's `\\bbox[border]{6}`, fancybox's and tcolorbox's boxes (the
# colour and option arguments are skipped).
_OPTION = r"(?:\s*\[[^\]{}]{0,40}\])*"
_COLOUR = r"\s*\{[^{}]{0,40}\}"
_BOX_COMMAND = re.compile(rf"\\(?:boxed|fbox|framebox{_OPTION}|colorbox{_OPTION}{_COLOUR}|fcolorbox{_OPTION}{_COLOUR}{_COLOUR}"
                          rf"|bbox{_OPTION}|doublebox|ovalbox|Ovalbox|shadowbox|tcbox{_OPTION})(?![A-Za-z])")
# Answers sit at the end: the fallback and the unmarked-list check look at a bounded tail.
_TAIL = 4000
_MAX_ANSWER_CHARS = 2000
_MAX_CANDIDATES = 200  # markers examined, from the end; a response repeating one more often is a loop
# Answer phrases cost more to read (a math-span search over their line): fewer, over a shorter line, so
# that a loop of "The answer is \\(\\(\\(..." costs milliseconds, not seconds.
_MAX_PHRASES = 12
_PHRASE_LINE_CHARS = 600
_WINDOW = 60  # characters either side of a box searched for words that disown it

_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped brace `\{` is one token, not a brace
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d*\.\d+|-?\d+")
# `\$` is an escaped dollar sign (currency), never a math delimiter.
_MATH_SPANS = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_SINGLE_VARIABLE = re.compile(r"\s*[A-Za-z](?:_\{?\w+\}?)?\s*")
_LEADING_NUMBER = re.compile(r"\\?\$?\s*-?\d(?:[\d,]*\d)?(?:\.\d+)?(?:\s*\\?%)?")
_EXPLANATION = re.compile(r",?\s+(?:because|since|as|which|so|that|from|after|when|for|by|and\s+[a-z])\b")
_ANSWER_PHRASE = re.compile(r"final answer[*_]*[ \t]*(?:is|:|=|\||\n|(?=\$?-?\d))\s*:?"
                            r"|(?<![A-Za-z])(?:answer|ans\.?)[*_]*[ \t]*(?:is|:|=|\||—|–|--?|→|->|=>|equals|'s|would be|should be|must be|will be)\s*:?"
                            r"|^[ \t*#|]*answer[ \t*|]+(?=\$?-?\d)", re.IGNORECASE | re.MULTILINE)
# Weaker labels, "Solution: 6", "Result: 6": an answer only when the rest of the line is nothing but a short answer
# (a header "Solution: Let x be ..." is not one).
# Between an answer phrase and a box on its line: the box is the phrase's answer only if what comes
# between leads into it ("is \boxed", "is $x = \boxed", "is $3! \times 5! = \boxed"); otherwise ("answer equals
# 13, hence \boxed{12}") the phrase stated an answer of its own.
_LEADS_INTO_BOX = re.compile(r"(?:=|\\in|:|\$|\\\(|\\\[|\*)\s*$")
_LABEL_LINE = re.compile(r"^[ \t*_#|]*(?:(?:final(?:\s+result)?|solution|result|alternative|ans)[*_]*[ \t]*[:=—–|-]|ans\.)[*_]*[ \t]*(\$[^$\n]{1,40}\$|\\\([^\n]{1,40}?\\\)"
                         r"|[-+]?\$?\d[\d,./]*)[ \t*.|]*$", re.IGNORECASE | re.MULTILINE)
# "check our answer:", "so my answer is correct": talk about an answer, not one (the word before "answer")
# ("my answer is 6", "our final answer: 6" commit to 6, as any other answer phrase does)
_NOT_A_PHRASE = frozenset("your this that each a an check checking verify verifying".split())
_VERDICT_ONLY = re.compile(r"(?:correct|right|wrong|incorrect|valid|verified|confirmed|reasonable)\W*", re.IGNORECASE)
_OPENING_ONLY = re.compile(r"\\\[|\$\$?|\\\(|\\begin\{[A-Za-z]+\*?\}")
_HASHES = re.compile(r"####")

# Words that withdraw what came before: a later candidate then replaces the earlier ones.
_RETRACTION = re.compile(
    r"\b(?:wait|actually|oops|mistake|mistaken|wrong|incorrect|error|erred|correct(?:ion|ing|ed)|re-?check\w*"
    r"|re-?calculat\w*|re-?examin\w*|re-?do\w*|on (?:second thought|reflection)|instead|scratch that|revis\w*"
    r"|not right|no,|hmm|hold on|reconsider\w*|rethink\w*|re-?evaluat\w*|double[- ]check\w*|not quite"
    r"|let me (?:think|check|verify|try) again)", re.IGNORECASE)
# A box is disowned by a negation right before it, or by a verdict on it right after it.
_NEGATIONS = frozenset(("not", "never", "nor", "cannot", "can't", "isn't", "wasn't", "won't"))
_VERDICT_WORDS = (r"(?:(?:the |a |an )?(?:incorrect|wrong|false|mistaken|invalid)|a mistake|an error|✗|✘|❌"
                  r"|not (?:the (?:right |correct |final )?answer|correct|right|valid|true|it))")
_DISOWNED_AFTER = re.compile(
    r"[\s$.,;:()\-]*(?:(?:but|and|which|though|however)\s*,?\s*)?(?:(?:that|this|it)(?:'s|\s+is|\s+was|\s+would be)?\s+)?"
    rf"(?:(?:is|was|would be|seems|looks|are)\s+)?{_VERDICT_WORDS}\b"
    r"|[\s$.,)]*(?:isn't|wasn't)\s+(?:the\s+(?:right\s+|correct\s+)?answer|correct|right|valid|true|it)\b", re.IGNORECASE)
_NEGATED_PHRASE = re.compile(r"\s*(?:definitely\s+|certainly\s+|clearly\s+|surely\s+)?(?:n't|not|never)\b", re.IGNORECASE)
# Right after the final answer, on its line: spacing, closing delimiters and text wrappers, then words or
# signs that join another value to it ("\\boxed{5} or 6", "\\boxed{5} \\text{ or } 6", "$\\boxed{5}$ and $6$",
# "\\boxed{5} \\lor 6", "\\boxed{5} \\quad 6", "\\boxed{5}6"): whatever value follows is another final answer.
_GAP = (r"(?:[ \t$~*`]|\\[,;:! ]|\\q?quad(?![A-Za-z])|\\hfill(?![A-Za-z])|\\hspace\*?\{[^{}\n]{0,20}\}"
        r"|\\(?:text|mathrm|textit|textbf|textrm|mathbf|mbox|emph|operatorname)\s*\{|[{}()\[\]]|\\[)\]]"
        r"|\\end\s*\{[A-Za-z*]{1,12}\}|\\tag\*?\{[^{}\n]{0,20}\}|\\(?:nonumber|notag|displaystyle)(?![A-Za-z])"
        r"|\\(?:right|big|Big|bigg|Bigg)(?![A-Za-z])[)\]|.]?)*")
_JOINER = (r"(?:(?:or|and|nor|xor|else|otherwise|maybe|possibly|perhaps|alternatively|alt\.|vs\.?|versus|namely"
           r"|that is|i\.e\.|e\.g\.)(?![A-Za-z])|=|:="
           r"|,|;|/|\||—|–|--?|&|\\\\|±|≠|∨|\\(?:lor|vee|mid|pm|mp|neq?|land|wedge)(?![A-Za-z]))")
_APPROXIMATION_AFTER = re.compile(r"(?:\\approx|≈|\\sim(?:eq)?(?![A-Za-z]))\s*([-+]?\d[\d,]*\.\d+)\s*(?:\.\.\.|\\[lc]?dots)?\s*[$)\]}.]*\s*$")
# A unit or currency word right after the final answer's box, outside it: part of the answer ("cents" is not
# taken: data sets box the number of cents and write the word after it against a bare reference)
_UNIT_OUTSIDE = re.compile(r"[\s$]*(dollars?|percent|\\?%|degrees?|euros?|pounds?|yen|rupees?|km|cm|mm|m|kg|g|mg"
                           r"|lbs?|oz|ml|mL|L|ft|feet|inch(?:es)?|yd|mi|miles?|meters?|metres?|minutes?|hours?|seconds?"
                           r"|days?|weeks?|months?|years?|mph)(?![A-Za-z])")
# A hedging word right after the final answer, outside its box or span: "$5$ at most", "$\\boxed{5}$ approximately".
_HEDGE_OUTSIDE = re.compile(r"[\s$]*(?:\\text\s*\{\s*)?(approximately|approx|about|roughly|around|nearly|almost|maybe"
                            r"|perhaps|probably|possibly|presumably|at most|at least|at best|or so|or more|or less"
                            r"|or fewer|give or take|tops|ish)(?![A-Za-z])", re.IGNORECASE)
_UNIT_AFTER = re.compile(r"\s*(?:[A-Za-z]{2,}|option)(?:\s*/\s*[A-Za-z]+)?|\s*/\s*[A-Za-z]+")  # "eggs", "cm", "/hour"
_RIGHT_AFTER = re.compile(rf"{_GAP}(?:({_JOINER}){_GAP})*", re.IGNORECASE)
# What starts a value: a math span, a sign or digit, a math command, a bracket, a letter in an expression.
_VALUE_START = re.compile(r"\$|\\[(\[]|(?:\\\$|[€£])\s*\d|[-+−]?\s*(?:\d|\.\d|\\\{|[(\[]"
                          r"|\\(?!(?:text|quad|qquad|hfill|hspace|end|label|tag|nonumber|notag|newline|par|right"
                          r"|big|Big|bigg|Bigg|displaystyle|pmod|bmod|mod)(?![A-Za-z]))[A-Za-z]+)"
                          r"|[A-Za-z]\s*(?:[\^_=+*/<>]|-\s*[A-Za-z\d]|\d)")
# One word after a joiner is a value too ("\\boxed{Evelyn} or Bob", "\\boxed{C}, D", "or seventy-three"),
# unless it is one of the words prose puts there ("\\boxed{5}, right?", "\\boxed{5} and done").
_ONE_WORD = re.compile(r"([A-Za-z][A-Za-z'-]*)(?:\$|\s*(?:[.!?,;:)}\]]|\\[)\]]|$))")  # "Bob$": a span's end
_PROSE_WORDS = frozenset("""so thus hence therefore then done right correct indeed exactly overall total
    respectively approximately roughly units also too only that this it which as the a an we i you here there
    is are was were be qed end finished since because where when for with""".split())
_ALTERNATIVE = re.compile(r"\b(?:or (?:maybe|possibly|perhaps|else)|(?:might|could|may)(?: also)? be|alternatively)\b[\s:,]*",
                          re.IGNORECASE)
_DIAGRAM = re.compile(r"\[asy\].*?(?:\[/asy\]|$)", re.DOTALL)
_CODE_BLOCK = re.compile(r"```[A-Za-z]*\n?(.*?)```", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n")
# A sentence that offers a value as an answer too. Narrow on purpose: worked solutions go on after their box
# with notes ("all factors of $14$ are also factors of $42$", "Alternatively, we can plug in ..."), which are not.
_OFFERING = re.compile(
    r"\balso\s+(?:be\s+)?(?:possible|consistent|accept\w*|valid|correct|right|works?|defensible|plausible|reasonable"
    r"|an?\s+(?:answer|solution|option|possibility)|the\s+answer)\b|\baccept(?:s|ed|ing|able)?\b|close second"
    r"|\b(?:might|could|may|would|can)\s+(?:also|equally)\s+be\b|^\W*(?:maybe|perhaps|possibly)\b|\bpossible\s*(?:answer|value)?s?\s*:|\bor\s+(?:maybe|possibly|perhaps|else)\b"
    r"|\b(?:alternative|another|other|second)\s+(?:answer|value|possibility|option|solution|candidate)\b|\beither\b"
    r"|\\therefore|∴", re.IGNORECASE)
# A value under a condition: another answer for another reading of the problem.
_VALUE = r"(\$?-?\d[\d.,/]*\$?)"
_CONDITION = r"(?:if|when|unless|assuming|counting|including|excluding|in case|otherwise|depending)"
_CONDITIONAL_VALUE = re.compile(
    rf"^\W*(?:or\s+)?{_VALUE}\s+{_CONDITION}\b"
    rf"|\b{_CONDITION}\b[^.\n$]{{0,60}}?(?:it's|it is|it would be|it'd be|then it's|then|we get|you get|the answer is|:)\s*{_VALUE}",
    re.IGNORECASE)
# A line holding one value and at most two words (a label, maybe with a note in brackets) before it: "> 6",
# "P.S. 6", "**Alternative: 6**", "(alt. 6)", "Answer (alt): 6", "**Also:** $3\sqrt{2}$", "P.S. D".
_BRACED = r"\{(?:[^{}\n]|\{[^{}\n]{0,8}\}){1,20}\}"  # a short braced argument, one level of braces inside
_VALUE_LINE_CHARS = 80  # longer lines are not "just a value"; the bound also keeps the pattern's cost small
_VALUE_LINE = re.compile(r"[\W_]*(?:[A-Za-z][A-Za-z.']*(?:\s*\([^()\n]{0,12}\))?[\s:.,=>*-]*){0,2}[\s:=*_(\[>-]*"
                         r"(?:\$\$?|\\[(\[])?((?:\(|\[)(?![^\n]*(?:\\times|\\cdot|[+*/=<>]))[^$\n]{1,30}?[)\]](?=\$)"
                         r"|(?=[-+\d\\])[-+]?(?:\d[\d,]*(?:\.\d+)?)?(?:\\[dt]?frac" + _BRACED + _BRACED
                         + r"|\\sqrt(?:\[\d\])?\{?\w{1,8}\}?|\\pi(?![A-Za-z])|\^\{?-?\w{1,6}\}?)*"
                         r"(?<=[\d}\w])|[A-E])(?:\$\$?|\\[)\]])?"
                         r"[\s.!*_)\]]*")
# The same behind a marker (a label ending in ":", "P.S.", ">", a bullet) with the value's unit or counted
# words after it: "> 19 eggs", "Answer (alt): 19 eggs", "Alt: \\$19", "• 19 eggs" ("We have 3 rows." has none).
_MARKED_VALUE_LINE = re.compile(r"[\s*_]*(?:(?:[A-Za-z][A-Za-z.']*(?:\s*\([^()\n]{0,12}\))?\s*){1,2}:|P\.?\s?S\.?:?|>|•|·|[-–—*])"
                                r"[\s*_:]*(?:\\?\$\s*|[€£]\s*)?(-?\d[\d,]*(?:\.\d+)?)(?:\s*(?:\\?%|\^\s*\\circ|°))?"
                                r"(?:\s*/\s*[A-Za-z]+|\s+[A-Za-z]{2,}(?:\s*/\s*[A-Za-z]+)?){0,2}[\s.!*_)\]]*")
_TEXT_WRAPPER = re.compile(r"\\(?:textbf|textit|mathbf|text|emph|mathrm)\s*\{([^{}\n]*)\}")

# In an unmarked last sentence with several numbers: words that offer them as alternatives.
_UNMARKED_CUE = re.compile(r"\b(?:or|possibly|maybe|perhaps|either|otherwise|alternatively|also|other|else)\b",
                           re.IGNORECASE)
_OFFERING_COMMAND = re.compile(r"\\therefore|\\text\{[^{}]*\}|∴")
# After the final answer only an unambiguous withdrawal counts ("It is a common mistake to ..." does not).
_WITHDRAWAL = re.compile(
    r"\b(?:wait|oops|actually|scratch that|on second thought|that(?:'s| is| was) (?:wrong|incorrect|not right)"
    r"|I made a mistake|I was wrong|let me (?:redo|recompute|recalculate|re-?check))\b", re.IGNORECASE)
# What makes a withdrawal with no new answer after it a disowning ("\boxed{5}. Wait, that's wrong."), not a check
_DISOWNING = re.compile(r"\b(?:wrong|incorrect|mistaken?|error|erred|not (?:right|correct|it)|isn't (?:right|correct|it)"
                        r"|doesn't work|scratch that|no,)", re.IGNORECASE)
# A check of the answer, not a withdrawal of it: "Wait, let me verify: 3 rows of 4." keeps the answer.
_CHECK = re.compile(r"[\s,:;.!-]*(?:(?:let me|let's|let us|I'll|I will|I should|to)\s+)?(?:quickly\s+)?"
                    r"(?:verify|check|double[- ]check|re-?check|confirm|sanity[- ]check|make sure)\b", re.IGNORECASE)
_OFFERING_IN_CHECK = re.compile(r"\b(?:or|maybe|perhaps|possibly|alternatively|could be|might be)\b", re.IGNORECASE)
_AFTER_FINAL = 300  # characters after the final answer searched for an alternative or a retraction
_CORRECTED_TO = re.compile(r"\b(?:it's|it is|it was|but|rather|instead)\b[\s:,]*(?:it's|it is)?[\s:]*", re.IGNORECASE)
# An unmarked ending that lists numbers: "12, 15 or 18", "maybe 6, maybe 7".
# A number may carry up to two words naming what it counts ("17 eggs, or 18 eggs"); "17 eggs. Or 18 eggs." too.
_LIST_NUMBER = r"\$?(?:[A-Za-z]\s*=\s*)?-?\d+(?:\.\d+)?\$?(?:\s+[A-Za-z]{2,}){0,2}"
_LIST_SEPARATOR = (r"\s*(?:,|;|/|\.\s+(?=or\b|maybe\b|perhaps\b)|\bor\b|\band\b|\bmaybe\b|\bperhaps\b)"
                   r"(?:\s*(?:\bor\b|\band\b|\bmaybe\b|\bperhaps\b)){0,2}\s*")
_NUMBER_LIST = re.compile(rf"({_LIST_NUMBER})(?:{_LIST_SEPARATOR}{_LIST_NUMBER})+\s*[.?!]*\s*", re.IGNORECASE)
# matched on a stripped line: "18", "- 18", "2. 18", "| 2 | 18 |" (a list item or a table row ending in a number)
_BARE_LINE = re.compile(r"(?:(?:\d{1,2}[.)]|[-*+•])\s+|\|(?:[^|\n]*\|)*)?\s*\$?\s*(-?\d+(?:\.\d+)?)\s*\$?\.?\s*\|?")


@dataclass(frozen=True)
class _Candidate:
    start: int
    end: int
    text: str | None  # None: a marker with no readable answer after it
    disowned: bool = False


# What a reader does not see as written: content that takes space but shows nothing (`\phantom`), text
# struck out (`\cancel{\boxed{5}}` disowns it), and what LaTeX or Markdown does not render at all.
HIDDEN_COMMAND = re.compile(r"\\(?:[hv]?phantom|[bx]?cancel|sout)\s*\{")
_UNRENDERED = re.compile(r"\\iffalse\b.*?(?:\\fi\b|$)|<!--.*?(?:-->|$)", re.DOTALL)


def has_hidden(text: str) -> bool:
    """Whether `remove_hidden` would remove anything from `text` (one scan, nothing rebuilt)."""
    return HIDDEN_COMMAND.search(text) is not None or "\\iffalse" in text or "<!--" in text


def remove_hidden(text: str, commands: re.Pattern = HIDDEN_COMMAND, limit: int = 50) -> str:
    """`text` without what the reader does not see: each of `commands` with its argument (a space in its
    place: `1\\phantom{0}8` shows "1 8"), and `\\iffalse ... \\fi` and `<!-- ... -->` blocks. At most `limit`
    commands are removed, so the cost stays linear in the text."""
    for _ in range(limit):
        m = commands.search(text)
        if not m:
            break
        close = matching_brace(text, m.end() - 1)
        text = text[: m.start()] + " " + (text[close + 1 :] if close >= 0 else "")
    return _UNRENDERED.sub(" ", text) if "\\iffalse" in text or "<!--" in text else text


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


def _box_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of the outermost boxes, in order, in one linear pass over the braces."""
    if "box" not in text:
        return []
    commands = list(_BOX_COMMAND.finditer(text))
    if not commands:
        return []
    opens: dict[int, int] = {}  # position of a box's `{` -> position of its command
    bare = []
    for m in commands[-_MAX_CANDIDATES:]:
        j = m.end()
        while j < len(text) and text[j].isspace():  # TeX skips spaces and a line break before an argument
            j += 1
        if j < len(text) and text[j] == "{":
            opens[j] = m.start()
        elif j < len(text) and (j > m.end() or text[j].isdigit()):  # `\boxed 5`, `\boxed5`: up to a space or `$`
            word = re.match(r"[^\s$]+", text[j : j + _MAX_ANSWER_CHARS])
            if word:
                bare.append((m.start(), j + word.end(), word.group(0)))
    closes: dict[int, int] = {}
    stack: list[int] = []
    first = min(opens) if opens else len(text)
    for m in _BRACE_TOKENS.finditer(text, first):
        token = m.group()
        if token == "{":
            stack.append(m.start())
        elif token == "}" and stack:
            j = stack.pop()
            if j in opens:
                closes[j] = m.start()
    spans = sorted([(opens[j], close + 1, text[j + 1 : close].strip()) for j, close in closes.items()] + bare)
    outermost, reach = [], -1
    for start, end, content in spans:
        if start >= reach:
            outermost.append((start, end, content))
            reach = end
    return outermost


def last_boxed(text: str) -> str | None:
    """Content of the last non-empty `\\boxed{...}` / `\\fbox{...}` (nested braces matched), or None."""
    for _, _, content in reversed(_box_spans(text)):
        if content:
            return content
    return None


def _strip_math_delimiters(s: str) -> str:
    s = s.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            return s[len(left) : len(s) - len(right)].strip()
    return s


def _answer_in_line(rest: str) -> str | None:
    """The answer at the start of `rest`: a math span, a number before an explanation, or the sentence."""
    rest = rest[:_MAX_ANSWER_CHARS].lstrip(" *_:|\t\n")  # "**Answer:** 12" in markdown, "| Answer | 12 |"
    line = rest.split("\n", 1)[0].strip()
    spans = list(_MATH_SPANS.finditer(line))
    if len(spans) == 1 or spans and not re.fullmatch(r"\s*[,;]?\s*(?:or|and)?\s*", line[spans[0].end() : spans[1].start()]):
        return _span_text(spans[0])
    if spans:  # "the answer is $2$ or $3$": the spans with what joins them, so that both are seen
        line = _MATH_SPANS.sub(lambda m: _span_text(m), line)
    line = re.split(r"\.\s+", line, maxsplit=1)[0]  # the first sentence: "12. Then we check..."
    line = line.rstrip(" .;*|").lstrip("*").strip()  # the full stop ("3." is 3 anyway), markdown bold, a table's bar
    # "12 because 3 x 4 = 12", "18, which is the total": the number, not the explanation after it
    number = _LEADING_NUMBER.match(line)
    if number and _EXPLANATION.match(line, number.end()):
        return number.group(0).strip()
    return line or None


def _span_text(m: re.Match) -> str:
    return next(g for g in m.groups() if g is not None).strip()


def _looks_like_answer(s: str) -> bool:
    """A phrase's text is an answer if it holds mathematics or is short: "To answer: first add the eggs"
    is prose, not an answer."""
    return bool(re.search(r"[\d\\$^=(]", s)) or len(s.split()) <= 3


def _phrase_candidates(text: str, boxes: list[tuple[int, int, str]]) -> list[_Candidate]:
    out: list[_Candidate] = []
    if not _may_hold(text, _PHRASE_WORDS):
        return out
    matches = list(_ANSWER_PHRASE.finditer(text))[-_MAX_PHRASES:]
    box_starts = [b[0] for b in boxes]
    inside = _inside_boxes(boxes)
    for k, m in enumerate(matches):
        if inside(m.start()):
            continue  # `\boxed{5 \text{ (the answer is 6)}}`: part of the box's content, judged with it
        before = text[max(0, m.start() - 20) : m.start()].lower().split()[-2:]
        if before and (before[-1] in _NOT_A_PHRASE or before[-1] in ("the", "our", "my") and before[0] in _NOT_A_PHRASE):
            continue
        line_end = text.find("\n", m.end(), m.end() + _PHRASE_LINE_CHARS)
        line_end = line_end if line_end >= 0 else min(len(text), m.end() + _PHRASE_LINE_CHARS)
        if k + 1 < len(matches) and matches[k + 1].start() < line_end and not re.search(
                r"[\d\\$]", text[m.end() : matches[k + 1].start()]):
            continue  # "Final Answer: The final answer is 5": the inner phrase holds the answer
        box_on_line = next((s for s in box_starts if m.end() <= s < line_end), None)
        if box_on_line is not None:
            if not text[m.end() : box_on_line].strip() or _LEADS_INTO_BOX.search(text, m.end(), box_on_line):
                continue  # "the answer is \boxed{5}", "our answer is $1+201 = \boxed{202}$": the box is the candidate
            line_end = box_on_line  # "the answer equals 6, hence \boxed{5}": the phrase's answer ends at the box
        rest = text[m.end() : line_end]
        negated = _NEGATED_PHRASE.match(rest)
        if negated:
            out.append(_Candidate(m.start(), m.end() + negated.end(), None, disowned=True))
            correction = _CORRECTED_TO.search(rest, negated.end())
            if correction:  # "the answer isn't 5, it's 6"
                answer = _answer_in_line(rest[correction.end() :])
                if answer:
                    out.append(_Candidate(m.end() + correction.start(), line_end, _strip_math_delimiters(answer)))
            continue
        answer = _answer_in_line(rest)
        if answer and (_OPENING_ONLY.fullmatch(answer) or _VERDICT_ONLY.fullmatch(answer)):
            continue  # "the answer is \[" (the display below holds it), "our answer is correct"
        if answer and _looks_like_answer(answer):
            found = rest.find(answer)
            end = m.end() + found + len(answer) if found >= 0 else m.end()
            out.append(_Candidate(m.start(), end, _strip_math_delimiters(last_boxed(answer) or answer)))
    return out


def _label_candidates(text: str, boxes: list[tuple[int, int, str]]) -> list[_Candidate]:
    """"Solution: 6", "Result: $6$", "Ans: 6" on a line of their own."""
    if not _may_hold(text, _LABEL_WORDS):
        return []
    inside = _inside_boxes(boxes)
    return [_Candidate(m.start(), m.end(), _strip_math_delimiters(m.group(1)))
            for m in list(_LABEL_LINE.finditer(text))[-_MAX_PHRASES:] if not inside(m.start())]


_PHRASE_WORDS = ("nswer", "NSWER", "Ans", "ans:", "ans.", "ans-", "ans ", "ANS")
_LABEL_WORDS = ("olution", "OLUTION", "esult", "ESULT", "Ans", "ans:", "ans.", "ANS", "inal", "INAL", "lternative",
                "LTERNATIVE")


def _may_hold(text: str, fragments: tuple[str, ...]) -> bool:
    """A cheap test (substring searches) before a pattern is run over the whole text."""
    return any(f in text for f in fragments)


def _inside_boxes(boxes: list[tuple[int, int, str]]):
    """A test of whether a position lies inside one of the (sorted, disjoint) box spans."""
    import bisect

    starts = [b[0] for b in boxes]

    def inside(position: int) -> bool:
        k = bisect.bisect_right(starts, position) - 1
        return k >= 0 and position < boxes[k][1]

    return inside


def _negated_before(window: str) -> bool:
    """"not \\boxed{5}", "isn't $\\boxed{5}", "cannot be equal to \\boxed{5}": a negation as the last words."""
    words = window.rstrip(" $:=\t\n").lower().split()[-4:]
    while words and words[-1] in ("be", "equal", "to", "equals", "exactly"):
        words.pop()
    return bool(words) and (words[-1] in _NEGATIONS or words[-1].endswith("n't"))


def _disowned_after(window: str) -> bool:
    """"\\boxed{24} is incorrect", "\\boxed{5} (wrong)", "\\boxed{5}, but that's wrong"."""
    low = window.lower()
    if not any(w in low for w in ("wrong", "incorrect", "false", "mistak", "invalid", "error", "not", "n't")):
        return False
    return _DISOWNED_AFTER.match(window) is not None


def _hash_candidates(text: str) -> list[_Candidate]:
    out = []
    if "####" not in text:
        return out
    for m in list(_HASHES.finditer(text))[-_MAX_CANDIDATES:]:
        end = text.find("\n", m.end(), m.end() + _MAX_ANSWER_CHARS)
        end = end if end >= 0 else min(len(text), m.end() + _MAX_ANSWER_CHARS)
        line = text[m.end() : end].strip()
        if line and not line.startswith("#"):
            out.append(_Candidate(m.start(), end, _strip_math_delimiters(line)))
    return out


def _box_candidates(text: str, boxes: list[tuple[int, int, str]]) -> list[_Candidate]:
    out = []
    for start, end, content in boxes:
        disowned = _negated_before(text[max(0, start - _WINDOW) : start]) or _disowned_after(text[end : end + _WINDOW])
        content = _unwrap_box(content)
        out.append(_Candidate(start, end, content or None, disowned))
    return out


def _unwrap_box(content: str) -> str:
    """`\\boxed{\\boxed{5}}` is 5: a box whose whole content is one box. A box holding a box with anything
    else around it (`\\boxed{6 \\boxed{5}}`, `\\boxed{\\text{not } \\boxed{5}}`) is kept whole: it is not one
    committed answer, and normalising refuses it (a box inside an answer)."""
    for _ in range(8):
        inner = _box_spans(content) if "box" in content else []
        if len(inner) != 1 or inner[0][0] != 0 or inner[0][1] != len(content):
            break
        content = inner[0][2]
    return content


def final_answers(response: str) -> tuple[str, ...]:
    """The answers `response` ends committed to, in order: one normally, several when it hedges,
    none when it gives no answer (or disowns every one it wrote)."""
    if not isinstance(response, str) or not response.strip():
        return ()
    response = remove_hidden(response)
    boxes = _box_spans(response)
    candidates = sorted(_box_candidates(response, boxes) + _phrase_candidates(response, boxes)
                        + _label_candidates(response, boxes) + _hash_candidates(response), key=lambda c: c.start)
    if not candidates:
        return _unmarked_answers(response)
    live: list[str] = []
    previous_end = 0
    for c in candidates:
        if live and _RETRACTION.search(response, previous_end, c.start):
            live = []
        if c.text and not c.disowned:
            live.append(c.text)
        previous_end = max(previous_end, c.end)
    after = response[previous_end : previous_end + _AFTER_FINAL]
    if live and after.strip(" \t\n.$)}]*"):
        withdrawal = _WITHDRAWAL.search(after)
        if withdrawal and (_CHECK.match(after, withdrawal.end()) or "check" in withdrawal.group(0).lower()):
            checked = after[withdrawal.end():]
            if not (_DISOWNING.search(checked) or _CORRECTED_TO.search(checked) or _OFFERING_IN_CHECK.search(checked)):
                withdrawal = None  # "\boxed{12}. Wait, let me verify: 3 rows of 4.": a check keeps the answer
        if withdrawal:  # "\boxed{5}. Wait, no: it's 6": withdrawn; what follows is the (unmarked) answer
            rest = response[previous_end + withdrawal.end() : previous_end + withdrawal.end() + _TAIL]
            if re.search(r"\d", rest):
                return _unmarked_answers(rest)
            if _DISOWNING.search(after, withdrawal.start()):  # "\boxed{5}. Wait, that's wrong.": no answer
                return ()
            # "\boxed{72}. Wait, let me verify: yes, that's right.": a check, not a withdrawal
        line = after.split("\n", 1)[0]
        approximation = _APPROXIMATION_AFTER.match(line, _RIGHT_AFTER.match(line).end())
        if approximation:  # `\\boxed{\\frac13} \\approx 0.9`: the decimal is the answer's, and must be near it
            live[-1] = f"{live[-1]} \\approx {approximation.group(1)}"
        unit = _UNIT_OUTSIDE.match(line)
        if unit:  # "$\\boxed{5.4}$ dollars": the unit the answer is in, compared with the reference's
            live[-1] = f"{live[-1]} {unit.group(1)}"
        hedge = _HEDGE_OUTSIDE.match(line)
        if hedge:  # "$5$ at most": the word qualifies the answer as it would inside the box
            live[-1] = f"{live[-1]} \\text{{ {hedge.group(1)}}}"
        live.extend(_answers_after(response, previous_end))
    return tuple(dict.fromkeys(live))


def _answers_after(response: str, end: int) -> list[str]:
    """Other answers offered after the final one, with no marker of their own:
    - right after it on its line, joined by anything or nothing (`_value_right_after`): `\\boxed{5}, 6`,
      `\\boxed{5} (or 6)`, `\\boxed{5} \\text{ or } 6`, `\\boxed{5} \\quad 6`, `\\boxed{Evelyn} or Bob`; or within
      `_AFTER_FINAL` characters after "or maybe", "might be", "alternatively";
    - on a line of its own after it, behind at most two label words (`_VALUE_LINE`): "> 6", "P.S. D";
    - under a condition (`_CONDITIONAL_VALUE`): "(6 if zero counts)";
    - anywhere later (the next `_TAIL` characters, and the response's last `_TAIL`), in a sentence that offers it
      (`_OFFERING`: "also possible", "also accept", "might also be", "close second", "another answer", "either",
      `\\therefore`): "\\boxed{5}, though 6 is also possible", "Also possible: \\(6\\)", "Bob is also possible";
    - in a code block or a table row after it.
    Each is the sentence's math span (its value after the last `=`), its first number or choice letter, or
    its one word; one that equals the final answer changes nothing, since every final answer must equal the
    reference. An equation that states a fact (`_statement`) is not a value."""
    after = response[end : end + _TAIL]
    if len(response) - end > _TAIL:
        after += "\n" + response[-_TAIL:]
    after = _DIAGRAM.sub("", after)  # an Asymptote figure after the answer is drawing code, not values
    out = []
    other = _value_right_after(after)
    if other:
        out.append(other)
    alternative = _ALTERNATIVE.search(after, 0, _AFTER_FINAL)
    if alternative:  # "\\boxed{5}; it might also be 6", "or maybe 6"
        other = _answer_in_line(after[alternative.end() :])
        if other and len(other) <= 40 and _VALUE_START.match(other) and not _statement(other):
            out.append(_trimmed(other))
    for block in _CODE_BLOCK.finditer(after):
        value = _value_in(block.group(1))
        if value:
            out.append(value)
    for line in after.split("\n")[1:]:  # a line after the final answer's that is just a value: "> 6", "P.S. 6"
        line = _TEXT_WRAPPER.sub(r"\1", line.strip())
        bare = (_VALUE_LINE.fullmatch(line) or _MARKED_VALUE_LINE.fullmatch(line)) if len(line) <= _VALUE_LINE_CHARS else None
        if bare:
            out.append(_trimmed(bare.group(1)))
    for piece in _SENTENCE_END.split(after):
        conditional = _CONDITIONAL_VALUE.search(piece)
        if conditional:  # "(6 if you count zero)", "If zero counts, it's 6.", "Counting zero: 6."
            out.append(_strip_math_delimiters(next(g for g in conditional.groups() if g)))
            continue
        offering = _OFFERING.search(piece)
        if offering or piece.lstrip().startswith(("|", "`")) or "```" in piece:
            value = _value_in(piece) or (_offered_word(piece[: offering.start()]) if offering else None)
            if value:
                out.append(value)
    return out[:_MAX_CANDIDATES]


def _value_right_after(after: str) -> str | None:
    """The value joined to the final answer on its line (`_RIGHT_AFTER`), or None: a value-like start
    right after it with or without a joiner ("\\boxed{5}6", "\\boxed{5} \\quad 6"), or one word after a joiner."""
    line = after.split("\n", 1)[0][:_AFTER_FINAL].replace("\u00a0", " ")
    joined = _RIGHT_AFTER.match(line)
    unit = (_UNIT_AFTER.match(line, joined.end()) if not joined.group(1)
            else re.compile(r"[A-Za-z]+").match(line, joined.end()) if joined.group(1) == "/" else None)
    if unit:  # "$\\boxed{18}$ eggs, or 19", "\\boxed{18}/hour (or 19)": the answer's unit, then the joiner
        again = _RIGHT_AFTER.match(line, unit.end())
        joined = again if again.group(1) or joined.group(1) == "/" else joined  # `/hour` alone is a unit
    rest = line[joined.end() :]
    if _APPROXIMATION_AFTER.match(rest):
        return None  # `\\boxed{11\\sqrt2} \\approx 15.56`: a decimal for the reader, not another answer
    if _VALUE_START.match(rest):
        other = _answer_in_line(rest)
        if not other or _statement(other) or (not joined.group(1) and re.search(r"[A-Za-z]{2,}\s+[A-Za-z]", other)):
            return None  # "\\boxed{12} (3 rows of 4)": words after a value with no joiner are an explanation
        return _trimmed(other)
    word = _ONE_WORD.match(rest)
    if joined.group(1) and word and word.group(1).lower() not in _PROSE_WORDS \
            and not ("=" in line[: joined.end()] and len(word.group(1)) == 1):  # `\\boxed{17} = x` names it
        return word.group(1)
    return None


def _statement(text: str) -> bool:
    """An equation that states a fact ("$\\sin 18^\\circ = \\frac{\\sqrt{5}-1}{4}$", `3(1 + r/10)^x = 7`), not a value
    (`x = 6` names one)."""
    text = _strip_math_delimiters(text)
    return "=" in text and not _SINGLE_VARIABLE.fullmatch(text.split("=", 1)[0])


def _trimmed(value: str) -> str:
    """A value taken from running text without its math delimiters and the brackets closing around it
    ("(or 6)", "(12 apples)")."""
    value = _strip_math_delimiters(value[:_MAX_ANSWER_CHARS])
    while value and value[-1] in ")]}" and value.count(value[-1]) > value.count({")": "(", "]": "[", "}": "{"}[value[-1]]):
        value = value[:-1].rstrip()
    return value


def _value_in(piece: str) -> str | None:
    """The value a sentence states: its first math span (after its last `=`), else its first choice letter or number."""
    span = _MATH_SPANS.search(piece)
    if span:
        content = _OFFERING_COMMAND.sub("", _span_text(span)).strip()
        if "=" in content and not re.search(r"[<>]|\\[lg]e|\\neq", content):
            content = content.rsplit("=", 1)[1].strip()
        if re.search(r"[\d\\^_=+\-*/()]", content) or re.fullmatch(r"[A-Za-z]", content):
            return content  # mathematics, not prose caught between two spans' dollar signs
    choice = re.search(r"\(([A-E])\)|(?<![A-Za-z'])([A-E])(?![A-Za-z'])", piece)
    number = _NUMBER.search(piece)
    if choice and (number is None or choice.start() < number.start()):
        return f"({choice.group(1) or choice.group(2)})"
    return number.group(0) if number else None


def _offered_word(before: str) -> str | None:
    """The one word a sentence offers before its offering phrase ("Bob is also possible", "odd might also
    be right"), or None."""
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", before)
    while words and words[-1].lower() in ("is", "was", "are", "be", "would", "could", "might", "may", "also"):
        words.pop()
    while words and words[0].lower() in ("but", "though", "although", "however", "and", "or", "so", "yet"):
        words.pop(0)
    return words[0] if len(words) == 1 else None


def extract_answer(response: str) -> str | None:
    """The final answer written in `response`, in the model's notation: the last one it commits to."""
    answers = final_answers(response)
    return answers[-1] if answers else None


def _unmarked_answers(text: str) -> tuple[str, ...]:
    """With no marker: the last expression or number; several when the ending lists candidates."""
    window = text[-_TAIL:]
    lines = [line for line in window.rstrip().split("\n") if line.strip()][-6:]
    bare = []
    for line in reversed(lines):  # "12\n15\n18": trailing lines that are each just a number
        m = _BARE_LINE.fullmatch(line.strip())
        if not m:
            break
        bare.append(m.group(1))
    if len(bare) >= 2:  # one answer listing them all: the comparison refuses a list for one value
        return (", ".join(reversed(bare)),)
    if lines:
        last_line = lines[-1][-500:]
        first_digit = re.search(r"\$?(?:[A-Za-z]\s*=\s*)?-?\d", last_line)
        if first_digit and _NUMBER_LIST.fullmatch(last_line, first_digit.start()):
            return (_MATH_SPANS.sub(lambda m: _span_text(m), last_line[first_digit.start() :]).rstrip(" .?!"),)
        sentence = re.split(r"(?<=[.!?])\s+", lines[-1].strip())[-1][-500:]
        numbers = list(dict.fromkeys(m.group(0) for m in _NUMBER.finditer(sentence)))
        if len(numbers) > 1 and _UNMARKED_CUE.search(sentence):  # "It is 17 (or possibly 18)."
            return tuple(numbers[:_MAX_CANDIDATES])
    answer = _last_math_or_number(text)
    return (answer,) if answer else ()


def _last_math_or_number(text: str) -> str | None:
    """The last `$...$`-style span or bare number, whichever ends later in the text."""
    window = text[-_TAIL:]
    spans = list(_MATH_SPANS.finditer(window))
    numbers = list(_NUMBER.finditer(window))
    if not spans and not numbers and len(text) > _TAIL:
        window = text
        numbers = list(re.finditer(r"-?\d+", text))  # rare: the only number sits far from the end
    span = spans[-1] if spans else None
    number = numbers[-1] if numbers else None
    last = span if span is not None and (number is None or span.end() >= number.end()) else number
    if last is not None and _negated_before(window[max(0, last.start() - _WINDOW) : last.start()]):
        return None  # "It can't be 5.": no answer, not 5
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
