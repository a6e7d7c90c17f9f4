import pytest

from data.curation import histogram, select_band, wilson_interval
from data.records import Task


def test_wilson_interval_known_values():
    # 5 of 10 at 95%: centre 0.5, half-width 1.96*sqrt(.25/10 + 1.96^2/400)/(1 + 1.96^2/10)
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)


def test_wilson_interval_is_sane_at_the_edges():
    low, high = wilson_interval(0, 8)
    assert low == 0.0 and 0.2 < high < 0.4
    low, high = wilson_interval(8, 8)
    assert high == 1.0 and 0.6 < low < 0.8


def _tasks(n, family):
    return [Task(f"{family}/{i}", "p", "math", "1", {"family": family}) for i in range(n)]


def test_select_band_keeps_only_the_band():
    tasks = _tasks(5, "math")
    kept = select_band(tasks, [0.0, 0.1, 0.5, 0.9, 1.0], 0.1, 0.9)
    assert [t.id for t in kept] == ["math/1", "math/2", "math/3"]


def test_select_band_balances_families_under_a_cap():
    tasks = _tasks(10, "math") + _tasks(3, "code")
    kept = select_band(tasks, [0.5] * 13, 0.1, 0.9, max_prompts=6)
    families = [t.family for t in kept]
    assert families.count("math") == 3 and families.count("code") == 3


def test_histogram_counts_every_rate_once():
    rows = histogram([0.0, 0.05, 0.5, 0.99, 1.0], bins=10)
    assert sum(r["count"] for r in rows) == 5
    assert rows[0]["count"] == 2 and rows[-1]["count"] == 2


def test_balanced_subset_draws_evenly_and_without_repeats():
    from data.curation import balanced_subset

    tasks = _tasks(50, "math") + _tasks(10, "code")
    subset = balanced_subset(tasks, 16, seed=1)
    assert len(subset) == 16 and len({t.id for t in subset}) == 16
    assert [t.family for t in subset].count("code") == 8
    assert balanced_subset(tasks, 0) == tasks


@pytest.mark.parametrize("precision, rollout_dtype, curate", [("auto", "auto", "auto"), ("float32", "auto", "float32"),
                                                              ("auto", "float32", "float32"),
                                                              ("float32", "bfloat16", "bfloat16")])
def test_run_curates_with_the_sampler_that_training_will_use(tmp_path, precision, rollout_dtype, curate):
    """Pass rates are estimated under training's sampling: its temperature and length, and its sampler's
    precision (--rollout-dtype, or by default --precision's)."""
    from pipelines.run import plan
    from reasoner.config import RunConfig

    config = RunConfig(output=str(tmp_path))
    config.train.precision, config.train.rollout_dtype, config.curate.precision = precision, rollout_dtype, "bfloat16"
    config.train.sampling.temperature = 0.7
    steps = plan(config)
    assert steps["curate"].precision == curate
    assert steps["curate"].sampling.temperature == 0.7
