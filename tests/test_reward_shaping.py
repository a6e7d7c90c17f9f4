"""GRPO's reward-shaping knobs by hand: truncated samples kept, masked, punished flat or softly; KL in the reward."""

import torch

from reasoner.algorithms.common import TRUNCATION, kl_penalised_rewards
from reasoner.algorithms.grpo import group_advantages

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
TRUNCATED = torch.tensor([[False, True, False, False]])
LENGTHS = torch.tensor([[10, 16, 13, 4]])  # cap 16


def test_keep_leaves_rewards_and_trains_on_everything():
    rewards, keep = TRUNCATION["keep"](REWARDS, TRUNCATED, LENGTHS, 1.0, 16, 8)
    torch.testing.assert_close(rewards, REWARDS)
    assert keep.all()


def test_mask_drops_truncated_samples_from_the_loss_only():
    rewards, keep = TRUNCATION["mask"](REWARDS, TRUNCATED, LENGTHS, 1.0, 16, 8)
    torch.testing.assert_close(rewards, REWARDS)
    assert keep.tolist() == [[True, False, True, True]]


def test_punish_takes_the_penalty_from_truncated_rewards():
    rewards, keep = TRUNCATION["punish"](REWARDS, TRUNCATED, LENGTHS, 0.5, 16, 8)
    torch.testing.assert_close(rewards, torch.tensor([[1.0, -0.5, 0.0, 1.0]]))
    assert keep.all()
    # the punished sample now sits below the other wrong one: mean 0.375, centred [0.625, -0.875, -0.375, 0.625]
    torch.testing.assert_close(group_advantages(rewards, scale_by_std=False),
                               torch.tensor([[0.625, -0.875, -0.375, 0.625]]))


def test_soft_punishment_rises_linearly_over_the_buffer_before_the_cap():
    # cap 16, buffer 4: free up to 12 tokens, then -penalty * (length - 12) / 4, the whole penalty at the cap
    rewards, keep = TRUNCATION["soft"](REWARDS, TRUNCATED, LENGTHS, 0.5, 16, 4)
    torch.testing.assert_close(rewards, torch.tensor([[1.0, -0.5, -0.125, 1.0]]))
    assert keep.all()


def test_soft_punishment_refuses_a_buffer_outside_the_cap():
    import pytest

    for buffer in (0, 17):
        with pytest.raises(ValueError, match="overlong-buffer"):
            TRUNCATION["soft"](REWARDS, TRUNCATED, LENGTHS, 1.0, 16, buffer)


def test_kl_in_the_reward_subtracts_beta_times_the_summed_kl():
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    shaped = kl_penalised_rewards(torch.tensor([1.0, 0.0]), kl, mask, beta=0.5)
    torch.testing.assert_close(shaped, torch.tensor([1.0 - 0.5 * 0.6, 0.0 - 0.5 * 0.9]))
