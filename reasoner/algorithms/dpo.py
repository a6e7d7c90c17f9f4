"""Preference losses on (chosen, rejected) pairs: sigmoid DPO (Rafailov et al. 2023) and IPO (Azar et al. 2023).

Inputs are the summed log-probs of each whole response under the policy and under the frozen reference.
With h = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l)):
- DPO:  -log sigmoid(beta * h), optionally with label smoothing eps (the "conservative DPO" of the
  authors' code): -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h);
- IPO:  (h - 1 / (2 beta))^2, with h from sums as in the paper. TRL averages log-probs over tokens
  for IPO instead; we keep the paper's sums so that both losses see the same h;
- optionally plus alpha times the length-normalised NLL of the chosen answer (Iterative RPO, Pang et al.
  2024, which pairs verified right and wrong reasoning as we do): plain DPO tends to lower the
  likelihood of both answers, and sampling from the policy then gets worse, not better.
In our pipeline the pairs are verified: chosen is a sample the verifier accepted, rejected one it did not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def implicit_margin(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
                    ref_rejected: torch.Tensor) -> torch.Tensor:
    """h: [P] how much more the policy than the reference prefers chosen over rejected."""
    return (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)


def dpo_sigmoid_loss(h: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """[P] -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)."""
    return -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)


def ipo_loss(h: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """[P] (h - 1 / (2 beta))^2; IPO has no label smoothing (it is already bounded)."""
    return (h - 1.0 / (2.0 * beta)) ** 2


PREFERENCE_LOSSES = {"sigmoid": dpo_sigmoid_loss, "ipo": ipo_loss}


def chosen_nll(policy_chosen: torch.Tensor, chosen_lengths: torch.Tensor) -> torch.Tensor:
    """Mean over pairs of -log pi(y_w) / |y_w|: the RPO term, [P], [P] -> scalar."""
    return -(policy_chosen / chosen_lengths.clamp(min=1)).mean()


def preference_loss(
    policy_chosen: torch.Tensor,  # [P] sum of log pi over the chosen response's tokens
    policy_rejected: torch.Tensor,  # [P]
    ref_chosen: torch.Tensor,  # [P] the same under the reference, computed once and cached
    ref_rejected: torch.Tensor,  # [P]
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Mean loss over pairs and its statistics (implicit rewards beta * log(pi / ref))."""
    h = implicit_margin(policy_chosen, policy_rejected, ref_chosen, ref_rejected)  # [P]
    loss = PREFERENCE_LOSSES[loss_type](h, beta, label_smoothing).mean()
    chosen_reward = beta * (policy_chosen - ref_chosen).detach()  # [P]
    rejected_reward = beta * (policy_rejected - ref_rejected).detach()  # [P]
    stats = {
        "reward_accuracy": (chosen_reward > rejected_reward).float().mean(),
        "reward_margin": (chosen_reward - rejected_reward).mean(),
        "chosen_reward": chosen_reward.mean(),
        "rejected_reward": rejected_reward.mean(),
    }
    return loss, stats
