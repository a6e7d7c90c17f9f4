"""The critic-free update steps picked by --algo (grpo, rloo, reinforce++, reinforce++-baseline, gspo, cispo):
each trains through the loop and records the sampler/trainer mismatch; truncated importance sampling weighs
the loss as it says; bfloat16 sampling makes a mismatch that float32 sampling does not."""

import json
import math

import pytest
import torch

import verifiers
from data.records import Task
from reasoner.algorithms.common import BatchSizes
from reasoner.algorithms.grpo import grpo_loss
from reasoner.config import TrainConfig
from reasoner.generation import Sample
from reasoner.training.policy_gradient import VARIANTS, Settings, policy_gradient_update
from reasoner.training.rollout import Rollout

@verifiers.register("even_length")
def even_length(response: str, reference: str) -> float:
    """A reward a random model earns half the time: every group has both kinds of answer."""
    return float(len(response) % 2 == 0)


def test_truncated_importance_weights_scale_each_tokens_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]], requires_grad=True)
    mask, sizes = torch.ones(2, 2), BatchSizes(tokens=4, sequences=2, max_new_tokens=2)
    advantages, weights = torch.tensor([1.0, -2.0]), torch.tensor([[2.0, 1.0], [0.5, 1.0]])
    # at the old policy the surrogate per token is -A: (-1 * 2 - 1 * 1 + 2 * 0.5 + 2 * 1) / 4 = 0
    loss, _ = grpo_loss(logp, logp.detach(), None, advantages, mask, sizes, is_weights=weights)
    assert loss.item() == pytest.approx(0.0)
    loss.backward()  # d/dlogp of -w * A * exp(logp - old) at old: -w * A / 4
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, -0.25], [0.25, 0.5]]))


def test_every_variant_is_an_algo_with_a_loss_and_an_advantage():
    from reasoner.config import ALGORITHMS
    from reasoner.training.policy_gradient import ADVANTAGES, LOSSES

    assert set(VARIANTS) <= set(ALGORITHMS)
    assert all(v.advantage in ADVANTAGES and v.loss in LOSSES for v in VARIANTS.values())


def _train(micro_model, output, algo: str, **overrides) -> list[dict]:
    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.training import ALGORITHMS
    from reasoner.training.loop import train

    tasks = [Task(f"t{i}", f"Say something of {i} words.", "even_length", "") for i in range(8)]
    config = TrainConfig(model=str(micro_model), output=str(output), algo=algo, steps=2, prompts_per_step=4,
                         group_size=4, lr=1e-3, tensorboard=False, checkpoint_every=10,
                         **{"precision": "float32", **overrides})  # float32: mismatches are the sampler's alone
    config.sampling.max_new_tokens = 8
    torch.manual_seed(0)
    model = load_model(str(micro_model))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train(config, model, load_tokenizer(str(micro_model)), ALGORITHMS[algo](config, model, tasks))
    moved = max((model.state_dict()[k] - v).abs().max().item() for k, v in before.items())
    assert moved > 0, f"{algo} did not move the policy"
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("algo", sorted(VARIANTS))
def test_each_variant_trains_through_the_loop_and_records_the_mismatch(micro_model, tmp_path, algo):
    beta = 0.1 if algo.startswith("reinforce++") else 0.0  # the KL in REINFORCE++'s token rewards
    metrics = _train(micro_model, tmp_path / algo, algo, beta=beta)
    assert len(metrics) == 2
    for record in metrics:
        assert math.isfinite(record["loss"]) and math.isfinite(record["grad_norm"])
        # float32 sampler and float32 trainer: the same model, a KV cache against a full forward
        assert abs(record["rollout_logprob_kl"]) < 1e-6  # k3 of ratios within rounding of 1: +-1e-9
        assert record["rollout_ratio_max"] == pytest.approx(1.0, abs=1e-3)


def test_bfloat16_sampling_is_a_measured_mismatch(micro_model, tmp_path):
    same = _train(micro_model, tmp_path / "fp32", "grpo")
    bf16 = _train(micro_model, tmp_path / "bf16", "grpo", rollout_dtype="bfloat16", tis_cap=2.0)
    # a random micro model's logits are nearly flat, so bfloat16 moves them little; it moves them all the same
    assert max(r["rollout_logprob_kl"] for r in same) < 1e-9 and max(r["rollout_ratio_max"] for r in same) < 1.0001
    assert min(r["rollout_logprob_kl"] for r in bf16) > 1e-8 and min(r["rollout_ratio_max"] for r in bf16) > 1.0005


def _fixed_rollout(tokenizer) -> Rollout:
    """Two groups of four with varied rewards; the sampler's log-probs are set later, relative to the trainer's."""
    tasks = [Task(f"t{g}", f"What is {g} + {g}?", "math", str(2 * g)) for g in range(2)]
    samples, verdicts = [], []
    for g in range(2):
        for i in range(4):
            ids = [(5 * g + 3 * i + j) % 100 + 10 for j in range(2 + i)] + [tokenizer.eos_token_id]
            samples.append(Sample(ids, "", [0.0] * len(ids), "stop"))
            verdicts.append(verifiers.Verdict(i % 2 == 0, float(i % 2 == 0), "fixed", "x"))
    return Rollout(tasks, samples, verdicts, 4)


