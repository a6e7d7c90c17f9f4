"""PPO's pieces against small examples computed by hand (default tolerances), and a smoke run of the trainer."""

import json
import math

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


def test_policy_and_values_agrees_with_response_logprobs(micro_model):
    from data.synthetic import generate
    from reasoner.modeling import load_model, load_tokenizer
    from reasoner.training.ppo import ValueHead, policy_and_values
    from reasoner.training.rollout import encode_prompts, pad_batch, response_logprobs

    tokenizer, model = load_tokenizer(micro_model), load_model(micro_model)
    tasks = generate("math", "train", 2, 0)
    batch = pad_batch(encode_prompts(tokenizer, tasks), [[5, 6, 7], [8]], tokenizer.pad_token_id)
    with torch.no_grad():
        expected, expected_entropy = response_logprobs(model, batch, 0.7, with_entropy=True)
        logp, values, entropy = policy_and_values(model, ValueHead(model.config.hidden_size), batch, 0.7, True, True)
    torch.testing.assert_close(logp, expected)
    torch.testing.assert_close(entropy, expected_entropy)
    assert values.shape == logp.shape


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
