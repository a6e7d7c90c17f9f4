"""RLOO, REINFORCE++, GSPO, CISPO, DAPO's soft overlong punishment and the rollout/trainer mismatch
correction, against small examples computed by hand (default tolerances)."""

import math

import pytest
import torch

from reasoner.algorithms.cispo import cispo_loss
from reasoner.algorithms.common import BatchSizes, soft_overlong_penalty
from reasoner.algorithms.grpo import group_advantages
from reasoner.algorithms.gspo import gspo_loss
from reasoner.algorithms.mismatch import rollout_mismatch, truncated_importance_weights
from reasoner.algorithms.reinforce_pp import group_baseline_scores, reinforce_pp_advantages, returns_to_go
from reasoner.algorithms.rloo import leave_one_out_advantages


def test_leave_one_out_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    # sample 0: 1 - mean(0, 0, 1) = 2/3; sample 1: 0 - mean(1, 0, 1) = -2/3
    torch.testing.assert_close(leave_one_out_advantages(rewards), torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3]]))


def test_rloo_is_n_over_n_minus_1_times_grpo_unscaled():
    rewards = torch.tensor([[1.0, 0.0, 0.5, 1.0, 0.0], [0.2, 0.9, 0.9, 0.1, 0.4]])
    n = rewards.shape[1]
    torch.testing.assert_close(leave_one_out_advantages(rewards), n / (n - 1) * group_advantages(rewards, scale_by_std=False))


def test_rloo_needs_two_samples():
    with pytest.raises(ValueError):
        leave_one_out_advantages(torch.tensor([[1.0]]))


def test_returns_to_go_by_hand():
    rewards = torch.tensor([[0.1, 0.2, 0.3, 0.0], [1.0, 2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    torch.testing.assert_close(returns_to_go(rewards, mask), torch.tensor([[0.6, 0.5, 0.3, 0.0], [3.0, 2.0, 0.0, 0.0]]))


def test_reinforce_pp_advantages_by_hand():
    """Two responses of 2 and 1 tokens, score 1 and 0, KL 0.5 per token, beta 0.1: token rewards
    [-0.05, 0.95] and [-0.05]; returns [0.9, 0.95] and [-0.05]; whitened over the three real tokens."""
    score, mask = torch.tensor([1.0, 0.0]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    kl = torch.full((2, 2), 0.5)
    returns = torch.tensor([0.9, 0.95, -0.05])
    mean, std = returns.mean(), returns.std(unbiased=False)
    expected = torch.tensor([[(0.9 - mean) / std, (0.95 - mean) / std], [(-0.05 - mean) / std, 0.0]])
    torch.testing.assert_close(reinforce_pp_advantages(score, kl, mask, beta=0.1), expected, atol=1e-5, rtol=1e-4)


def test_reinforce_pp_baseline_subtracts_the_group_mean_first():
    torch.testing.assert_close(group_baseline_scores(torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])),
                               torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0]]))


def test_gspo_sequence_ratio_and_clip_by_hand():
    """Sequence 0: token log-ratios log 1.1 and log 0.9 over 2 tokens, s = sqrt(0.99); sequence 1: one token,
    s = 1.5, advantage > 0, clipped at 1 + 0.2."""
    old = torch.zeros(2, 2)
    logp = torch.log(torch.tensor([[1.1, 0.9], [1.5, 1.0]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([-1.0, 2.0])
    loss, stats = gspo_loss(logp, old, adv, mask, BatchSizes(3, 2, 2), clip_low=0.2, clip_high=0.2)
    s0 = math.sqrt(0.99)
    expected = (-min(s0 * -1.0, s0 * -1.0) + -min(1.5 * 2.0, 1.2 * 2.0)) / 2
    torch.testing.assert_close(loss, torch.tensor(expected))
    torch.testing.assert_close(stats["clip_frac"], torch.tensor(0.5))


def test_gspo_ignores_a_fully_masked_row():
    """Micro-batches are padded with masked rows (batches.py); such a row is no sequence: no loss, no stats."""
    logp, mask = torch.log(torch.tensor([[1.5, 1.0], [3.0, 3.0]])), torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    loss, stats = gspo_loss(logp, torch.zeros(2, 2), torch.tensor([2.0, 5.0]), mask, BatchSizes(1, 1, 2), 0.2, 0.2)
    torch.testing.assert_close(loss, torch.tensor(-1.2 * 2.0))
    torch.testing.assert_close(stats["clip_frac"], torch.tensor(1.0))


def test_gspo_gradient_is_the_sequence_mean_of_token_gradients():
    """On-policy (s = 1, unclipped), d loss / d logp_t = -A_i / |y_i| / B for each real token."""
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    loss, _ = gspo_loss(logp, torch.zeros(2, 3), torch.tensor([3.0, -1.0]), mask, BatchSizes(4, 2, 3))
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, -0.5, -0.5], [0.5, 0.0, 0.0]]))


def test_cispo_keeps_the_gradient_of_clipped_tokens():
    """Token ratios 2.0 (clipped to 1.28) and 0.5: both tokens keep a gradient, weighed by the detached
    clipped ratio; PPO's clip would have zeroed the first."""
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[2.0, 0.5]])).requires_grad_()
    adv = torch.tensor([1.0])
    loss, stats = cispo_loss(logp, old, adv, torch.ones(1, 2), BatchSizes(2, 1, 2), clip_high=0.28)
    torch.testing.assert_close(loss, -(1.28 * math.log(2.0) + 0.5 * math.log(0.5)) / 2 * torch.ones(()))
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.28 / 2, -0.5 / 2]]))
    torch.testing.assert_close(stats["clip_frac"], torch.tensor(0.5))


def test_soft_overlong_penalty_by_hand():
    lengths = torch.tensor([10, 96, 100, 112, 128, 140])
    # max 128, buffer 32: no penalty up to 96, then -(L - 96) / 32, and -1 from 128 on
    torch.testing.assert_close(soft_overlong_penalty(lengths, 128, 32),
                               torch.tensor([0.0, 0.0, -0.125, -0.5, -1.0, -1.0]))


def test_rollout_mismatch_and_truncated_importance_weights_by_hand():
    sampler = torch.log(torch.tensor([[0.5, 0.25], [0.8, 0.1]]))
    trainer = torch.log(torch.tensor([[0.5, 0.75], [0.4, 0.9]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # the last token is padding
    stats = rollout_mismatch(trainer, sampler, mask)
    ratios = torch.tensor([1.0, 3.0, 0.5])
    k3 = ratios - torch.log(ratios) - 1
    torch.testing.assert_close(stats["rollout_logprob_kl"], k3.mean())
    torch.testing.assert_close(stats["rollout_ratio_max"], torch.tensor(3.0))
    torch.testing.assert_close(stats["rollout_ratio_mean"], ratios.mean())
    torch.testing.assert_close(truncated_importance_weights(trainer, sampler, cap=2.0),
                               torch.tensor([[1.0, 2.0], [0.5, 2.0]]))
