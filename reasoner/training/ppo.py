"""PPO's update step and its critic: a value head, GAE advantages, the clipped surrogate and value loss.

The critic is a value head (one linear layer) on the policy's last hidden state, trained on the value loss
by its own optimiser (AdamW at `critic_lr`, the policy's warm-up schedule and gradient clip, gradients
summed over ranks). With `critic=shared` the value loss, weighted by `vf_coef`, also trains the backbone
through the head, as in the original RLHF PPO; with `probe` the policy is trained by the policy loss alone.
(The paper minimises policy loss + c1 x value loss with one optimiser; here `vf_coef` is c1 for the backbone
only, the head taking its own steps.)
During the first `critic_warmup_steps` steps only the head learns, so that the first advantages are not
noise: the policy's optimiser does not step at all, so its weights and its Adam state stay exactly as they
were on every engine. Being outside the policy's engine, the head is never split by ZeRO 3; it is saved
whole, with its optimiser, as `value_head.pt` beside the model's weights, in every checkpoint and in `final/`.
Rewards: the verifier's score on the last token, minus beta * KL to the reference on every token.
The math is in `reasoner/algorithms/ppo.py`; the batches are GRPO's (`groups.py`), without dynamic
sampling: the critic learns from all-equal groups too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from data.records import Task
from reasoner.training import distributed
from reasoner.algorithms.common import AGGREGATIONS, KL_ESTIMATORS, clipped_policy_loss
from reasoner.algorithms.ppo import gae, token_rewards, value_loss, whiten
from reasoner.config import PPOConfig, TrainConfig
from reasoner.training.rollout import Rollout, response_forward, response_logprobs, token_logprobs
from reasoner.algorithms.mismatch import truncated_importance_weights
from reasoner.training.batches import (add_shares, global_moments, masked_sum, mismatch_shares, prepare_update,
                                      reduce_sums, shaped_rewards)
from reasoner.training.groups import GroupPlan, GroupSource
from reasoner.training.loop import Algorithm, Learner


VALUE_HEAD = "value_head.pt"
EMPTY = {"loss": 0.0, "kl": 0.0, "entropy": float("nan"), "grad_norm": 0.0, "critic_grad_norm": 0.0, "train_tokens": 0}


class ValueHead(torch.nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)  # start from V = 0 everywhere: no advantage is made up
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """V [B, T] of hidden states [B, T, H], in fp32 whatever the policy's dtype; `frozen`: the gradient
        reaches the hidden states only, not the head."""
        weight, bias = self.linear.weight, self.linear.bias
        if frozen:
            weight, bias = weight.detach(), bias.detach()
        return torch.nn.functional.linear(hidden.float(), weight, bias).squeeze(-1)  # [B, T]


def policy_forward(model, batch: dict, temperature: float, with_entropy: bool = False,
                   dtype: torch.dtype | None = None):
    """One forward: log-probs [B, R] of the response tokens, the last hidden states [B, R, H] that predict
    them (the critic's features), and the entropy [B, R] (or None); zeros at padding."""
    out = response_forward(model, batch, dtype, hidden=True)
    logp, entropy = token_logprobs(out.logits, out.targets(batch), temperature, with_entropy)
    return out.scatter(logp), out.scatter(out.hidden), None if entropy is None else out.scatter(entropy)


@dataclass(frozen=True)
class PPOSettings:
    """What PPO reads, taken from the training config once (`PPOSettings.of`)."""

    ppo: PPOConfig
    temperature: float
    max_new_tokens: int
    micro_batch_size: int
    epochs: int
    truncation: str
    truncation_penalty: float
    overlong_buffer: int
    beta: float
    kl_estimator: str
    clip_low: float
    clip_high: float
    aggregation: str
    warmup_steps: int  # the critic's optimiser: the policy's learning-rate warm-up and gradient clip
    grad_clip: float
    tis_cap: float

    @classmethod
    def of(cls, c: TrainConfig) -> PPOSettings:
        return cls(c.ppo, c.sampling.temperature, c.sampling.max_new_tokens, c.micro_batch_size, c.epochs_per_batch,
                   c.truncation, c.truncation_penalty, c.overlong_buffer, c.beta, c.kl_estimator, c.clip_low,
                   c.clip_high, c.aggregation, c.warmup_steps, c.grad_clip, c.tis_cap)


class PPO:
    """The PPO update step and its critic: the value head and the head's own optimiser."""

    def __init__(self, settings: PPOSettings, hidden_size: int):
        self.s = settings
        self.head = ValueHead(hidden_size).to(distributed.device())
        self.critic = distributed.TorchEngine(self.head, settings.ppo.critic_lr, settings.warmup_steps,
                                              settings.grad_clip)
        self.updates = 0

    def save(self, directory: Path) -> None:
        torch.save({"state": self.head.state_dict(), "optimizer": self.critic.state_dict(), "updates": self.updates},
                   Path(directory) / VALUE_HEAD)

    def load(self, directory: Path) -> None:
        blob = torch.load(Path(directory) / VALUE_HEAD, weights_only=True)
        self.head.load_state_dict(blob["state"])
        self.critic.load_state_dict(blob["optimizer"])
        self.updates = blob["updates"]

    def update(self, learner: Learner, rollout: Rollout) -> dict:
        """One PPO update on this rank's rollout; returns detached statistics of the whole (global) batch."""
        stats = self.train_on(learner, rollout)
        self.critic.schedule()  # once per training step, as the loop steps the policy's schedule
        return stats

    def logp_and_values(self, model, batch: dict, temperature: float,
                        dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs [B, R] of the response tokens and V(s_t) [B, R] before each."""
        logp, features, _ = policy_forward(model, batch, temperature, dtype=dtype)
        return logp, self.head(features)

    def train_on(self, learner: Learner, rollout: Rollout) -> dict:
        s, ppo = self.s, self.s.ppo
        scores, keep = shaped_rewards(rollout, s.truncation, s.truncation_penalty, s.max_new_tokens,
                                      s.overlong_buffer)  # [G, n], [N]
        prepared = prepare_update(learner.tokenizer, rollout, keep, s.micro_batch_size, s.max_new_tokens)
        if prepared.empty:
            return dict(EMPTY)
        batch, sizes = prepared.batch, prepared.sizes
        mask = batch["response_mask"]  # [N, T]
        warming = self.updates < ppo.critic_warmup_steps
        with torch.no_grad():
            pieces = prepared.pieces()  # every rank runs as many forwards (ZeRO 3 gathers weights in each)
            old = [self.logp_and_values(learner.model, mb, s.temperature, learner.autocast) for mb in pieces]
            old_logp, old_values = prepared.join(p[0] for p in old), prepared.join(p[1] for p in old)  # [N, T]
            kl = None
            if learner.reference is not None:
                ref_logp = prepared.join(response_logprobs(learner.reference, mb, s.temperature, dtype=learner.autocast)[0] for mb in pieces)
                kl = KL_ESTIMATORS[s.kl_estimator](old_logp, ref_logp)  # [N, T]
        rewards = token_rewards(scores.flatten()[prepared.rows], kl, mask, s.beta)  # [N, T]
        advantages, returns = gae(rewards, old_values, mask, ppo.gamma, ppo.gae_lambda)  # [N, T]
        if ppo.whiten_advantages:
            advantages = whiten(advantages, mask, 1e-8, *global_moments(advantages, mask, sizes.tokens))
        batch.update(old_logp=old_logp, old_values=old_values, advantages=advantages, returns=returns)
        mismatch, ratio_max = mismatch_shares(old_logp, batch["sampler_logp"], mask, sizes.tokens)
        if s.tis_cap:
            batch["is_weights"] = truncated_importance_weights(old_logp, batch["sampler_logp"], s.tis_cap)  # [N, T]
        aggregate = AGGREGATIONS[s.aggregation]

        def critic_loss(values: torch.Tensor, mb: dict) -> tuple[torch.Tensor, dict]:
            m = mb["response_mask"]
            vl, vstats = value_loss(values, mb["old_values"], mb["returns"], m, ppo.value_clip or None)  # [b, R]
            return aggregate(vl, m, sizes), vstats

        learner.model.train()
        totals = {"kl": masked_sum(kl, mask) / sizes.tokens if kl is not None else 0.0,
                  "value_mean": masked_sum(old_values, mask) / sizes.tokens,
                  "return_mean": masked_sum(returns, mask) / sizes.tokens, "entropy": 0.0, **mismatch}
        pieces, grad_norm = prepared.pieces(), 0.0
        for epoch in range(s.epochs):
            for i, mb in enumerate(pieces):
                m = mb["response_mask"]
                with torch.set_grad_enabled(not warming):  # warming up, the policy is only read
                    logp, features, entropy = policy_forward(learner.model, mb, s.temperature, epoch == 0, learner.autocast)
                pg, stats = clipped_policy_loss(logp, mb["old_logp"], mb["advantages"], m, s.clip_low, s.clip_high)
                if "is_weights" in mb:
                    pg = pg * mb["is_weights"]
                policy_loss = aggregate(pg, m, sizes)
                head_loss, vstats = critic_loss(self.head(features.detach()), mb)
                head_loss.backward()  # the head's gradient, for its own optimiser
                if not warming:
                    loss = policy_loss
                    if ppo.critic == "shared":  # the value loss pulls on the backbone too, through the head as it is
                        loss = loss + ppo.vf_coef * critic_loss(self.head(features, frozen=True), mb)[0]
                    learner.engine.backward(loss, last=i == len(pieces) - 1)
                add_shares(totals, {**stats, **vstats}, m.sum().item() / sizes.tokens / s.epochs)
                objective = head_loss if warming else policy_loss + ppo.vf_coef * head_loss
                add_shares(totals, {"loss": objective.detach(), "policy_loss": policy_loss.detach(),
                                    "value_loss": head_loss.detach()}, 1.0 / s.epochs)
                if entropy is not None:
                    totals["entropy"] += float((entropy * m).sum()) / sizes.tokens
            if not warming:
                grad_norm = learner.engine.step()
            critic_grad_norm = self.critic.step()
        learner.model.eval()
        self.updates += 1
        return {**reduce_sums(totals), "rollout_ratio_max": distributed.all_reduce([ratio_max], "max")[0],
                "critic_warmup": float(warming), "grad_norm": float(grad_norm),
                "critic_grad_norm": critic_grad_norm, "train_tokens": float(mask.sum()) * s.epochs}


def ppo_algorithm(config: TrainConfig, model, tasks: list[Task]) -> Algorithm:
    """PPO for the loop: GRPO's groups without refills, the critic's head trained beside the policy."""
    ppo = PPO(PPOSettings.of(config), model.config.hidden_size)
    return Algorithm("ppo", GroupSource(GroupPlan.of(config, "ppo", dynamic_sampling=False), tasks), ppo.update, needs_reference=config.beta > 0,
                     expected_steps=config.steps, save=ppo.save, load=ppo.load)
