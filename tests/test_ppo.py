"""PPO's pieces against small examples computed by hand (default tolerances), and a smoke run of the trainer."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reasoner.algorithms.ppo import gae, token_rewards, value_loss, whiten


def test_gae_with_gamma_and_lambda_one_is_return_minus_value():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    advantages, returns = gae(rewards, values, torch.ones(1, 3), gamma=1.0, gae_lambda=1.0)
    torch.testing.assert_close(advantages, torch.tensor([[0.5, 0.4, 0.3]]))
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 1.0]]))


def test_gae_by_hand_with_discount_and_padding():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 5.0]])  # the 5.0 sits on padding and must not count
    values = torch.tensor([[0.5, 0.6, 0.7], [0.2, 0.4, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    advantages, returns = gae(rewards, values, mask, gamma=0.9, gae_lambda=0.5)
    # row 0: d2 = 1 - 0.7 = 0.3; d1 = 0.9*0.7 - 0.6 = 0.03, A1 = 0.03 + 0.45*0.3 = 0.165;
    #        d0 = 0.9*0.6 - 0.5 = 0.04, A0 = 0.04 + 0.45*0.165 = 0.11425
    # row 1: d1 = 1 - 0.4 = 0.6; d0 = 0.9*0.4 - 0.2 = 0.16, A0 = 0.16 + 0.45*0.6 = 0.43
    torch.testing.assert_close(advantages, torch.tensor([[0.11425, 0.165, 0.3], [0.43, 0.6, 0.0]]))
    torch.testing.assert_close(returns, torch.tensor([[0.61425, 0.765, 1.0], [0.63, 1.0, 0.0]]))


def test_token_rewards_put_the_score_on_the_last_token_and_kl_on_every_token():
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    rewards = token_rewards(torch.tensor([1.0, 0.0]), kl, mask, beta=0.5)
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, -0.1, 0.85], [-0.2, -0.25, 0.0]]))
    torch.testing.assert_close(token_rewards(torch.tensor([1.0, 2.0]), None, mask, beta=0.5),
                               torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]))


def test_whiten_over_real_tokens_only():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    # real tokens 1, 2, 3, 4: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
    s = math.sqrt(1.25)
    expected = torch.tensor([[-1.5 / s, -0.5 / s, 0.5 / s], [1.5 / s, 0.0, 0.0]])
    torch.testing.assert_close(whiten(x, mask, eps=0.0), expected)


def test_value_loss_clipping_by_hand():
    values, old, returns = torch.tensor([[0.5, 1.0]]), torch.tensor([[0.0, 0.9]]), torch.tensor([[1.0, 0.0]])
    mask = torch.ones(1, 2)
    loss, stats = value_loss(values, old, returns, mask, clip=0.2)
    # token 0: unclipped (0.5-1)^2 = 0.25, clipped V = 0.2: (0.2-1)^2 = 0.64 -> 0.5 * 0.64
    # token 1: unclipped 1.0, clipped V = 1.0 (within 0.2 of 0.9): 1.0 -> 0.5 * 1.0
    torch.testing.assert_close(loss, torch.tensor([[0.32, 0.5]]))
    torch.testing.assert_close(stats["value_clip_frac"], torch.tensor(0.5))
    unclipped, _ = value_loss(values, old, returns, mask, clip=None)
    torch.testing.assert_close(unclipped, torch.tensor([[0.125, 0.5]]))


# ------------------------------------------------------------------------------------ the trainer

def _tiny_config(tmp_path, **overrides):
    from reasoner.config import PPOConfig, SamplingConfig, TrainConfig

    values = dict(output=str(tmp_path / "train"), algo="ppo", steps=2, prompts_per_step=2, group_size=2,
                  sampling=SamplingConfig(max_new_tokens=6), checkpoint_every=1, micro_batch_size=3, ppo=PPOConfig(),
                  )
    return TrainConfig(**{**values, **overrides})


def test_policy_forward_agrees_with_response_logprobs(micro_model):
    from data.synthetic import generate
    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.training.ppo import ValueHead, policy_forward
    from reasoner.training.rollout import encode_prompts, pad_batch, response_logprobs

    tokenizer, model = load_tokenizer(micro_model), load_model(micro_model)
    tasks = generate("math", "train", 2, 0)
    batch = pad_batch(encode_prompts(tokenizer, tasks), [[5, 6, 7], [8]], tokenizer.pad_token_id)
    with torch.no_grad():
        expected, expected_entropy = response_logprobs(model, batch, 0.7, with_entropy=True)
        logp, features, entropy = policy_forward(model, batch, 0.7, with_entropy=True)
    torch.testing.assert_close(logp, expected)
    torch.testing.assert_close(entropy, expected_entropy)
    assert ValueHead(model.config.hidden_size)(features).shape == logp.shape


def test_frozen_value_head_passes_gradient_to_the_features_only():
    from reasoner.training.ppo import ValueHead

    head = ValueHead(3)
    torch.nn.init.ones_(head.linear.weight)
    features = torch.ones(1, 2, 3, requires_grad=True)
    head(features, frozen=True).sum().backward()
    assert head.linear.weight.grad is None and head.linear.bias.grad is None
    torch.testing.assert_close(features.grad, torch.ones(1, 2, 3))


def _fixed_ppo(micro_model, weight_decay: float = 0.0, **ppo):
    """PPO on distributed_step.py's fixed batch in one process: (ppo, learner, rollout)."""
    from distributed_step import GROUPS, fixed_rollout
    from reasoner.config import PPOConfig, TrainConfig
    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.training import distributed
    from reasoner.training.loop import Learner
    from reasoner.training.ppo import PPO, PPOSettings

    tokenizer, model = load_tokenizer(micro_model), load_model(micro_model)
    config = TrainConfig(lr=1e-2, warmup_steps=1, micro_batch_size=3, beta=0.1, ppo=PPOConfig(critic_lr=1e-2, **ppo))
    engine = distributed.TorchEngine(model, config.lr, config.warmup_steps, config.grad_clip, weight_decay=weight_decay)
    learner = Learner(model, tokenizer, engine, distributed.frozen_copy(model))
    return PPO(PPOSettings.of(config), model.config.hidden_size), learner, fixed_rollout(tokenizer, range(GROUPS))


