"""GRPO's pieces against small examples computed by hand (default tolerances)."""

import math

import pytest
import torch

from reasoner.algorithms.common import (
    BatchSizes, clipped_policy_loss, constant_normaliser, kl_k1, kl_k2, kl_k3, sequence_mean, token_mean,
)
from reasoner.algorithms.grpo import group_advantages, grpo_loss, weight_negatives


def test_group_advantages_with_std_scaling():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    # group 1: mean 0.5, unbiased std sqrt(1/3); group 2: mean 0.75, std 0.5
    expected = torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.25, 0.25, 0.25, -0.75]]) / torch.tensor([[math.sqrt(1 / 3)], [0.5]])
    torch.testing.assert_close(group_advantages(rewards, scale_by_std=True, eps=0.0), expected)


def test_group_advantages_without_std_scaling_is_centred_reward():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    expected = torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.25, 0.25, 0.25, -0.75]])
    torch.testing.assert_close(group_advantages(rewards, scale_by_std=False), expected)


def test_equal_rewards_give_zero_advantage_not_nan():
    adv = group_advantages(torch.tensor([[1.0, 1.0, 1.0]]), scale_by_std=True)
    torch.testing.assert_close(adv, torch.zeros(1, 3))


def test_weight_negatives_scales_only_negative_advantages():
    advantages = torch.tensor([[1.5, -0.5, -1.0, 0.0]])
    torch.testing.assert_close(weight_negatives(advantages, 0.2), torch.tensor([[1.5, -0.1, -0.2, 0.0]]))
    torch.testing.assert_close(weight_negatives(advantages, 1.0), advantages)  # plain GRPO
    torch.testing.assert_close(weight_negatives(advantages, 0.0), torch.tensor([[1.5, 0.0, 0.0, 0.0]]))


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    torch.testing.assert_close(kl_k1(logp, ref), torch.tensor([math.log(2)]))
    torch.testing.assert_close(kl_k2(logp, ref), torch.tensor([0.5 * math.log(2) ** 2]))
    torch.testing.assert_close(kl_k3(logp, ref), torch.tensor([0.5 + math.log(2) - 1]))


def test_kl_estimators_are_zero_on_equal_policies():
    x = torch.tensor([-1.0, -2.0])
    for fn in (kl_k1, kl_k2, kl_k3):
        torch.testing.assert_close(fn(x, x), torch.zeros(2))


def test_clipping_on_both_sides():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 0.5, 1.5]]))  # ratios
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    loss, stats = clipped_policy_loss(logp, old, adv, torch.ones(1, 4), clip_low=0.2, clip_high=0.2)
    # ratio 1.5, A>0: clipped to 1.2; ratio 0.5, A<0: clipped to 0.8; the other two are not clipped
    torch.testing.assert_close(loss, torch.tensor([[-1.2, 0.8, -0.5, 1.5]]))
    torch.testing.assert_close(stats["clip_frac_high"], torch.tensor(0.25))
    torch.testing.assert_close(stats["clip_frac_low"], torch.tensor(0.25))


def test_asymmetric_clipping_uses_eps_high_above_one():
    loss, _ = clipped_policy_loss(torch.log(torch.tensor([[1.5, 0.5]])), torch.zeros(1, 2),
                                  torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), clip_low=0.1, clip_high=0.3)
    torch.testing.assert_close(loss, torch.tensor([[-1.3, 0.9]]))


LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
SIZES = BatchSizes(tokens=4, sequences=2, max_new_tokens=4)


@pytest.mark.parametrize("fn, expected", [
    (token_mean, 10 / 4),  # every token weighs the same
    (sequence_mean, (2 + 4) / 2),  # mean of per-sequence means
    (constant_normaliser, 10 / (2 * 4)),  # Dr. GRPO: sequences x max length
])
def test_aggregations_by_hand(fn, expected):
    torch.testing.assert_close(fn(LOSS, MASK, SIZES), torch.tensor(expected))


def test_aggregations_sum_over_micro_batches_to_the_full_batch():
    for fn in (token_mean, sequence_mean, constant_normaliser):
        whole = fn(LOSS, MASK, SIZES)
        parts = fn(LOSS[:1], MASK[:1], SIZES) + fn(LOSS[1:], MASK[1:], SIZES)
        torch.testing.assert_close(parts, whole)


def test_grpo_loss_at_old_policy_is_minus_mean_advantage_plus_kl():
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    ref = torch.log(torch.tensor([[0.25, 0.25], [0.25, 0.25]]))
    adv = torch.tensor([1.0, -0.5])
    mask = torch.ones(2, 2)
    loss, stats = grpo_loss(logp, logp, ref, adv, mask, BatchSizes(4, 2, 2), beta=0.1, kl_estimator="k3")
    k3 = 0.5 + math.log(2) - 1
    torch.testing.assert_close(loss, torch.tensor(-(1.0 * 2 - 0.5 * 2) / 4 + 0.1 * k3))
    torch.testing.assert_close(stats["kl"], torch.tensor(k3))


def test_grpo_gradient_raises_logprob_of_positive_advantage():
    logits = torch.zeros(2, 3, requires_grad=True)
    logp = torch.log_softmax(logits, -1)[:, :1]  # [2, 1]: log-prob of token 0
    loss, _ = grpo_loss(logp, logp.detach(), None, torch.tensor([1.0, -1.0]), torch.ones(2, 1), BatchSizes(2, 2, 1))
    loss.backward()
    assert logits.grad[0, 0] < 0 < logits.grad[1, 0]  # descent raises token 0 for A>0, lowers it for A<0
