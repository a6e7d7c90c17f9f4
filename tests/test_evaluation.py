"""pass@k against exact combinatorics and brute-force enumeration; maj@k; the eval report's shape."""

import itertools
import random
from math import comb

import pytest

from data.records import Task
from reasoner.evaluation import TaskResult, bootstrap_interval, majority_correct, paired_change, pass_at_k, summarise
from reasoner.generation import Sample
from verifiers import Verdict


@pytest.mark.parametrize("n", range(1, 11))
def test_pass_at_k_matches_exact_combinatorics(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-12)


@pytest.mark.parametrize("n", [1, 3, 5, 7])
def test_pass_at_k_matches_brute_force_over_all_k_subsets(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    value = pass_at_k(2000, 3, 1000)
    assert 0.87 < value < 0.88  # 1 - (1000/2000)^3 approximately, with no overflow
    assert pass_at_k(2000, 0, 1) == 0.0 and pass_at_k(2000, 2000, 7) == 1.0


def test_pass_at_k_rejects_impossible_arguments():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def _result(task_id, outcomes, answers=None, family="math"):
    answers = answers or [str(i) for i in range(len(outcomes))]
    task = Task(task_id, "p", "math", "1", {"family": family})
    samples = [Sample([1, 2], "x", [0.0, 0.0], "stop") for _ in outcomes]
    verdicts = [Verdict(ok, float(ok), "r", a) for ok, a in zip(outcomes, answers)]
    return TaskResult(task, samples, verdicts)


def test_majority_vote():
    assert majority_correct(_result("a", [True, False, False], ["1", "2", "1"]))
    assert not majority_correct(_result("b", [True, False, False], ["1", "2", "2"]))


def test_summarise_reports_contract_fields_and_family_breakdown():
    results = [_result("a", [True, False, False, False], ["1", "2", "2", "2"]), _result("b", [True] * 4, family="code")]
    report = summarise(results, [1, 4])
    assert report["tasks"][0] == {"id": "a", "family": "math", "n": 4, "c": 1, "pass@1": 0.25, "pass@4": 1.0,
                                  "maj@n": 0.0}
    assert report["overall"]["pass@1"] == pytest.approx((0.25 + 1.0) / 2)
    assert report["by"]["family"]["code"]["pass@1"] == 1.0
    low, high = report["overall"]["pass@1_ci95"]
    assert 0.25 <= low <= high <= 1.0


def test_bootstrap_interval_contains_the_mean_and_shrinks_with_more_tasks():
    few = bootstrap_interval([0, 1] * 5)
    many = bootstrap_interval([0, 1] * 500)
    assert few[0] < 0.5 < few[1] and many[0] < 0.5 < many[1]
    assert many[1] - many[0] < few[1] - few[0]


def test_paired_change_pairs_tasks_by_id_and_its_interval_is_narrower_than_two_separate_ones():
    rng = random.Random(0)
    difficulty = [rng.random() for _ in range(200)]  # tasks differ far more than the change between policies
    start = [{"id": f"t{i}", "pass@1": d} for i, d in enumerate(difficulty)]
    final = [{"id": f"t{i}", "pass@1": min(1.0, d + 0.05 + rng.uniform(-0.02, 0.02))}
             for i, d in enumerate(difficulty)]
    change = paired_change(start, list(reversed(final)), "pass@1")  # order does not matter, ids do
    expected = sum(f["pass@1"] - s["pass@1"] for s, f in zip(start, final)) / len(start)
    assert change["pass@1"] == pytest.approx(expected)
    low, high = change["pass@1_ci95"]
    assert 0 < low <= change["pass@1"] <= high < 0.1  # the change is clearly positive when measured in pairs
    start_low, start_high = bootstrap_interval([s["pass@1"] for s in start])
    assert (high - low) < 0.2 * (start_high - start_low)  # unpaired, the task spread would swamp it
    with pytest.raises(ValueError, match="different tasks"):
        paired_change(start, final[:-1], "pass@1")