def test_critic_warmup_trains_the_head_alone(micro_model):
    # weight decay and Adam moments would move or mark the policy if its optimiser stepped at all
    ppo, learner, rollout = _fixed_ppo(micro_model, weight_decay=0.1, critic_warmup_steps=1)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    head_before = ppo.head.linear.weight.clone()
    stats = ppo.update(learner, rollout)
    assert stats["critic_warmup"] == 1.0 and stats["grad_norm"] == 0.0 and stats["critic_grad_norm"] > 0
    assert all(torch.equal(v, before[k]) for k, v in learner.model.state_dict().items())
    assert not learner.engine.optimizer.state  # no Adam moment, no step count for the policy
    assert all(p.grad is None for p in learner.model.parameters())
    assert not torch.equal(ppo.head.linear.weight, head_before)

    stats = ppo.update(learner, rollout)  # past the warm-up the policy moves
    assert stats["critic_warmup"] == 0.0 and stats["grad_norm"] > 0
    assert any(not torch.equal(v, before[k]) for k, v in learner.model.state_dict().items())


def test_value_loss_trains_the_backbone_only_with_a_shared_critic(micro_model):
    weights = {}
    for critic, vf_coef in (("probe", 0.1), ("shared", 0.0), ("shared", 0.1)):
        ppo, learner, rollout = _fixed_ppo(micro_model, critic=critic, vf_coef=vf_coef)
        # a trained head's weights: the zero-initialised one passes no gradient back to the features
        torch.nn.init.normal_(ppo.head.linear.weight, generator=torch.Generator().manual_seed(0))
        ppo.update(learner, rollout)
        weights[critic, vf_coef] = learner.model.state_dict()
    probe, shared_zero, shared = weights["probe", 0.1], weights["shared", 0.0], weights["shared", 0.1]
    assert all(torch.equal(probe[k], shared_zero[k]) for k in probe)
    assert any(not torch.equal(probe[k], shared[k]) for k in probe)


