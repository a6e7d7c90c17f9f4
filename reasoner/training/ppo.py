"""PPO's update step and its critic: a value head, GAE advantages, the clipped surrogate and value loss.

The critic is a value head (one linear layer) on the policy's last hidden state. With `critic=shared` the
value loss also trains the backbone (weighted by `vf_coef`), as in the original RLHF PPO; with `probe`
the head reads detached features and the policy is trained by the policy loss alone. During the first
`critic_warmup_steps` steps only the head learns, so that the first advantages are not noise.
The head is saved as `value_head.pt` beside the model's weights, in every checkpoint and in `final/`.
Rewards: the verifier's score on the last token, minus beta * KL to the reference on every token.
The math is in `reasoner/algorithms/ppo.py`; the batches are GRPO's (`groups.py`), without dynamic
sampling: the critic learns from all-equal groups too.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from data.records import Task
from reasoner.training import distributed
from reasoner.algorithms.common import AGGREGATIONS, KL_ESTIMATORS, clipped_policy_loss
from reasoner.algorithms.ppo import gae, token_rewards, value_loss, whiten
from reasoner.config import TrainConfig
from reasoner.training.rollout import Rollout, response_forward, response_logprobs, token_logprobs
from reasoner.training.batches import add_shares, prepare_update, reduce_sums, shaped_rewards
from reasoner.training.groups import GroupSource
from reasoner.training.loop import Algorithm, Learner

log = logging.getLogger("reasoner.train")
VALUE_HEAD = "value_head.pt"
EMPTY = {"loss": 0.0, "kl": 0.0, "entropy": float("nan"), "grad_norm": 0.0, "train_tokens": 0}


class ValueHead(torch.nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)  # start from V = 0 everywhere: no advantage is made up
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden).squeeze(-1)  # [B, T, H] -> [B, T]


def policy_and_values(model, head: ValueHead, batch: dict, temperature: float, detach_features: bool,
                      with_entropy: bool = False):
    """One forward: log-probs [B, R] of the response tokens, V(s_t) [B, R] before each, entropy [B, R] or None."""
    width = batch["prompt_width"]
    out = response_forward(model, batch, output_hidden_states=True)
    features = out.hidden_states[-1][:, width - 1:-1]  # [B, R, H]: the state that predicts token t
    values = head(features.detach() if detach_features else features)  # [B, R]
    logp, entropy = token_logprobs(out.logits[:, :-1], batch["input_ids"][:, width:], temperature, with_entropy)
    return logp, values, entropy


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum())


def global_moments(x: torch.Tensor, mask: torch.Tensor, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of x over the real tokens of every rank."""
    mean = distributed.all_reduce([masked_sum(x, mask)])[0] / tokens
    var = distributed.all_reduce([masked_sum((x - mean) ** 2, mask)])[0] / tokens
    return torch.tensor(mean, dtype=x.dtype), torch.tensor(var, dtype=x.dtype)


