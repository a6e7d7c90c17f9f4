"""GRPO's reward-shaping knobs by hand: truncated samples kept, masked or punished; KL in the reward."""

import torch

from reasoner.algorithms.common import TRUNCATION, kl_penalised_rewards
from reasoner.algorithms.grpo import group_advantages

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
TRUNCATED = torch.tensor([[False, True, False, False]])


def test_keep_leaves_rewards_and_trains_on_everything():
    rewards, keep = TRUNCATION["keep"](REWARDS, TRUNCATED, 1.0)
    torch.testing.assert_close(rewards, REWARDS)
    assert keep.all()


def test_mask_drops_truncated_samples_from_the_loss_only():
    rewards, keep = TRUNCATION["mask"](REWARDS, TRUNCATED, 1.0)
    torch.testing.assert_close(rewards, REWARDS)
    assert keep.tolist() == [[True, False, True, True]]


def test_punish_takes_the_penalty_from_truncated_rewards():
    rewards, keep = TRUNCATION["punish"](REWARDS, TRUNCATED, 0.5)
    torch.testing.assert_close(rewards, torch.tensor([[1.0, -0.5, 0.0, 1.0]]))
    assert keep.all()
    # the punished sample now sits below the other wrong one: mean 0.375, centred [0.625, -0.875, -0.375, 0.625]
    torch.testing.assert_close(group_advantages(rewards, scale_by_std=False),
                               torch.tensor([[0.625, -0.875, -0.375, 0.625]]))


def test_kl_in_the_reward_subtracts_beta_times_the_summed_kl():
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    shaped = kl_penalised_rewards(torch.tensor([1.0, 0.0]), kl, mask, beta=0.5)
    torch.testing.assert_close(shaped, torch.tensor([1.0 - 0.5 * 0.6, 0.0 - 0.5 * 0.9]))