def test_ppo_trainer_smoke_critic_warmup_keeps_the_policy_and_saves_the_head(micro_model, tmp_path):
    from data.synthetic import generate
    from reasoner.config import PPOConfig
    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.training.loop import train
    from reasoner.training.ppo import VALUE_HEAD, ppo_algorithm

    tokenizer, model = load_tokenizer(micro_model), load_model(micro_model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # punish truncation so that the random micro model's over-long answers give the critic something to learn
    config = _tiny_config(tmp_path, steps=1, truncation="punish", beta=0.1, ppo=PPOConfig(critic_warmup_steps=1))
    final = train(config, model, tokenizer, ppo_algorithm(config, model, generate("math", "train", 4, 0)))
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key])
    head = torch.load(final / VALUE_HEAD, weights_only=True)
    assert head["updates"] == 1 and head["state"]["linear.bias"].abs().item() > 0

    config.steps = 2  # resume from the step-1 checkpoint: the head comes back, then the policy moves
    train(config, model, tokenizer, ppo_algorithm(config, model, generate("math", "train", 4, 0)))
    assert torch.load(final / VALUE_HEAD, weights_only=True)["updates"] == 2
    assert any(not torch.equal(value, before[key]) for key, value in model.state_dict().items())
    lines = (tmp_path / "train" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and '"value_loss"' in lines[1]
    # the critic learns from all-equal groups too: no dynamic-sampling refills (the micro model's are all 0)
    records = [json.loads(line) for line in lines]
    assert any(r["equal_reward_groups_drawn"] > 0 for r in records) and all(r["dynamic_refills"] == 0 for r in records)


# ------------------------------------------------------------------------------------ under DeepSpeed

PPO_SCRIPT = Path(__file__).with_name("distributed_ppo.py")
ROOT = Path(__file__).resolve().parents[1]
needs_launcher = pytest.mark.skipif(shutil.which("deepspeed") is None, reason="the deepspeed launcher is not installed")


def _two_ranks(port: int, *args) -> None:
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("WORLD_SIZE", None)
    launcher = ["deepspeed", "--num_gpus", "2", "--no_local_rank", "--master_port", str(port), str(PPO_SCRIPT),
                *map(str, args)]
    result = subprocess.run(launcher, env=env, cwd=ROOT, timeout=900, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.slow
@needs_launcher
@pytest.mark.parametrize("zero_stage, micro_batch_size", [(2, 3), (3, 16)])
def test_two_ranks_warm_up_the_critic_alone_then_update_as_one_process(micro_model, tmp_path, zero_stage,
                                                                        micro_batch_size):
    """Under DeepSpeed the warm-up leaves the policy bit-identical, and the policy's first real step is the one
    a single process takes (an optimiser stepped during the warm-up would shrink it: Adam's bias correction)."""
    single, double = tmp_path / "one.pt", tmp_path / "two.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, str(PPO_SCRIPT), "warmup", str(micro_model), str(single), str(zero_stage),
                    str(micro_batch_size)], check=True, env=env, cwd=ROOT, timeout=600)
    _two_ranks(29650 + zero_stage, "warmup", micro_model, double, zero_stage, micro_batch_size)
    one, two = torch.load(single), torch.load(double)
    assert one["kept"] and two["kept"]
    assert two["warmup"]["value_loss"] == pytest.approx(one["warmup"]["value_loss"], rel=1e-4)
    assert two["stats"]["loss"] == pytest.approx(one["stats"]["loss"], rel=1e-4, abs=1e-6)
    assert two["stats"]["grad_norm"] == pytest.approx(one["stats"]["grad_norm"], rel=1e-4)
    assert two["stats"]["critic_grad_norm"] == pytest.approx(one["stats"]["critic_grad_norm"], rel=1e-4)
    assert set(one["weights"]) == set(two["weights"])
    # as in test_distributed.py: Adam may turn a gradient element that is zero up to rounding into a step of up
    # to the learning rate (1e-2) either way; every other weight, the value head's included, must agree
    diffs = torch.cat([(two["weights"][k] - v).abs().flatten() for k, v in one["weights"].items()])
    assert diffs.max().item() <= 2e-2
    assert (diffs > 1e-5).float().mean().item() < 0.005


@pytest.mark.slow
@needs_launcher
def test_zero3_two_ranks_save_the_whole_value_head_and_resume(micro_model, tmp_path):
    from reasoner.modeling import load_model
    from reasoner.training.ppo import VALUE_HEAD

    run = tmp_path / "run"
    _two_ranks(29660, "train", micro_model, run, 3, 1)  # one step: the critic's warm-up
    start = load_model(micro_model)
    head = torch.load(run / "final" / VALUE_HEAD, weights_only=True)
    assert head["state"]["linear.weight"].shape == (1, start.config.hidden_size)
    assert head["state"]["linear.bias"].shape == (1,) and head["state"]["linear.bias"].abs().item() > 0
    assert head["updates"] == 1
    start_weights, warmed = start.state_dict(), load_model(run / "final").state_dict()
    assert all(torch.equal(warmed[k], v) for k, v in start_weights.items())

    _two_ranks(29661, "train", micro_model, run, 3, 2)  # resumes from the step-1 checkpoint
    head = torch.load(run / "final" / VALUE_HEAD, weights_only=True)
    assert head["updates"] == 2 and head["optimizer"]["optimizer"]["state"][0]["step"] == 2  # Adam's state came back
    trained = load_model(run / "final").state_dict()
    assert any(not torch.equal(trained[k], v) for k, v in start_weights.items())
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
