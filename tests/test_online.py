"""Online curation: the prompt pool (retire, return, state), the refill plan across ranks, dynamic sampling
with a scripted generator, and a short training run whose pool state survives a resume."""

import json
import random
from dataclasses import dataclass

import pytest

from data.prompt_pool import PromptPool, refill_plan
from data.records import Task
from reasoner.config import TrainConfig
from reasoner.config import SamplingParams
from reasoner.generation import Sample
from reasoner.training.dynamic_sampling import refill_equal_groups, reestimate_retired, select_groups, take_spares
from reasoner.training.rollout import verify_groups


def _tasks(count: int) -> list[Task]:
    return [Task(f"t{i}", f"p{i}", "math", "1") for i in range(count)]


def test_pool_without_retirement_is_a_plain_shuffled_pass():
    tasks = _tasks(5)
    pool = PromptPool(tasks, seed=3, retire_solved=False)
    drawn = [t.id for t in pool.next(12)]
    epoch0 = [tasks[i].id for i in random.Random("3/0").sample(range(5), 5)]
    epoch1 = [tasks[i].id for i in random.Random("3/1").sample(range(5), 5)]
    epoch2 = [tasks[i].id for i in random.Random("3/2").sample(range(5), 5)]
    assert drawn == epoch0 + epoch1 + epoch2[:2]
    assert (pool.epoch, pool.position) == (2, 2)


def test_all_correct_group_retires_and_is_not_drawn_again():
    pool = PromptPool(_tasks(4), seed=0)
    assert pool.observe([("t1", 4, 4), ("t2", 0, 4), ("t3", 2, 4)], step=7) == 1
    assert pool.retired == {"t1": 7} and pool.active == 3
    assert pool.pass_rates["t3"] == [2, 4]
    assert "t1" not in {t.id for t in pool.next(20)}


def test_every_task_retired_falls_back_to_drawing_all():
    pool = PromptPool(_tasks(2), seed=0)
    pool.observe([("t0", 2, 2), ("t1", 2, 2)], step=0)
    assert len(pool.next(3)) == 3


def test_reestimate_returns_those_below_the_threshold_and_rechecks_the_oldest_first():
    pool = PromptPool(_tasks(4), seed=0)
    pool.observe([("t0", 4, 4)], step=1)
    pool.observe([("t1", 4, 4), ("t2", 4, 4)], step=2)
    assert [t.id for t in pool.due_for_check(2)] == ["t0", "t1"]
    returned = pool.reestimate([("t0", 2, 4), ("t1", 4, 4)], return_below=0.9, step=10)
    assert returned == 1
    assert pool.retired == {"t1": 10, "t2": 2}
    assert [t.id for t in pool.due_for_check(5)] == ["t2", "t1"]


def test_state_round_trips_through_json_and_draws_the_same():
    pool = PromptPool(_tasks(9), seed=1)
    pool.next(4)
    pool.observe([("t2", 3, 3), ("t5", 1, 3)], step=2)
    restored = PromptPool(_tasks(9), seed=1)
    restored.load_state(json.loads(json.dumps({"step": 3, **pool.state()})))
    assert restored.retired == pool.retired and restored.pass_rates == pool.pass_rates
    assert [t.id for t in restored.next(11)] == [t.id for t in pool.next(11)]


def test_old_checkpoint_state_without_pool_loads():
    pool = PromptPool(_tasks(3), seed=0)
    pool.load_state({"step": 5, "epoch": 2, "position": 1})
    assert (pool.epoch, pool.position, pool.retired) == (2, 1, {})


def test_refill_plan_follows_the_rank_stride():
    a, b, c = _tasks(3)
    # world 2: rank 0 holds global groups 0, 2, 4; rank 1 holds 1, 3, 5. Equal: global 1, 2 and 5.
    plan = refill_plan([[False, True, False], [True, False, True]], [a, b, c])
    assert plan == {0: {1: b}, 1: {0: a, 2: c}}


@dataclass
class ScriptedGenerator:
    """Answers prompt p with `\\boxed{1}` in the first `right[p]` of its n samples, else `\\boxed{0}`."""

    right: dict[str, int]

    def generate(self, prompts, n, params):
        return [[Sample([1], "\\boxed{1}" if i < self.right[p] else "\\boxed{0}", [0.0], "stop") for i in range(n)]
                for p in prompts]