class PPO:
    """The PPO update step and its critic."""

    def __init__(self, config: TrainConfig, hidden_size: int):
        self.config = config
        self.head = ValueHead(hidden_size)
        self.updates = 0

    def save(self, directory: Path) -> None:
        torch.save({"state": self.head.state_dict(), "updates": self.updates}, Path(directory) / VALUE_HEAD)

    def load(self, directory: Path) -> None:
        blob = torch.load(Path(directory) / VALUE_HEAD, weights_only=True)
        self.head.load_state_dict(blob["state"])
        self.updates = blob["updates"]

    def update(self, learner: Learner, rollout: Rollout) -> dict:
        """One PPO update on this rank's rollout; returns detached statistics of the whole (global) batch."""
        config, ppo, temperature = self.config, self.config.ppo, self.config.sampling.temperature
        scores, keep = shaped_rewards(rollout, config.truncation, config.truncation_penalty)  # [G, n], [N]
        prepared = prepare_update(learner.tokenizer, rollout, keep, config.micro_batch_size,
                                  config.sampling.max_new_tokens)
        if prepared.empty:
            return dict(EMPTY)
        batch, sizes = prepared.batch, prepared.sizes
        mask = batch["response_mask"]  # [N, T]
        warming = self.updates < ppo.critic_warmup_steps
        detach = warming or ppo.critic == "probe"
        with torch.no_grad():
            pieces = prepared.pieces()  # every rank runs as many forwards (ZeRO 3 gathers weights in each)
            old = [policy_and_values(learner.model, self.head, mb, temperature, True) for mb in pieces]
            old_logp, old_values = prepared.join(p[0] for p in old), prepared.join(p[1] for p in old)  # [N, T]
            kl = None
            if learner.reference is not None:
                ref_logp = prepared.join(response_logprobs(learner.reference, mb, temperature)[0] for mb in pieces)
                kl = KL_ESTIMATORS[config.kl_estimator](old_logp, ref_logp)  # [N, T]
        rewards = token_rewards(scores.flatten()[prepared.rows], kl, mask, config.beta)  # [N, T]
        advantages, returns = gae(rewards, old_values, mask, ppo.gamma, ppo.gae_lambda)  # [N, T]
        if ppo.whiten_advantages:
            advantages = whiten(advantages, mask, 1e-8, *global_moments(advantages, mask, sizes.tokens))
        batch.update(old_logp=old_logp, old_values=old_values, advantages=advantages, returns=returns)
        aggregate, epochs = AGGREGATIONS[config.aggregation], config.epochs_per_batch

        learner.model.train()
        totals = {"kl": masked_sum(kl, mask) / sizes.tokens if kl is not None else 0.0,
                  "value_mean": masked_sum(old_values, mask) / sizes.tokens,
                  "return_mean": masked_sum(returns, mask) / sizes.tokens, "entropy": 0.0}
        pieces = prepared.pieces()
        for epoch in range(epochs):
            for i, mb in enumerate(pieces):
                m = mb["response_mask"]
                logp, values, entropy = policy_and_values(learner.model, self.head, mb, temperature, detach, epoch == 0)
                pg, stats = clipped_policy_loss(logp, mb["old_logp"], mb["advantages"], m, config.clip_low,
                                                config.clip_high)
                vl, vstats = value_loss(values, mb["old_values"], mb["returns"], m, ppo.value_clip or None)
                policy_loss, critic_loss = aggregate(pg, m, sizes), aggregate(vl, m, sizes)
                loss = critic_loss if warming else policy_loss + ppo.vf_coef * critic_loss
                learner.engine.backward(loss, last=i == len(pieces) - 1)
                add_shares(totals, {**stats, **vstats}, m.sum().item() / sizes.tokens / epochs)
                add_shares(totals, {"loss": loss.detach(), "policy_loss": policy_loss.detach(),
                                    "value_loss": critic_loss.detach()}, 1.0 / epochs)
                if entropy is not None:
                    totals["entropy"] += float((entropy * m).sum()) / sizes.tokens
            if warming:  # the policy must not move while only the critic learns
                for p in learner.model.parameters():
                    p.grad = None
            grad_norm = learner.engine.step()
        learner.model.eval()
        self.updates += 1
        return {**reduce_sums(totals), "critic_warmup": float(warming), "grad_norm": float(grad_norm),
                "train_tokens": float(mask.sum()) * epochs}


def ppo_algorithm(config: TrainConfig, model, tasks: list[Task]) -> Algorithm:
    """PPO for the loop: GRPO's groups without refills, the critic's head trained beside the policy."""
    if config.dynamic_sampling_rounds:
        log.info("train: ppo learns from all-equal groups too: dynamic sampling off (--dynamic-sampling-rounds "
                 "%d given, 0 used)", config.dynamic_sampling_rounds)
    ppo = PPO(config, model.config.hidden_size)
    return Algorithm("ppo", GroupSource(config, tasks, refill_rounds=0), ppo.update, needs_reference=config.beta > 0,
                     expected_steps=config.steps, save=ppo.save, load=ppo.load,
                     extra_modules=[(ppo.head, config.ppo.critic_lr)])