@pytest.mark.parametrize("algo", ["grpo", "cispo", "gspo"])
def test_tis_weighs_the_loss_by_the_capped_trainer_over_sampler_ratio(micro_model, algo):
    """A sampler that gave every token half the trainer's probability: each token's weight is 2, or the cap,
    and so is the gradient's scale."""
    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.training import distributed
    from reasoner.training.batches import rollout_batch
    from reasoner.training.loop import Learner
    from reasoner.training.rollout import response_logprobs

    tokenizer = load_tokenizer(str(micro_model))
    norms = {}
    for cap in (0.0, 10.0, 1.5):
        torch.manual_seed(0)
        model = load_model(str(micro_model))
        rollout = _fixed_rollout(tokenizer)
        with torch.no_grad():
            trainer = response_logprobs(model, rollout_batch(tokenizer, rollout))[0]
        for row, sample in enumerate(rollout.samples):
            sample.logprobs = (trainer[row, :len(sample.token_ids)] - math.log(2)).tolist()
        config = TrainConfig(lr=1e-3, warmup_steps=1, tis_cap=cap, micro_batch_size=3, algo=algo)
        engine = distributed.make_engine(model, config.lr, config.warmup_steps, config.grad_clip)
        stats = policy_gradient_update(Settings.of(algo, config), Learner(model, tokenizer, engine, None), rollout)
        norms[cap] = stats["grad_norm"]  # the gradient is linear in the weights (GSPO's loss is 0 here)
        assert stats["rollout_ratio_max"] == pytest.approx(2.0, rel=1e-4)
        assert stats["rollout_logprob_kl"] == pytest.approx(2 - 1 - math.log(2), rel=1e-3)  # k3 at ratio 2
    assert norms[0.0] > 0
    assert norms[10.0] == pytest.approx(2.0 * norms[0.0], rel=1e-4)
    assert norms[1.5] == pytest.approx(1.5 * norms[0.0], rel=1e-4)


def test_on_policy_gspo_and_cispo_take_grpo_gradients_with_their_aggregations():
    """With one epoch per batch the ratio is 1 everywhere: GSPO's gradient is GRPO's with sequence_mean,
    CISPO's is GRPO's with token_mean (what the README says of one epoch per batch)."""
    from reasoner.algorithms.cispo import cispo_loss
    from reasoner.algorithms.gspo import gspo_loss

    torch.manual_seed(0)
    base = torch.randn(3, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    advantages, sizes = torch.tensor([1.5, -0.5, -1.0]), BatchSizes(tokens=7, sequences=3, max_new_tokens=4)

    def grad(loss_fn):
        logp = base.clone().requires_grad_()
        loss_fn(logp).backward()
        return logp.grad * mask

    torch.testing.assert_close(grad(lambda lp: gspo_loss(lp, lp.detach(), advantages, mask, sizes)[0]),
                               grad(lambda lp: grpo_loss(lp, lp.detach(), None, advantages, mask, sizes,
                                                         aggregation="sequence_mean")[0]))
    torch.testing.assert_close(grad(lambda lp: cispo_loss(lp, lp.detach(), advantages, mask, sizes)[0]),
                               grad(lambda lp: grpo_loss(lp, lp.detach(), None, advantages, mask, sizes)[0]))


def test_a_second_epoch_takes_its_ratio_against_the_policy_before_the_update(micro_model, monkeypatch):
    """With --epochs-per-batch 2 the old log-probs of the second pass are the first pass's (the policy
    before this step's first update), so the second pass's ratios move off 1 and its clip can bind."""
    from reasoner.generation.hf import HFGenerator
    from reasoner.config import SamplingParams
    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.training import distributed, policy_gradient
    from reasoner.training.loop import Learner
    from reasoner.training.rollout import verify_groups

    model, tokenizer = load_model(str(micro_model)), load_tokenizer(str(micro_model))
    tasks = [Task(f"t{i}", f"Say something of {i} words.", "even_length", "") for i in range(4)]
    rollout = verify_groups(tasks, HFGenerator(model, tokenizer).generate([t.prompt for t in tasks], 4,
                                                                          SamplingParams(8, 1.0, 1.0, 0)))
    config = TrainConfig(epochs_per_batch=2, lr=1e-2, warmup_steps=0, precision="float32", skip_equal_groups=False,
                         micro_batch_size=8)
    seen = []
    clip = policy_gradient.LOSSES["clip"]

    def recording(s, mb, logp, old_logp, weights, sizes):
        seen.append((logp.detach().clone(), old_logp.clone(), mb["response_mask"]))
        return clip(s, mb, logp, old_logp, weights, sizes)

    monkeypatch.setitem(policy_gradient.LOSSES, "clip", recording)
    learner = Learner(model, tokenizer, distributed.make_engine(model, config.lr, 0, config.grad_clip), None, None)
    policy_gradient_update(Settings.of("grpo", config), learner, rollout)
    first, second = seen[:len(seen) // 2], seen[len(seen) // 2:]
    assert len(first) == len(second) == 2  # 16 rows in micro-batches of 8, twice
    for (logp0, old0, _), (logp1, old1, mask) in zip(first, second):
        assert torch.equal(old0, logp0)  # first pass: ratio exactly 1
        assert torch.equal(old1, logp0)  # second pass: against the policy before the update
        assert ((logp1 - old1).abs() * mask).max() > 1e-4  # ... which the first update moved