def test_dynamic_sampling_replaces_equal_groups_and_retires_solved():
    tasks = _tasks(8)
    # p0..p3: always right (retire), p4, p5: never right, p6, p7: half right.
    generator = ScriptedGenerator({f"p{i}": [4, 4, 4, 4, 0, 0, 2, 2][i] for i in range(8)})
    pool = PromptPool(tasks, seed=0)
    first = [tasks[0], tasks[4], tasks[6]]
    rollout = verify_groups(first, generator.generate([t.prompt for t in first], 4, None))
    params = SamplingParams(8, 1.0, 1.0, 0)
    rollout, stats = refill_equal_groups(generator, None, pool, rollout, step=0, params=params, rounds=2)
    assert stats["equal_reward_groups_drawn"] == pytest.approx(2 / 3)
    assert stats["dynamic_refills"] >= 2
    assert len(rollout.tasks) == 3 and rollout.tasks[2] is tasks[6]
    assert "t0" in pool.retired and "t4" not in pool.retired
    assert stats["pool_retired"] == len(pool.retired) and stats["pool_active"] == 8 - len(pool.retired)
    # Every draw skips retired prompts, so refills never bring back t0.
    assert "t0" not in {t.id for t in rollout.tasks}


def test_spare_groups_replace_equal_groups_in_draw_order():
    tasks = _tasks(7)
    # main: t0 all right, t1 mixed, t2 all wrong; spares: t3 all right (not usable), t4, t5, t6 mixed
    generator = ScriptedGenerator({f"p{i}": [4, 2, 0, 4, 1, 3, 2][i] for i in range(7)})
    both = verify_groups(tasks, generator.generate([t.prompt for t in tasks], 4, None))
    main, spare = select_groups(both, [0, 1, 2]), select_groups(both, [3, 4, 5, 6])
    out, used = take_spares(main, spare)
    assert used == 2 and [t.id for t in out.tasks] == ["t4", "t1", "t5"]
    assert [v.correct for v in out.verdicts] == [True] * 1 + [False] * 3 + [True] * 2 + [False] * 2 + [True] * 3 + [False]
    assert take_spares(main, select_groups(both, [3])) == (main, 0)  # no usable spare: nothing changes


def test_spares_are_observed_and_used_before_a_refill_round():
    tasks = _tasks(6)
    # main t0 (all right), t1 (all wrong); spares t2 (all right), t3 (mixed); the refill draws from the pool
    generator = ScriptedGenerator({f"p{i}": [4, 0, 4, 2, 1, 3][i] for i in range(6)})
    pool = PromptPool(tasks, seed=0)
    both = verify_groups(tasks[:4], generator.generate([t.prompt for t in tasks[:4]], 4, None))
    main, spare = select_groups(both, [0, 1]), select_groups(both, [2, 3])
    out, stats = refill_equal_groups(generator, None, pool, main, 0, SamplingParams(8, 1.0, 1.0, 0), rounds=1,
                                     spare=spare)
    assert {"t0", "t2"} <= set(pool.retired)  # the dropped groups still count: both retired
    assert pool.pass_rates["t3"] == [2, 4]
    assert out.tasks[0].id == "t3" and stats["spare_groups_used"] == 1
    assert stats["equal_reward_groups_drawn"] == 1.0 and stats["dynamic_refills"] == 1  # t1's slot, refilled
    assert float(out.rewards[1].std()) > 0


def test_dynamic_sampling_off_changes_nothing():
    tasks = _tasks(2)
    generator = ScriptedGenerator({"p0": 4, "p1": 0})
    pool = PromptPool(tasks, seed=0)
    rollout = verify_groups(tasks, generator.generate(["p0", "p1"], 4, None))
    out, stats = refill_equal_groups(generator, None, pool, rollout, 0, SamplingParams(8, 1.0, 1.0, 0), rounds=0)
    assert out.tasks == tasks and stats["dynamic_refills"] == 0 and stats["equal_reward_groups_drawn"] == 1.0


def test_reestimate_retired_brings_back_what_the_policy_now_fails():
    tasks = _tasks(3)
    pool = PromptPool(tasks, seed=0)
    pool.observe([("t0", 4, 4), ("t1", 4, 4)], step=0)
    generator = ScriptedGenerator({"p0": 1, "p1": 4})  # the policy forgot t0
    stats = reestimate_retired(generator, None, pool, 25, SamplingParams(8, 1.0, 1.0, 0), prompts=64, samples=4,
                               return_below=0.9)
    assert stats == {"pool_reestimated": 2, "pool_returned": 1}
    assert pool.retired == {"t1": 25} and pool.pass_rates["t0"] == [1, 4]


