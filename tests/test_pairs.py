"""Pair building by hand: chosen is verified right, rejected wrong; length matching; pairs per prompt."""

import random

from data.pairs import pair_indices, pair_records, pair_summary
from data.records import Task

CORRECT = [True, False, True, False, False]
LENGTHS = [10, 30, 20, 12, 21]


def test_length_matched_takes_the_smallest_gaps_without_reusing_a_sample():
    # gaps: (0,1) 20, (0,3) 2, (0,4) 11, (2,1) 10, (2,3) 8, (2,4) 1 -> (2,4), then (0,3)
    assert pair_indices(CORRECT, LENGTHS, 2, True, random.Random(0)) == [(2, 4), (0, 3)]


def test_length_matched_reuses_samples_only_after_disjoint_pairs_run_out():
    pairs = pair_indices(CORRECT, LENGTHS, 3, True, random.Random(0))
    assert pairs == [(2, 4), (0, 3), (2, 3)]  # the third-smallest gap, (2,3) 8, reuses samples


def test_unmatched_pairs_are_right_over_wrong_and_disjoint():
    for seed in range(5):
        pairs = pair_indices(CORRECT, LENGTHS, 2, False, random.Random(seed))
        assert len(pairs) == 2
        assert all(CORRECT[i] and not CORRECT[j] for i, j in pairs)
        assert len({i for pair in pairs for i in pair}) == 4


def test_pairs_per_prompt_caps_at_every_right_wrong_combination():
    assert len(pair_indices(CORRECT, LENGTHS, 100, True, random.Random(0))) == 2 * 3


def test_no_pair_when_all_right_or_all_wrong():
    assert pair_indices([True, True], [1, 2], 2, True, random.Random(0)) == []
    assert pair_indices([False, False], [1, 2], 2, False, random.Random(0)) == []


def test_pair_records_carry_texts_ids_and_lengths():
    task = Task("t/1", "1+1?", "math", "2", {"family": "math"})
    rows = pair_records(task, ["2", "3", "two"], [[1, 0], [2, 3, 4, 0], [5, 6, 0]], [True, False, True],
                        [False, True, False], 1, True, 0)
    assert len(rows) == 1
    row = rows[0]
    assert (row["chosen"], row["rejected"], row["rejected_ids"]) == ("two", "3", [2, 3, 4, 0])
    assert row["meta"]["chosen_length"] == 3 and row["meta"]["rejected_truncated"] is True
    summary = pair_summary(rows, prompts=2)
    assert summary["prompts_with_pairs"] == 1 and summary["length_gap_mean"] == 1
