"""The built-in task families: valid records, a disjoint held-out split, references that verify."""

import pytest

import verifiers
from data.synthetic import generate, is_heldout


@pytest.mark.parametrize("family", ["math", "code"])
def test_train_and_heldout_never_share_a_prompt(family):
    train = {t.prompt for t in generate(family, "train", 600)}
    heldout = {t.prompt for t in generate(family, "heldout", 150)}
    assert len(train) == 600 and len(heldout) == 150
    assert not train & heldout
    assert all(is_heldout(p) for p in heldout) and not any(is_heldout(p) for p in train)


def test_generation_is_reproducible_from_the_seed():
    assert generate("math", "train", 50, seed=3) == generate("math", "train", 50, seed=3)
    assert generate("math", "train", 50, seed=3) != generate("math", "train", 50, seed=4)


@pytest.mark.parametrize("family", ["math", "code"])
def test_worked_solutions_verify_against_their_reference(family):
    tasks = generate(family, "train", 80)
    verdicts = verifiers.verify_many([(t.verifier, t.meta["solution"], t.reference) for t in tasks])
    failures = [(t.prompt, v.reason) for t, v in zip(tasks, verdicts) if not v.correct]
    assert not failures


def test_fraction_answers_come_in_several_forms():
    solutions = [t.meta["solution"] for t in generate("math", "train", 400) if t.meta["kind"] == "fraction"]
    assert any("\\boxed{\\frac" in s for s in solutions)
    assert any("/" in s.split("\\boxed{")[1] and "\\frac" not in s.split("\\boxed{")[1] for s in solutions)
    assert any("." in s.split("\\boxed{")[1] for s in solutions)


def test_unknown_family_or_split():
    with pytest.raises(ValueError, match="unknown task family"):
        generate("chess", "train", 1)
    with pytest.raises(ValueError, match="split"):
        generate("math", "dev", 1)
