"""Our `math` verifier against HuggingFace's math-verify, on the same labelled pairs, in one run.

    pip install math-verify        # bench-only dependency
    python benchmarks/math_verifier.py [--limit N] [--show-errors 20]

The pairs: every GSM8K test answer and MATH-500 answer (from ../shared/data) rewritten into forms
that keep the value (reformatted, converted to a decimal, boxed or not, ...) and forms that change it
(one digit changed, negated, elements swapped, ...); each data set's own worked solution as a long
response, as is and with its final answer changed; plus the hand cases of tests/math_cases.py. The
label of each pair comes from how it was built, not from either verifier.

Reward hacking (tests/math_hacking_cases.py): the hedged, approximated and reworded responses a policy
tries, every one labelled wrong, and the right answers an earlier version refused. The table counts
how many hacks each verifier accepts, and its accuracy on those right answers. Our verifier also
answers the long degenerate responses of tests/test_math_hacking.py, each call timed in the caller.

Both verifiers are timed one call at a time, in a single process each (ours in this process, whose
workers it uses for sympy; math-verify in a child process, so that an input it cannot interrupt
(`10^{7}!`) is cut off at --hang-limit seconds and counted as a wrong answer taking that long).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from math_cases import all_cases, as_response  # noqa: E402
from math_hacking_cases import HACKS, RIGHT  # noqa: E402
from verifiers.math_answer import MathVerifier  # noqa: E402
from verifiers.math_numbers import parse_rational  # noqa: E402
from verifiers.math_parse import split_top_level  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


# ---- building labelled pairs -------------------------------------------------------------------

def boxed(answer: str) -> str:
    return f"So the final answer is $\\boxed{{{answer}}}$."


def equivalent_forms(ref: str) -> list[tuple[str, str]]:
    """(transformation, response) pairs whose answer has the reference's value."""
    forms = [("boxed as is", boxed(ref)), ("final answer phrase", f"The final answer is ${ref}$.")]
    if "\\frac" in ref:
        forms.append(("dfrac", boxed(ref.replace("\\frac", "\\dfrac"))))
    if " " in ref:
        forms.append(("spaces removed", boxed(ref.replace(" ", ""))))
    value = _rational_value(ref)
    if "," in ref and value is None:
        forms.append(("space after commas", boxed(re.sub(r",\s*", ", ", ref))))
    if ref.startswith("(") and ref.endswith(")") or ref.startswith("[") and ref.endswith("]"):
        forms.append(("left/right", boxed(f"\\left{ref[0]}{ref[1:-1]}\\right{ref[-1]}")))
    if value is not None:
        if value.denominator == 1:
            n = value.numerator
            forms += [("integer as decimal", boxed(f"{n}.0")), ("gsm8k hashes", f"Adding up, we get it.\n#### {n}"),
                      ("with units", boxed(f"{n} \\text{{ units}}"))]
            if abs(n) >= 1000:
                forms.append(("thousands separators", boxed(f"{n:,}")))
        else:
            forms.append(("a/b", boxed(f"{value.numerator}/{value.denominator}")))
            decimal = _terminating_decimal(value)
            if decimal:
                forms.append(("as a decimal", boxed(decimal)))
    variable = next((v for v in "xyznk" if v not in ref), None)
    if variable and not re.search(r"[=<>,]|\\text|\\in|\\begin|\\le|\\ge|\\mbox|_", ref):
        forms.append(("as x = value", boxed(f"{variable} = {ref}")))
    forms.append(("answer line", f"The computation is done.\nAnswer: {ref}"))
    changed = _change_digit(ref, first=True)
    if changed:
        forms.append(("wrong box then right box", f"At first I got $\\boxed{{{changed}}}$, but correcting a sign, $\\boxed{{{ref}}}$."))
    if value is not None and value.denominator == 1 and value >= 0:
        forms.append(("currency", boxed(f"\\${value.numerator}")))
    terms = split_top_level(ref, ("+",))
    if len(terms) == 2 and all(terms) and not any(c in ref for c in ("-", "\\pm", "=", ",")):
        forms.append(("sum reordered", boxed(f"{terms[1]} + {terms[0]}")))
    return forms


