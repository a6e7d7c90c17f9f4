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


def test_slipped_solutions_are_wrong_in_their_last_step_only():
    clean, slipped = generate("math", "train", 400), generate("math", "train", 400, slip_rate=0.3)
    assert [t.prompt for t in clean] == [t.prompt for t in slipped]  # the same tasks, the same references
    assert [t.reference for t in clean] == [t.reference for t in slipped]
    wrong = [(c, s) for c, s in zip(clean, slipped) if not s.meta["solution_correct"]]
    assert 0.22 < len(wrong) / len(slipped) < 0.38
    assert {s.meta["kind"] for _, s in wrong} == {"addition", "multiplication", "fraction", "linear"}
    verdicts = verifiers.verify_many([("math", s.meta["solution"], s.reference) for _, s in wrong])
    assert not any(v.correct for v in verdicts)
    for c, s in wrong:  # everything before the last result is the clean working
        head = c.meta["solution"].rsplit("= ", 1)[0]
        assert s.meta["solution"].startswith(head)
    right = [s for s in slipped if s.meta["solution_correct"]]
    assert all(s.meta["solution"] == c.meta["solution"] for c, s in zip(clean, slipped) if s.meta["solution_correct"])
    assert right


def test_heldout_and_code_solutions_never_slip():
    for family, split in (("math", "heldout"), ("code", "train")):
        tasks = generate(family, split, 100, slip_rate=0.9)
        assert all("solution_correct" not in t.meta for t in tasks)
        assert tasks == generate(family, split, 100)


def test_calc_solutions_call_the_tool_in_its_own_format_or_answer_at_once():
    from reasoner.generation.tools import output_block, tool_segments

    tasks = generate("calc", "train", 200, seed=3)
    uses = [t.meta["solution_uses_tool"] for t in tasks]
    assert 0.35 < sum(uses) / len(uses) < 0.65 and {t.meta["kind"] for t in tasks} == {"product", "sum"}
    for task in tasks:
        solution = task.meta["solution"]
        block = output_block(f"{task.reference}\n", after_newline=False)
        assert (block in solution) == task.meta["solution_uses_tool"]
        assert [by_tool for _, by_tool in tool_segments(solution)] == ([False, True, False] if block in solution
                                                                        else [False])
    verdicts = verifiers.verify_many([("math", t.meta["solution"], t.reference) for t in tasks])
    assert all(v.correct for v in verdicts)
    assert all(t.meta["solution_uses_tool"] for t in generate("calc", "heldout", 20))
