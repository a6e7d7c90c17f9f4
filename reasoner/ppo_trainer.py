"""PPO with a critic: the GRPO loop of `trainer.py` with a different update.

The critic is a value head (one linear layer) on the policy's last hidden state. With `critic=shared` the
value loss also trains the backbone (weighted by `vf_coef`), as in the original RLHF PPO; with `probe`
the head reads detached features and the policy is trained by the policy loss alone. During the first
`critic_warmup_steps` steps only the head learns, so that the first advantages are not noise.
The head is saved as `value_head.pt` beside the model's weights, in every checkpoint and in `final/`.
Rewards: the verifier's score on the last token, minus beta * KL to the reference on every token.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from data.records import Task
from reasoner.algorithms.common import AGGREGATIONS, KL_ESTIMATORS, TRUNCATION, BatchSizes, clipped_policy_loss, masked_mean
from reasoner.algorithms.ppo import gae, token_rewards, value_loss, whiten
from reasoner.config import TrainConfig
from reasoner.rollout import Rollout, micro_batches, response_forward, response_logprobs, token_logprobs, trim_padding
from reasoner.trainer import Algorithm, rollout_batch, train

log = logging.getLogger(__name__)
VALUE_HEAD = "value_head.pt"


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


def pad_columns(x: torch.Tensor, width: int) -> torch.Tensor:
    """[B, R'] -> [B, width], zeros on the right (a trimmed micro-batch's columns back to the batch's)."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


class PPO:
    """The PPO update and its critic, plugged into `trainer.train` as an `Algorithm`."""

    def __init__(self, config: TrainConfig, model):
        self.config = config
        self.head = ValueHead(model.config.hidden_size)
        self.updates = 0

    def algorithm(self) -> Algorithm:
        return Algorithm(update=self.update, save=self.save, load=self.load, refills_equal_groups=False,
                         param_groups=[{"params": list(self.head.parameters()), "lr": self.config.ppo.critic_lr}])

    def save(self, directory: Path) -> None:
        torch.save({"state": self.head.state_dict(), "updates": self.updates}, Path(directory) / VALUE_HEAD)

    def load(self, directory: Path) -> None:
        blob = torch.load(Path(directory) / VALUE_HEAD, weights_only=True)
        self.head.load_state_dict(blob["state"])
        self.updates = blob["updates"]

    def update(self, config: TrainConfig, model, reference, tokenizer, engine, rollout: Rollout) -> dict:
        ppo, temperature = config.ppo, config.sampling.temperature
        truncated = torch.tensor([s.truncated for s in rollout.samples])  # [N]
        scores, keep = TRUNCATION[config.truncation](rollout.rewards.flatten(), truncated, config.truncation_penalty)
        rows = keep.nonzero().squeeze(-1).tolist()
        if not rows:
            return {"loss": 0.0, "kl": 0.0, "entropy": float("nan"), "grad_norm": 0.0, "train_tokens": 0}
        rows.sort(key=lambda i: len(rollout.samples[i].token_ids))  # micro-batches of similar lengths pad little
        batch = rollout_batch(tokenizer, rollout, rows)
        mask = batch["response_mask"]  # [N, T]
        warming = self.updates < ppo.critic_warmup_steps
        detach = warming or ppo.critic == "probe"
        with torch.no_grad():
            trimmed = [trim_padding(mb) for mb in micro_batches(batch, config.micro_batch_size)]
            full = lambda parts: torch.cat([pad_columns(x, mask.shape[1]) for x in parts])  # back to [N, T]
            pieces = [policy_and_values(model, self.head, mb, temperature, True) for mb in trimmed]
            old_logp, old_values = full(p[0] for p in pieces), full(p[1] for p in pieces)  # [N, T]
            kl = None
            if reference is not None:
                ref_logp = full(response_logprobs(reference, mb, temperature)[0] for mb in trimmed)  # [N, T]
                kl = KL_ESTIMATORS[config.kl_estimator](old_logp, ref_logp)  # [N, T]
        rewards = token_rewards(scores[rows], kl, mask, config.beta)  # [N, T]
        advantages, returns = gae(rewards, old_values, mask, ppo.gamma, ppo.gae_lambda)  # [N, T]
        if ppo.whiten_advantages:
            advantages = whiten(advantages, mask)
        batch.update(old_logp=old_logp, old_values=old_values, advantages=advantages, returns=returns)
        sizes = BatchSizes(tokens=int(mask.sum()), sequences=len(rows), max_new_tokens=config.sampling.max_new_tokens)
        aggregate = AGGREGATIONS[config.aggregation]

        model.train()
        totals = {"kl": float(masked_mean(kl, mask)) if kl is not None else 0.0,
                  "value_mean": float(masked_mean(old_values, mask)),
                  "return_mean": float(masked_mean(returns, mask)), "critic_warmup": float(warming)}
        pieces = [trim_padding(mb) for mb in micro_batches(batch, config.micro_batch_size)]
        for epoch in range(config.epochs_per_batch):
            for mb in pieces:
                m = mb["response_mask"]
                logp, values, entropy = policy_and_values(model, self.head, mb, temperature, detach, epoch == 0)
                pg, stats = clipped_policy_loss(logp, mb["old_logp"], mb["advantages"], m, config.clip_low,
                                                config.clip_high)
                vl, vstats = value_loss(values, mb["old_values"], mb["returns"], m, ppo.value_clip or None)
                policy_loss, critic_loss = aggregate(pg, m, sizes), aggregate(vl, m, sizes)
                loss = critic_loss if warming else policy_loss + ppo.vf_coef * critic_loss
                engine.backward(loss, last=mb is pieces[-1])
                share = m.sum().item() / sizes.tokens / config.epochs_per_batch
                for key, value in {**stats, **vstats, "loss": loss.detach(), "policy_loss": policy_loss.detach(),
                                   "value_loss": critic_loss.detach()}.items():
                    weight = share if key in stats or key in vstats else 1.0 / config.epochs_per_batch
                    totals[key] = totals.get(key, 0.0) + float(value) * weight
                if entropy is not None:
                    totals["entropy"] = totals.get("entropy", 0.0) + float((entropy * m).sum()) / sizes.tokens
            if warming:  # the policy must not move while only the critic learns
                for p in model.parameters():
                    p.grad = None
            grad_norm = engine.step()
        model.eval()
        self.updates += 1
        totals["grad_norm"] = float(grad_norm)
        totals["train_tokens"] = sizes.tokens * config.epochs_per_batch
        return totals


def train_ppo(config: TrainConfig, model, tokenizer, tasks: list[Task], heldout: list[Task] | None = None) -> Path:
    """PPO from the last checkpoint in `config.output` (or from scratch); the value head lands beside the model."""
    return train(config, model, tokenizer, tasks, heldout, algorithm=PPO(config, model).algorithm())