def _change_digit(ref: str, first: bool) -> str | None:
    """`ref` with its first (or last) digit increased by one, modulo 10; None if it has no digit."""
    digits = [i for i, c in enumerate(ref) if c.isdigit()]
    if not digits:
        return None
    i = digits[0] if first else digits[-1]
    return ref[:i] + str((int(ref[i]) + 1) % 10) + ref[i + 1 :]


def _rational_value(ref: str) -> Fraction | None:
    """The reference's value if it is a plain number or fraction (`10,\\!080`, `\\frac{3}{4}`), else None."""
    s = re.sub(r",\\!\s*|\{,\}", ",", ref).replace("\\$", "").strip()
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return None if "," in s else parse_rational(s)


def _terminating_decimal(value: Fraction) -> str | None:
    d = value.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d != 1:
        return None
    digits = 0
    while (value * 10**digits).denominator != 1:
        digits += 1
    return f"{float(value):.{digits}f}" if digits <= 12 else None


def different_forms(ref: str) -> list[tuple[str, str]]:
    """(transformation, response) pairs whose answer has a different value from the reference."""
    forms = []
    first, last = _change_digit(ref, first=True), _change_digit(ref, first=False)
    if first:
        forms.append(("first digit changed", boxed(first)))
        forms.append(("right box then wrong box", f"I got $\\boxed{{{ref}}}$; on reflection the answer is $\\boxed{{{first}}}$."))
    if last and last != first and not re.search(r"\^\{?\d\}?$", ref):  # not a unit's exponent (cm^2)
        forms.append(("last digit changed", boxed(last)))
    value = _rational_value(ref)
    if value is not None and value != 0:
        forms.append(("negated", boxed(str(-value) if value.denominator == 1 else f"-{ref}" if not ref.startswith("-") else ref[1:])))
        forms.append(("off by one", boxed(str(value + 1) if value.denominator == 1 else f"{ref}+1")))
    if ref.startswith("(") and ref.endswith(")"):
        parts = split_top_level(ref[1:-1], (",",))
        if len(parts) == 2 and parts[0] != parts[1]:
            forms.append(("elements swapped", boxed(f"({parts[1]},{parts[0]})")))
    if re.fullmatch(r"[(\[].*,.*[)\]]", ref) and "\\cup" not in ref and "\\infty" not in ref:
        flipped = {"(": "[", "[": "(", ")": "]", "]": ")"}
        forms.append(("bracket flipped", boxed(flipped[ref[0]] + ref[1:])))
    return forms


def solution_forms(source: str, ref: str, solution: str) -> list[tuple[str, str, bool]]:
    """The data set's own worked solution as the response (label True), and the same solution with
    its final answer's first digit changed (label False): long, realistic responses."""
    forms = [("worked solution", solution, True)]
    changed = _change_digit(ref, first=True)
    if changed:
        if source == "gsm8k":
            cut = solution.rfind("####")
            wrong = solution[:cut] + "#### " + changed
        else:
            cut = solution.rfind("\\boxed{")
            wrong = solution[:cut] + "\\boxed{" + changed + "}." if cut >= 0 else None
        if wrong:
            forms.append(("worked solution, final answer changed", wrong, False))
    return forms


def labelled_pairs(limit: int | None = None) -> list[dict]:
    pairs = []
    sources = []
    gsm = DATA / "gsm8k_test.jsonl"
    math500 = DATA / "math500_test.jsonl"
    if gsm.exists():
        rows = [json.loads(line) for line in gsm.open()]
        sources.append(("gsm8k", [(r["answer"].split("####")[-1].strip(), r["answer"]) for r in rows]))
    if math500.exists():
        rows = [json.loads(line) for line in math500.open()]
        sources.append(("math500", [(r["answer"], r["solution"]) for r in rows]))
    for source, items in sources:
        for ref, solution in items[:limit]:
            seen = set()
            forms = [(how, response, True) for how, response in equivalent_forms(ref)]
            forms += [(how, response, False) for how, response in different_forms(ref)]
            forms += solution_forms(source, ref, solution)
            for how, response, label in forms:
                if response not in seen:
                    seen.add(response)
                    pairs.append({"source": source, "how": how, "response": response, "reference": ref, "label": label})
    for category, answer, reference, expected in all_cases():
        pairs.append({"source": "hand", "how": category, "response": as_response(category, answer),
                      "reference": reference, "label": expected})
    for kind, response, reference in HACKS:
        pairs.append({"source": "hacking", "how": kind, "response": response, "reference": reference, "label": False})
    for kind, response, reference in RIGHT:
        pairs.append({"source": "right", "how": kind, "response": response, "reference": reference, "label": True})
    return pairs


