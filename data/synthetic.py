"""Built-in task families, generated from a seed: `math`, `code`, and `calc` for tool use.

Each family yields task records (`data/records.py`) with a worked solution in `meta["solution"]` (what `sft` trains
on). The held-out split is decided by a hash of the prompt, so train and held-out never share a prompt
whatever the seed or the sizes asked for.

With `slip_rate` above 0, that share of the math training solutions carries an arithmetic slip in its last
step (the boxed answer follows the slip), as worked solutions from an unverified teacher do; the task's
`reference` stays right and `meta["solution_correct"]` says which solutions slipped. Imitating such data
teaches the slips along with the method; a verifier's reward is what can take them out.

`calc` is arithmetic the tiny model cannot do in its head (products of three-digit numbers, sums of four
four-digit numbers), graded by the math verifier. CALC_TOOL_SHARE of its worked solutions call the Python
tool (`--tools python`, reasoner/generation/tools.py) and copy its output into the answer; the others
state the right result in one step, as a teacher who knows it would, which a small model can only imitate
by guessing. RL with the tool is what can teach it which of the two pays.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Callable, Iterator
from fractions import Fraction

from data.records import Task

HELDOUT_PERCENT = 20  # share of the prompt space reserved for held-out tasks


def is_heldout(prompt: str) -> bool:
    return int(hashlib.sha1(prompt.encode()).hexdigest()[:8], 16) % 100 < HELDOUT_PERCENT


# ----------------------------------------------------------------------------------------------- math

def _frac_latex(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def _frac_forms(q: Fraction, rng: random.Random) -> str:
    """One of the forms a fraction answer may come back in: `3/4`, `0.75` or `\\frac{3}{4}`."""
    forms = [_frac_latex(q), f"{q.numerator}/{q.denominator}" if q.denominator != 1 else str(q.numerator)]
    den = q.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    if den == 1:  # terminating decimal
        forms.append(format(float(q), "g"))
    return rng.choice(forms)


def math_addition(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    tens, ones = a - a % 10 + b - b % 10, a % 10 + b % 10
    work = f"{a} + {b} = {a - a % 10} + {b - b % 10} + {a % 10} + {b % 10} = {tens} + {ones} = {a + b}."
    return f"What is {a} + {b}?", str(a + b), f"{work} \\boxed{{{a + b}}}"


def math_multiplication(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.randint(2, 9), rng.randint(11, 99)
    tens, ones = b - b % 10, b % 10
    work = f"{a} * {b} = {a} * {tens} + {a} * {ones} = {a * tens} + {a * ones} = {a * b}."
    return f"What is {a} * {b}?", str(a * b), f"{work} \\boxed{{{a * b}}}"


def math_fraction(rng: random.Random) -> tuple[str, str, str]:
    p, q = Fraction(rng.randint(1, 7), rng.randint(2, 8)), Fraction(rng.randint(1, 7), rng.randint(2, 8))
    total = p + q
    common = p.denominator * q.denominator // math.gcd(p.denominator, q.denominator)
    top = p.numerator * (common // p.denominator) + q.numerator * (common // q.denominator)
    steps = [f"{p} + {q}", f"{p.numerator * (common // p.denominator)}/{common} + "
             f"{q.numerator * (common // q.denominator)}/{common}", f"{top}/{common}"]
    if Fraction(top, common).denominator != common:
        steps.append(str(total))
    answer = _frac_forms(total, rng)
    return f"Add the fractions {p} + {q}.", _frac_latex(total), f"{' = '.join(steps)}. \\boxed{{{answer}}}"


def math_linear(rng: random.Random) -> tuple[str, str, str]:
    a, x, b = rng.randint(2, 9), rng.randint(-9, 9), rng.randint(1, 20)
    c = a * x + b
    work = f"{a}x = {c} - {b} = {c - b}, so x = {c - b}/{a} = {x}."
    return f"Solve for x: {a}x + {b} = {c}.", str(x), f"{work} \\boxed{{{x}}}"


FINAL_STEP = re.compile(r"= (-?\d+(?:/\d+)?)\. \\boxed\{.*\}$")  # the last result and the box after it


def with_slip(solution: str, rng: random.Random) -> str:
    """The solution with its last result off by a slip (+-1 or +-10, or +-1 in a fraction's numerator) and
    the boxed answer following it."""
    match = FINAL_STEP.search(solution)
    if match is None:
        raise ValueError(f"no final step to slip in {solution!r}")
    value = Fraction(match.group(1))
    if value.denominator == 1:
        slipped = value + rng.choice([-10, -1, 1, 10])
    else:
        slipped = value + Fraction(rng.choice([-1, 1]), value.denominator)
    text = str(slipped)
    return f"{solution[:match.start()]}= {text}. \\boxed{{{text}}}"


MATH_KINDS: dict[str, Callable[[random.Random], tuple[str, str, str]]] = {
    "addition": math_addition,
    "multiplication": math_multiplication,
    "fraction": math_fraction,
    "linear": math_linear,
}

# ----------------------------------------------------------------------------------------------- code

FUNCTION_NAMES = ["f", "g", "h", "calc", "solve", "compute", "transform", "apply", "step", "value",
                  "shift", "scale", "convert", "process", "update", "result", "answer", "helper", "op",
                  "run", "get", "make", "fn", "check", "evaluate", "map_value", "adjust", "rule", "task",
                  "work", "output", "change"]

# description with {k}, argument name, body with {k}, the same body as a Python function of k, input maker
CODE_KINDS: dict[str, tuple[str, str, str, Callable, Callable[[random.Random], object]]] = {
    "add": ("returns x plus {k}", "x", "x + {k}", lambda k: lambda x: x + k, lambda r: r.randint(-50, 50)),
    "subtract": ("returns x minus {k}", "x", "x - {k}", lambda k: lambda x: x - k, lambda r: r.randint(-50, 50)),
    "multiply": ("returns x times {k}", "x", "x * {k}", lambda k: lambda x: x * k, lambda r: r.randint(-20, 20)),
    "divisible": ("returns True if n is divisible by {k}, else False", "n", "n % {k} == 0",
                  lambda k: lambda n: n % k == 0, lambda r: r.randint(0, 60)),
    "square_plus": ("returns the square of x plus {k}", "x", "x * x + {k}", lambda k: lambda x: x * x + k,
                    lambda r: r.randint(-9, 9)),
    "sum_plus": ("returns the sum of the list xs plus {k}", "xs", "sum(xs) + {k}", lambda k: lambda xs: sum(xs) + k,
                 lambda r: [r.randint(-9, 9) for _ in range(r.randint(1, 5))]),
    "first_k": ("returns the first {k} characters of the string s", "s", "s[:{k}]", lambda k: lambda s: s[:k],
                lambda r: "".join(r.choice("abcdefgh") for _ in range(r.randint(4, 12)))),
    "repeat": ("returns the string s repeated {k} times", "s", "s * {k}", lambda k: lambda s: s * k,
               lambda r: "".join(r.choice("xyz") for _ in range(r.randint(1, 3)))),
}


def code_task(rng: random.Random, kind: str) -> tuple[str, dict, str]:
    description, arg, body, make_fn, make_input = CODE_KINDS[kind]
    name, k = rng.choice(FUNCTION_NAMES), rng.randint(2, 9)
    fn = make_fn(k)
    inputs: list = []
    for _ in range(20):  # three distinct inputs where the input space allows
        value = make_input(rng)
        if value not in inputs:
            inputs.append(value)
        if len(inputs) == 3:
            break
    prompt = f"Write a Python function {name}({arg}) that {description.format(k=k)}."
    tests = [f"assert {name}({v!r}) == {fn(v)!r}" for v in inputs]
    solution = f"```python\ndef {name}({arg}):\n    return {body.format(k=k)}\n```"
    return prompt, {"tests": tests}, solution


# ----------------------------------------------------------------------------------------------- calc

CALC_TOOL_SHARE = 0.5  # share of the calc training solutions that call the tool


def calc_product(rng: random.Random) -> tuple[str, str, int]:
    a, b = rng.randint(100, 999), rng.randint(100, 999)
    return f"What is {a} * {b}?", f"{a} * {b}", a * b


def calc_sum(rng: random.Random) -> tuple[str, str, int]:
    terms = [rng.randint(1000, 9999) for _ in range(4)]
    expression = " + ".join(map(str, terms))
    return f"What is {expression}?", expression, sum(terms)


# prompt, the expression as Python, its value
CALC_KINDS: dict[str, Callable[[random.Random], tuple[str, str, int]]] = {"product": calc_product, "sum": calc_sum}


def calc_solution(expression: str, value: int, uses_tool: bool) -> str:
    """A worked solution: a tool call whose output is copied into the answer, or the answer in one step.
    The output block is written as the tool writes it (`tools.output_block`)."""
    if uses_tool:
        return f"```python\nprint({expression})\n```\n```output\n{value}\n```\n\\boxed{{{value}}}"
    return f"{expression} = {value}. \\boxed{{{value}}}"


# ----------------------------------------------------------------------------------------------- split

def generate(family: str, split: str, count: int, seed: int = 0, slip_rate: float = 0.0) -> list[Task]:
    """`count` distinct tasks of one family from one split ("train" or "heldout"), reproducible from `seed`;
    `slip_rate` of the math training solutions carry a slip in their last step (see the module's text)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    want_heldout = split == "heldout"
    rng = random.Random(f"{family}/{split}/{seed}")
    kinds = list({"math": MATH_KINDS, "code": CODE_KINDS, "calc": CALC_KINDS}.get(family, ()))
    if not kinds:
        raise ValueError(f"unknown task family {family!r}; built-in families: math, code, calc")
    tasks: list[Task] = []
    seen: set[str] = set()
    attempts = 0
    while len(tasks) < count:
        attempts += 1
        if attempts > 200 * count + 10_000:
            raise ValueError(f"could only make {len(tasks)} distinct {family}/{split} tasks, {count} asked")
        kind = kinds[attempts % len(kinds)]  # a kind whose prompts run out only wastes attempts
        if family == "math":
            prompt, reference, solution = MATH_KINDS[kind](rng)
            verifier = "math"
        elif family == "calc":
            prompt, expression, value = CALC_KINDS[kind](rng)
            uses_tool = want_heldout or random.Random(f"tool/{seed}/{prompt}").random() < CALC_TOOL_SHARE
            reference, solution, verifier = str(value), calc_solution(expression, value, uses_tool), "math"
        else:
            prompt, reference, solution = code_task(rng, kind)
            verifier = "code"
        if prompt in seen or is_heldout(prompt) != want_heldout:
            continue
        seen.add(prompt)
        meta = {"source": "synthetic", "family": family, "kind": kind, "split": split, "solution": solution}
        if family == "calc":
            meta["solution_uses_tool"] = uses_tool
        if family == "math" and not want_heldout and slip_rate > 0:
            slips = random.Random(f"slip/{seed}/{prompt}")
            meta["solution_correct"] = slips.random() >= slip_rate
            if not meta["solution_correct"]:
                meta["solution"] = with_slip(solution, slips)
        tasks.append(Task(f"{family}/{split}/{len(tasks)}", prompt, verifier, reference, meta))
    return tasks


def corpus(seed: int = 0) -> Iterator[str]:
    """Text the built-in tokenizer is trained on: prompts and solutions of both families."""
    for family in ("math", "code"):
        for split, count in (("train", 500), ("heldout", 100)):
            for task in generate(family, split, count, seed):
                yield task.prompt
                yield task.meta["solution"]
