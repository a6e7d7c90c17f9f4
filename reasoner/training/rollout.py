"""From sampled groups to training tensors: rewards, the padded batch and per-token log-probs.

Layout of a batch: prompts left-padded to a common width W, responses right-padded after them, so every
response starts at column W and `logits[:, W-1:-1]` predict exactly the response tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

import verifiers
from data.records import Task
from reasoner.generation import Sample
from reasoner.modeling import cache_kwarg, render_prompt
from reasoner.precision import mixed_precision
from reasoner.training import unpadded
from reasoner.training.unpadded import per_row


@dataclass
class Rollout:
    """The groups of one step: G prompts x n samples, flattened prompt-major (sample i of prompt g at g*n+i)."""

    tasks: list[Task]
    samples: list[Sample]  # [G * n]
    verdicts: list[verifiers.Verdict]  # [G * n]
    group_size: int

    @property
    def rewards(self) -> torch.Tensor:
        return torch.tensor([v.reward for v in self.verdicts], dtype=torch.float32).view(-1, self.group_size)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(s.token_ids) for s in self.samples])


def verify_groups(tasks: list[Task], groups: list[list[Sample]]) -> Rollout:
    samples = [s for group in groups for s in group]
    items = [(t.verifier, s.graded_text, t.reference) for t, group in zip(tasks, groups) for s in group]
    return Rollout(tasks, samples, verifiers.verify_many(items), len(groups[0]))


def encode_prompts(tokenizer, tasks: list[Task]) -> list[list[int]]:
    return [tokenizer(render_prompt(tokenizer, t.prompt), add_special_tokens=False).input_ids for t in tasks]


def pad_batch(prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int,
              loss_masks: list[list[int] | None] | None = None) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask / position_ids [B, W+R], response_mask [B, R], prompt_width W.
    `response_mask` is 1 on the response tokens that train: all of them, or where a row's loss mask is 1
    (a tool's output tokens are in the sequence and attended to, but have no loss)."""
    width = max(len(p) for p in prompt_ids)
    resp_width = max(1, max(len(r) for r in response_ids))
    batch = len(prompt_ids)
    input_ids = torch.full((batch, width + resp_width), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width + resp_width), dtype=torch.long)
    response_mask = torch.zeros((batch, resp_width), dtype=torch.float32)
    for row, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        input_ids[row, width - len(p):width] = torch.tensor(p)
        input_ids[row, width:width + len(r)] = torch.tensor(r, dtype=torch.long)
        attention[row, width - len(p):width + len(r)] = 1
        response_mask[row, :len(r)] = 1.0 if loss_masks is None or loss_masks[row] is None else torch.tensor(
            loss_masks[row], dtype=torch.float32)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": attention, "position_ids": positions,
            "response_mask": response_mask, "prompt_width": width}


def response_logprobs(model, batch: dict, temperature: float = 1.0, with_entropy: bool = False,
                      dtype: torch.dtype | None = None):
    """Log-probs [B, R] of the response tokens (and the per-token entropy [B, R] if asked), 0 at padding;
    `dtype`: the forward's mixed precision (reasoner/precision.py; None: the model's own)."""
    out = response_forward(model, batch, dtype)
    logp, entropy = token_logprobs(out.logits, out.targets(batch), temperature, with_entropy)
    return out.scatter(logp), None if entropy is None else out.scatter(entropy)


@dataclass
class ResponseOutputs:
    """The model's outputs at the N positions that predict a real response token of a padded batch, row by
    row: token (rows[i], columns[i]) of the response part [B, R] is predicted by logits[i]."""

    logits: torch.Tensor  # [N, V], float32 under mixed precision
    hidden: torch.Tensor | None  # [N, H]: the last hidden states there (after the final norm), if asked
    rows: torch.Tensor  # [N]
    columns: torch.Tensor  # [N]
    shape: tuple[int, int]  # (B, R)

    def targets(self, batch: dict) -> torch.Tensor:
        """The response tokens these positions predict [N]."""
        return batch["input_ids"][:, batch["prompt_width"]:][self.rows, self.columns]

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """[N, ...] per predicted token -> [B, R, ...], zeros elsewhere (differentiable)."""
        out = values.new_zeros(*self.shape, *values.shape[1:])
        return out.index_put((self.rows, self.columns), values)


