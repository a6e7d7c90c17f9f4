"""Preference pairs from verified samples: same prompt, one answer the verifier accepted, one it did not.

Pure functions: they see correctness flags and lengths, never a model. Length-matched pairing pairs each
right answer with the wrong one closest in length, so that DPO cannot learn "the longer (or shorter) one
wins" instead of "the right one wins" (the length exploitation of Park et al. 2024, "Disentangling
Length from Quality in DPO").
"""

from __future__ import annotations

import random
from typing import Any

from data.records import Task


def pair_indices(correct: list[bool], lengths: list[int], pairs_per_prompt: int, length_matched: bool,
                 rng: random.Random) -> list[tuple[int, int]]:
    """(chosen, rejected) sample indices: chosen correct, rejected not, at most `pairs_per_prompt` of them.

    Pairs that share no sample come first; only when those run out is a sample reused. Length-matched
    pairing takes the pairs with the smallest length gap first; otherwise the order is random.
    """
    right = [i for i, ok in enumerate(correct) if ok]
    wrong = [i for i, ok in enumerate(correct) if not ok]
    combos = [(i, j) for i in right for j in wrong]
    rng.shuffle(combos)  # random order, and random tie-breaks among equal length gaps
    if length_matched:
        combos.sort(key=lambda pair: abs(lengths[pair[0]] - lengths[pair[1]]))
    picked: list[tuple[int, int]] = []
    used: set[int] = set()
    for i, j in combos:
        if len(picked) < pairs_per_prompt and i not in used and j not in used:
            picked.append((i, j))
            used.update((i, j))
    for pair in combos:
        if len(picked) < pairs_per_prompt and pair not in picked:
            picked.append(pair)
    return picked


def pair_records(task: Task, texts: list[str], token_ids: list[list[int]], correct: list[bool],
                 truncated: list[bool], pairs_per_prompt: int, length_matched: bool, seed: int,
                 loss_masks: list[list[int] | None] | None = None) -> list[dict[str, Any]]:
    """The pair records of one prompt's verified samples (JSONL rows of `reasoner pairs`); samples with
    tool calls also give each side's loss mask (`chosen_mask`, `rejected_mask`: 0 on a tool's output)."""
    rng = random.Random(f"{seed}/{task.id}")
    lengths = [len(ids) for ids in token_ids]
    rows = []
    for k, (i, j) in enumerate(pair_indices(correct, lengths, pairs_per_prompt, length_matched, rng)):
        rows.append({
            "id": f"{task.id}/pair{k}", "task_id": task.id, "prompt": task.prompt,
            "chosen": texts[i], "rejected": texts[j], "chosen_ids": token_ids[i], "rejected_ids": token_ids[j],
            **({"chosen_mask": loss_masks[i], "rejected_mask": loss_masks[j]}
               if loss_masks and loss_masks[i] is not None else {}),
            "meta": {**task.meta, "chosen_length": lengths[i], "rejected_length": lengths[j],
                     "rejected_truncated": truncated[j], "pass_rate_sampled": sum(correct) / len(correct)},
        })
    return rows


def pair_summary(pairs: list[dict[str, Any]], prompts: int) -> dict[str, float]:
    """How many prompts gave pairs and how long each side is (the length bias a DPO run would see)."""
    def mean(key: str) -> float:
        return sum(p["meta"][key] for p in pairs) / max(1, len(pairs))

    return {"prompts": prompts, "pairs": len(pairs), "prompts_with_pairs": len({p["task_id"] for p in pairs}),
            "chosen_length_mean": mean("chosen_length"), "rejected_length_mean": mean("rejected_length"),
            "length_gap_mean": sum(abs(p["meta"]["chosen_length"] - p["meta"]["rejected_length"]) for p in pairs)
            / max(1, len(pairs)),
            "rejected_truncated_rate": mean("rejected_truncated")}