# ---- running the two verifiers -----------------------------------------------------------------

def run_ours(pairs: list[dict]) -> list[tuple[bool, float]]:
    verifier = MathVerifier()
    verifier.verify("\\boxed{\\sqrt{2}}", "\\sqrt{2}")  # start the workers, as a training run would
    out = []
    for p in pairs:
        start = time.perf_counter()
        verdict = verifier.verify(p["response"], p["reference"])
        out.append((verdict.correct, time.perf_counter() - start))
    return out


def _math_verify_child(pairs: list[dict], start: int, conn) -> None:
    """Runs math-verify as its users do, one pair at a time, reporting (index, correct, seconds)."""
    logging.disable(logging.CRITICAL)
    from math_verify import parse, verify

    parse("$1$"), verify(parse("$1$"), parse("$1$"))  # import-time and first-call costs are not per call
    for i in range(start, len(pairs)):
        p = pairs[i]
        t = time.perf_counter()
        try:
            correct = bool(verify(parse(f"${p['reference']}$"), parse(p["response"])))
        except Exception:  # noqa: BLE001  an exception is a wrong verdict for the benchmark
            correct = False
        conn.send((i, correct, time.perf_counter() - t))
    conn.send(None)


def run_math_verify(pairs: list[dict], hang_limit: float) -> list[tuple[bool, float]]:
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    out: list = [None] * len(pairs)
    start = 0
    while start < len(pairs):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_math_verify_child, args=(pairs, start, child), daemon=True)
        proc.start()
        child.close()
        while True:
            if not parent.poll(hang_limit + (30 if start == 0 or out[start - 1] is None else 0)):
                i = next(j for j in range(start, len(pairs)) if out[j] is None)
                out[i] = (False, hang_limit)
                proc.kill()
                proc.join()
                start = i + 1
                break
            msg = parent.recv()
            if msg is None:
                proc.join()
                start = len(pairs)
                break
            i, correct, seconds = msg
            out[i] = (correct, seconds)
    return out


# ---- report ------------------------------------------------------------------------------------

def summarise(name: str, pairs: list[dict], results: list[tuple[bool, float]]) -> dict:
    right = [r[0] == p["label"] for p, r in zip(pairs, results)]
    times = sorted(r[1] for r in results)
    by_source = {}
    for source in ("gsm8k", "math500", "hand", "right"):
        idx = [i for i, p in enumerate(pairs) if p["source"] == source]
        if idx:
            by_source[source] = sum(right[i] for i in idx) / len(idx)
            by_source[f"{source}_ms"] = 1000 * sum(results[i][1] for i in idx) / len(idx)
    hacks = [i for i, p in enumerate(pairs) if p["source"] == "hacking"]
    by_source["hacks_accepted"] = sum(results[i][0] for i in hacks)
    by_source["hacks"] = len(hacks)
    eq = [right[i] for i, p in enumerate(pairs) if p["label"]]
    ne = [right[i] for i, p in enumerate(pairs) if not p["label"]]
    return {
        "name": name, "accuracy": sum(right) / len(right), "equivalent": sum(eq) / len(eq),
        "different": sum(ne) / len(ne), **by_source, "total_s": sum(times), "mean_ms": 1000 * sum(times) / len(times),
        "median_ms": 1000 * statistics.median(times), "p99_ms": 1000 * times[int(0.99 * (len(times) - 1))],
        "max_ms": 1000 * times[-1],
    }