def test_training_records_pool_metrics_and_resumes_the_pool(micro_model, tmp_path):
    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.training import ALGORITHMS
    from reasoner.training.loop import train

    tasks = [Task(f"m{i}", f"What is {i} + {i}?", "math", str(2 * i)) for i in range(12)]

    def run(steps: int, output):
        config = TrainConfig(model=str(micro_model), output=str(output), steps=steps, prompts_per_step=2,
                             group_size=2, checkpoint_every=2, reestimate_every=2, tensorboard=False,
                             dynamic_sampling_rounds=1)
        config.sampling.max_new_tokens = 4
        model = load_model(str(micro_model))
        train(config, model, load_tokenizer(str(micro_model)), ALGORITHMS["grpo"](config, model, tasks))
        return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]

    straight = run(4, tmp_path / "a")
    assert all({"dynamic_refills", "pool_active", "pool_retired"} <= set(m) for m in straight)
    assert "pool_reestimated" not in straight[1] or straight[1]["pool_reestimated"] >= 0
    run(2, tmp_path / "b")
    resumed = run(4, tmp_path / "b")
    keys = ("dynamic_refills", "pool_active", "pool_retired", "reward_mean")
    assert [[m[k] for k in keys] for m in resumed] == [[m[k] for k in keys] for m in straight]
    state = json.loads((tmp_path / "b" / "checkpoints" / "step-000004" / "trainer_state.json").read_text())
    assert set(state["pool"]) == {"pass_rates", "retired"}


def as_two_ranks(monkeypatch, run) -> list:
    """run(rank) on two threads posing as two ranks, whose all_gather_objects meet at a barrier; the results."""
    import threading

    from reasoner.training import distributed

    local, barrier, slots, results = threading.local(), threading.Barrier(2), [None, None], [None, None]

    def gather(obj):
        slots[local.rank] = obj
        barrier.wait()
        out = list(slots)
        barrier.wait()
        return out

    def one(rank):
        local.rank = rank
        results[rank] = run(rank)

    monkeypatch.setattr(distributed, "rank", lambda: local.rank)
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "all_gather_objects", gather)
    threads = [threading.Thread(target=one, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_two_ranks_keep_identical_pools_and_train_what_one_process_would(monkeypatch):
    """Two ranks as threads with a gathering barrier: the same pool state on both, and together the same
    groups as a single process."""
    tasks = _tasks(12)
    right = {f"p{i}": [4, 0, 2, 4, 4, 1, 0, 4, 3, 4, 0, 2][i] for i in range(12)}
    params = SamplingParams(8, 1.0, 1.0, 0)

    def one_rank(pool, batch):
        rollout = verify_groups(batch, ScriptedGenerator(right).generate([t.prompt for t in batch], 4, None))
        return refill_equal_groups(ScriptedGenerator(right), None, pool, rollout, 0, params, rounds=2)

    single_pool = PromptPool(tasks, seed=5)
    single, stats = one_rank(single_pool, single_pool.next(4))
    assert stats["dynamic_refills"] > 0 and stats["pool_retired"] > 0

    pools = [PromptPool(tasks, seed=5) for _ in range(2)]
    rollouts = as_two_ranks(monkeypatch, lambda rank: one_rank(pools[rank], pools[rank].next(4)[rank::2])[0])
    assert pools[0].state() == pools[1].state() == single_pool.state()
    interleaved = [t.id for pair in zip(rollouts[0].tasks, rollouts[1].tasks) for t in pair]
    assert interleaved == [t.id for t in single.tasks]


def test_two_ranks_with_spares_keep_identical_pools(monkeypatch):
    """Spares stay on their rank, but what every rank observes of them is gathered: the pools stay equal,
    and each rank trains its own share of the groups."""
    tasks = _tasks(16)
    right = {f"p{i}": [4, 0, 2, 4, 4, 1, 0, 4, 3, 4, 0, 2, 4, 1, 0, 2][i] for i in range(16)}
    params = SamplingParams(8, 1.0, 1.0, 0)
    pools = [PromptPool(tasks, seed=5) for _ in range(2)]

    def run(rank):
        drawn = pools[rank].next(4 + 4)
        mine = drawn[:4][rank::2] + drawn[4:][rank::2]
        both = verify_groups(mine, ScriptedGenerator(right).generate([t.prompt for t in mine], 4, None))
        return refill_equal_groups(ScriptedGenerator(right), None, pools[rank], select_groups(both, [0, 1]), 0,
                                   params, rounds=1, spare=select_groups(both, [2, 3]))

    results = as_two_ranks(monkeypatch, run)
    assert pools[0].state() == pools[1].state()
    assert len(pools[0].pass_rates) >= 8  # every drawn group, spares included, observed on both ranks
    assert results[0][1] == results[1][1]  # the step's metrics are global
    assert all(len(rollout.tasks) == 2 for rollout, _ in results)
