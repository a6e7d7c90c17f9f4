"""Exact de-duplication of prompts, and a contamination check between training and held-out tasks.

Contamination is measured by word n-gram overlap (13-grams by default, as in the GPT-3 paper's
decontamination): the fraction of a held-out prompt's n-grams that occur in some training prompt. A prompt
shorter than n words counts as one n-gram, the whole prompt, so short prompts are checked for exact
(normalised) repeats. The report says what it found: counts, and examples with the matching training task.
"""

from __future__ import annotations

import re
import unicodedata

from data.records import Task


def normalise(text: str) -> str:
    """Case, Unicode forms and runs of whitespace do not make two prompts different."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def words(text: str) -> list[str]:
    """Words, numbers and each other symbol alone: "3x - 6" and "3x + 6" must differ."""
    return re.findall(r"\w+|[^\w\s]", normalise(text))


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    tokens = words(text)
    if len(tokens) < n:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def deduplicate(tasks: list[Task]) -> tuple[list[Task], list[tuple[str, str]]]:
    """The first task of each normalised prompt, and (dropped id, kept id) for every duplicate."""
    first: dict[str, str] = {}
    kept, dropped = [], []
    for task in tasks:
        key = normalise(task.prompt)
        if key in first:
            dropped.append((task.id, first[key]))
        else:
            first[key] = task.id
            kept.append(task)
    return kept, dropped


def contamination(train: list[Task], heldout: list[Task], n: int = 13, threshold: float = 0.5,
                  examples: int = 5) -> dict:
    """How much of each held-out prompt appears in the training prompts; a report (JSON-able).

    A held-out task is `contaminated` when at least `threshold` of its n-grams occur in training prompts;
    `exact` counts held-out prompts equal (normalised) to a training prompt.
    """
    owner: dict[tuple[str, ...], str] = {}
    for task in train:
        for gram in ngrams(task.prompt, n):
            owner.setdefault(gram, task.id)
    train_prompts = {normalise(t.prompt): t.id for t in train}
    overlapping, flagged, exact, fractions = [], [], 0, []
    for task in heldout:
        grams = ngrams(task.prompt, n)
        shared = [g for g in grams if g in owner]
        fraction = len(shared) / len(grams) if grams else 0.0
        fractions.append(fraction)
        exact += normalise(task.prompt) in train_prompts
        if shared:
            found = {"heldout_id": task.id, "train_id": owner[shared[0]], "overlap": round(fraction, 4),
                     "shared_ngram": " ".join(shared[0])}
            overlapping.append(found)
            if fraction >= threshold:
                flagged.append(found)
    flagged.sort(key=lambda f: -f["overlap"])
    return {
        "n": n, "threshold": threshold, "train": len(train), "heldout": len(heldout),
        "heldout_with_overlap": len(overlapping), "contaminated": len(flagged), "exact_duplicates": exact,
        "mean_overlap": sum(fractions) / len(fractions) if fractions else 0.0,
        "contaminated_ids": [f["heldout_id"] for f in flagged],
        "examples": flagged[:examples] or sorted(overlapping, key=lambda f: -f["overlap"])[:examples],
    }


def format_report(report: dict) -> str:
    lines = [f"contamination ({report['n']}-grams): {report['contaminated']} of {report['heldout']} held-out "
             f"prompts share >= {report['threshold']:.0%} of their n-grams with the {report['train']} training "
             f"prompts ({report['exact_duplicates']} exact repeats, {report['heldout_with_overlap']} with any "
             f"overlap, mean overlap {report['mean_overlap']:.3f})"]
    for ex in report["examples"]:
        lines.append(f"  {ex['heldout_id']} ~ {ex['train_id']}: overlap {ex['overlap']:.2f}, e.g. {ex['shared_ngram']!r}")
    return "\n".join(lines)