def print_table(rows: list[dict], n: int) -> None:
    cols = [("accuracy", "accuracy", "{:.4f}"), ("equivalent", "recall(eq)", "{:.4f}"), ("different", "reject(ne)", "{:.4f}"),
            ("gsm8k", "gsm8k", "{:.4f}"), ("math500", "math500", "{:.4f}"), ("hand", "hand", "{:.4f}"),
            ("hacks_accepted", "hacks ok'd", "{}"), ("right", "right(hack)", "{:.4f}"),
            ("gsm8k_ms", "gsm8k ms", "{:.3f}"), ("math500_ms", "math500 ms", "{:.3f}"), ("hand_ms", "hand ms", "{:.2f}"),
            ("mean_ms", "mean ms", "{:.3f}"), ("median_ms", "median ms", "{:.3f}"), ("p99_ms", "p99 ms", "{:.1f}"),
            ("max_ms", "max ms", "{:.0f}"), ("total_s", "total s", "{:.1f}")]
    print(f"{n} labelled pairs, single calls, one process each; 'hacks ok'd' counts the reward-hacking "
          f"responses accepted (of {rows[0]['hacks']}), 'right(hack)' is accuracy on the right answers beside them\n")
    print(f"{'verifier':<14}" + "".join(f"{title:>12}" for _, title, _ in cols))
    for row in rows:
        print(f"{row['name']:<14}" + "".join(f"{fmt.format(row[key]) if key in row else '-':>12}" for key, _, fmt in cols))


def print_breakdown(pairs: list[dict], ours: list, theirs: list) -> None:
    """Accuracy per transformation (or hand-case category), where the two verifiers differ."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, p in enumerate(pairs):
        groups.setdefault((p["source"], p["how"]), []).append(i)
    lines = []
    for (source, how), idx in sorted(groups.items()):
        a = sum(ours[i][0] == pairs[i]["label"] for i in idx)
        b = sum(theirs[i][0] == pairs[i]["label"] for i in idx)
        if a != b:
            lines.append(f"  {source + '/' + how:<44}{len(idx):>7}{a:>8}{b:>13}")
    if lines:
        print(f"\nwhere they differ (pairs right out of n):\n  {'source/transformation':<44}{'n':>7}{'ours':>8}{'math-verify':>13}")
        print("\n".join(lines))


def time_degenerate_inputs() -> tuple[int, float, str]:
    """Our verifier on the long degenerate responses of the fuzz test, each call timed in the caller."""
    from test_math_hacking import degenerate_responses

    verifier = MathVerifier()
    slowest, which = 0.0, ""
    responses = degenerate_responses()
    for response in responses:
        start = time.perf_counter()
        verifier.verify(response, "5")
        seconds = time.perf_counter() - start
        if seconds > slowest:
            slowest, which = seconds, response[:30]
    return len(responses), slowest, which


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="use only the first N answers of each data set")
    parser.add_argument("--hang-limit", type=float, default=20.0, help="seconds before a math-verify call is cut off")
    parser.add_argument("--show-errors", type=int, default=0, help="print up to N pairs each verifier gets wrong")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)

    pairs = labelled_pairs(args.limit)
    ours = run_ours(pairs)
    theirs = run_math_verify(pairs, args.hang_limit)
    rows = [summarise("ours", pairs, ours), summarise("math-verify", pairs, theirs)]
    print_table(rows, len(pairs))
    ratio = rows[1]["total_s"] / rows[0]["total_s"]
    data = [i for i, p in enumerate(pairs) if p["source"] != "hand"]
    data_ratio = sum(theirs[i][1] for i in data) / max(sum(ours[i][1] for i in data), 1e-9)
    print(f"\nspeed ratio (math-verify time / our time, summed over single calls): {ratio:.1f}x")
    print(f"speed ratio on the data-set pairs alone (no hand cases, no pathological inputs): {data_ratio:.1f}x")
    print_breakdown(pairs, ours, theirs)
    n_fuzz, slowest, which = time_degenerate_inputs()
    print(f"\ndegenerate inputs (48 KB+, tests/test_math_hacking.py): {n_fuzz} calls, slowest {slowest:.2f} s "
          f"in the caller ({which!r}...)")
    if args.show_errors:
        for name, results in (("ours", ours), ("math-verify", theirs)):
            wrong = [(p, r) for p, r in zip(pairs, results) if r[0] != p["label"]]
            print(f"\n{name} wrong on {len(wrong)} pairs; first {args.show_errors}:")
            for p, r in wrong[: args.show_errors]:
                print(f"  [{p['source']}/{p['how']}] label={p['label']} ref={p['reference'][:60]!r} response={p['response'][:80]!r}")
    if args.json:
        args.json.write_text(json.dumps({"pairs": len(pairs), "rows": rows, "speed_ratio": ratio,
                                         "speed_ratio_data_sets": data_ratio, "degenerate_calls": n_fuzz,
                                         "degenerate_slowest_s": slowest}, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