def response_forward(model, batch: dict, dtype: torch.dtype | None = None, hidden: bool = False) -> ResponseOutputs:
    """The model's forward on a padded batch (prompts left-padded to `prompt_width`, responses right-padded),
    at the positions that predict a real response token.

    Rows that share a prompt (a group's samples, a pair's two answers) share its computation: the batch's
    distinct prompts are encoded once, their keys and values are gathered for every row, and the responses
    run on top of them, so a group of n pays for its prompt once instead of n times. The gradient reaches the
    shared prompt from every row, as it would through n copies. A Llama model runs only its real tokens
    through its per-token layers (reasoner/training/unpadded.py); any other model runs its own forward on the
    padded batch. Always two forwards, whatever the batch, so that ZeRO 3's gathers line up across ranks.
    """
    width = batch["prompt_width"]
    ids, attention, positions = batch["input_ids"], batch["attention_mask"], batch["position_ids"]
    prompts, row_prompt = torch.unique(ids[:, :width], dim=0, return_inverse=True)  # [U, W], [B]
    first = row_prompt.new_zeros(len(prompts)).scatter_(0, row_prompt, torch.arange(len(ids), device=ids.device))  # a row of each
    prompt_mask, prompt_positions = attention[first, :width], positions[first, :width]  # [U, W] each
    rows, columns = attention[:, width:].nonzero(as_tuple=True)  # the real response tokens, row by row
    shape = (len(ids), ids.shape[1] - width)
    with mixed_precision(model, dtype):
        if unpadded.supports(model):
            head, _, prefix = unpadded.forward(model, prompts, prompt_mask, prompt_positions)
            tail, _, _ = unpadded.forward(model, ids[:, width:], attention[:, width:], positions[:, width:], prefix,
                                          row_prompt)  # [N, H]: the real response tokens, row by row
            last = head.index_select(0, prompt_mask.sum(-1).cumsum(0) - 1)  # [U, H]: each prompt's last token
            # Token (b, j) is predicted by the prompt's last position for j = 0, else by token (b, j - 1), the
            # row-major predecessor of (b, j) among the real tokens.
            source = torch.where(columns == 0, len(tail) + row_prompt[rows], torch.arange(-1, len(tail) - 1, device=ids.device))
            states = torch.cat([tail, last]).index_select(0, source)  # [N, H]
            return ResponseOutputs(model.lm_head(states), states if hidden else None, rows, columns, shape)
        cache_arg, cache = cache_kwarg(model), DynamicCache()
        head = model(input_ids=prompts, attention_mask=prompt_mask, position_ids=prompt_positions,
                     use_cache=True, logits_to_keep=1, output_hidden_states=hidden, **{cache_arg: cache})
        if hasattr(cache, "layers"):  # each row's prompt (transformers' cache of layers, 4.56 and later)
            for layer in cache.layers:
                layer.keys, layer.values = per_row(layer.keys, row_prompt), per_row(layer.values, row_prompt)
        else:
            cache.batch_select_indices(row_prompt)
        tail = model(input_ids=ids[:, width:], attention_mask=attention, position_ids=positions[:, width:],
                     use_cache=True, output_hidden_states=hidden, **{cache_arg: cache})
    logits = torch.cat([per_row(head.logits, row_prompt), tail.logits], dim=1)  # [B, R + 1, V]: column j predicts token j
    states = None
    if hidden:
        states = torch.cat([per_row(head.hidden_states[-1][:, -1:], row_prompt), tail.hidden_states[-1]], dim=1)[rows, columns]
    return ResponseOutputs(logits[rows, columns], states, rows, columns, shape)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False):
    """Log-probs [B, R] of `targets` [B, R] under `logits` [B, R, V] at `temperature` (and the entropy [B, R])."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    normaliser = torch.logsumexp(logits, dim=-1)  # [B, R]
    logp = logits.gather(-1, targets[..., None]).squeeze(-1) - normaliser  # [B, R]
    if not with_entropy:
        return logp, None
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)
        entropy = normaliser - (probs * logits).sum(-1)  # [B, R]
    return logp, entropy


def trim_padding(batch: dict) -> dict:
    """The batch without the columns that are padding in every row: prompt columns on the left, response
    columns on the right (a micro-batch of short rows need not pay for the longest row of the whole batch)."""
    width, full, resp_width = batch["prompt_width"], batch["input_ids"].shape[1], batch["response_mask"].shape[1]
    left = int((batch["attention_mask"][:, :width].sum(0) == 0).cumprod(0).sum())  # leading all-padding columns
    used = batch["response_mask"].sum(0).nonzero()
    right = int(used.max()) + 1 if len(used) else 1  # response columns in use (at least one)
    trimmed = {"prompt_width": width - left}
    for key, value in batch.items():
        if torch.is_tensor(value) and value.dim() == 2 and value.shape[1] == full:  # [B, W + R]
            trimmed[key] = value[:, left:width + right]
        elif torch.is_tensor(value) and value.dim() == 2 and value.shape[1] == resp_width:  # [B, R]
            trimmed[key] = value[:, :right]
        elif key != "prompt_width":
            trimmed[key] = value
    return trimmed


def micro_batches(batch: dict, size: int):
    """Split a padded batch row-wise; each piece keeps the shared prompt width."""
    rows = batch["input_ids"].shape[0]
    for start in range(0, rows, size):
        yield {key: (value[start:start + size] if torch.is_tensor(value) else value) for key, value in batch.items()}
