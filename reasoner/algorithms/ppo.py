"""PPO for language models (Schulman et al. 2017; Ouyang et al. 2022 for the per-token KL in the reward).

A response is an episode, a token an action; the verifier's score arrives on the last token and the KL to
the reference is paid on every token. A critic V(s_t) estimates the return before each token, and GAE
turns rewards and values into advantages.

Departures from the paper, each a knob (defaults in brackets):
- gamma and lambda default to 1.0 as in veRL, not 0.99 / 0.95: episodes are short and the only reward is
  at the end, so discounting would only favour short answers [1.0 / 1.0];
- the value loss is clipped around the old values (as in OpenAI's baselines, not the paper) [0.2];
- advantages are whitened over the batch's real tokens (baselines, cleanrl) [on];
- the critic may be trained alone for the first steps (critic warm-up, as in OpenRLHF) [0].
"""

from __future__ import annotations

import torch

from reasoner.algorithms.common import masked_mean


def token_rewards(
    score: torch.Tensor,  # [B] the verifier's reward of each response
    kl: torch.Tensor | None,  # [B, T] per-token KL estimate to the reference, None without a reference
    mask: torch.Tensor,  # [B, T]
    beta: float,
) -> torch.Tensor:
    """r_t = -beta * kl_t on every token, plus the score on the last real token: [B, T]."""
    rewards = torch.zeros_like(mask) if kl is None else -beta * kl * mask  # [B, T]
    last = (mask > 0).cumsum(-1).argmax(-1)  # [B] index of each response's last token (the mask may have holes)
    return rewards.scatter_add(-1, last[:, None], score[:, None].to(rewards.dtype))  # [B, T]


def gae(
    rewards: torch.Tensor,  # [B, T]
    values: torch.Tensor,  # [B, T] V(s_t), the critic's estimate before token t
    mask: torch.Tensor,  # [B, T] responses right-padded: the episode ends at the last 1
    gamma: float = 1.0,
    gae_lambda: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) as a reversed loop: (advantages, returns).
    Tokens under a 0 of the mask are not actions (padding, a tool's output): the recursion steps over
    them, from each action to the next one."""
    rewards, values = rewards * mask, values * mask  # after the end, value and reward are 0
    advantages = torch.zeros_like(rewards)  # [B, T]
    last_gae = torch.zeros_like(rewards[:, 0])  # [B] the advantage of the next action
    next_value = torch.zeros_like(last_gae)  # [B] the value before the next action
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # [B]
        action = mask[:, t] > 0  # [B]
        last_gae = torch.where(action, delta + gamma * gae_lambda * last_gae, last_gae)
        next_value = torch.where(action, values[:, t], next_value)
        advantages[:, t] = last_gae
    advantages = advantages * mask
    return advantages, (advantages + values) * mask


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, mean: torch.Tensor | None = None,
           var: torch.Tensor | None = None) -> torch.Tensor:
    """(x - mean) / std over the real tokens; padding stays 0. The mean and variance are this batch's unless
    given (those of the whole batch when it is split over ranks)."""
    mean = masked_mean(x, mask) if mean is None else mean
    var = masked_mean((x - mean) ** 2, mask) if var is None else var
    return (x - mean) * torch.rsqrt(var + eps) * mask


def value_loss(
    values: torch.Tensor,  # [B, T] current critic
    old_values: torch.Tensor,  # [B, T] the critic when the rollout was taken
    returns: torch.Tensor,  # [B, T] GAE targets
    mask: torch.Tensor,  # [B, T]
    clip: float | None = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token 0.5 * max((V - R)^2, (clip(V, V_old +- clip) - R)^2); no clipping when clip is None."""
    unclipped = (values - returns) ** 2  # [B, T]
    if clip is None:
        return 0.5 * unclipped, {"value_clip_frac": torch.tensor(0.0)}
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)  # [B, T]
    clipped = (clipped_values - returns) ** 2  # [B, T]
    stats = {"value_clip_frac": masked_mean((clipped > unclipped).float(), mask).detach()}
    return 0.5 * torch.maximum(unclipped, clipped), stats
