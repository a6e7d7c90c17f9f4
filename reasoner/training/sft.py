"""Supervised warm start: next-token loss on the response part of (prompt, worked solution) pairs.

A solution's output blocks (tool calls, reasoner/generation/tools.py) are the tool's, not the model's: each
is encoded on its own, as in a rollout, and has no loss.
"""

from __future__ import annotations

import logging
import random
import time

import torch

from data.records import DataError, Task
from reasoner.generation.tools import tool_segments
from reasoner.monitoring.metrics import progress
from reasoner.modeling import render_prompt
from reasoner.precision import autocast_dtype, mixed_precision
from reasoner.training import unpadded
from reasoner.training.distributed import lr_schedule

log = logging.getLogger(__name__)


def tokenize_pairs(tokenizer, tasks: list[Task]) -> list[tuple[list[int], int, list[bool]]]:
    """(prompt + solution + eos token ids, prompt length, which response tokens have a loss) for every task
    with a `meta.solution`."""
    examples = []
    for task in tasks:
        solution = task.meta.get("solution")
        if not isinstance(solution, str):
            raise DataError(f"task {task.id!r}: field 'meta.solution' is needed for sft")
        prompt_ids = tokenizer(render_prompt(tokenizer, task.prompt), add_special_tokens=False).input_ids
        response_ids, trained = [], []
        for text, by_tool in tool_segments(solution):
            ids = tokenizer(text, add_special_tokens=False, split_special_tokens=by_tool).input_ids
            response_ids += ids
            trained += [not by_tool] * len(ids)
        examples.append((prompt_ids + response_ids + [tokenizer.eos_token_id], len(prompt_ids), trained + [True]))
    return examples


def collate(examples: list[tuple[list[int], int, list[bool]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch; labels are -100 outside the response and on a tool's output."""
    width = max(len(ids) for ids, _, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id)
    labels = torch.full((len(examples), width), -100)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, prompt_len, trained) in enumerate(examples):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        labels[row, prompt_len:len(ids)] = torch.tensor(ids[prompt_len:]).masked_fill(~torch.tensor(trained), -100)
        attention[row, :len(ids)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention}


def response_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token loss over the labelled tokens (what `model(**batch).loss` computes), with the output
    layer run only where a position predicts a labelled token (a Llama model runs only its real tokens,
    reasoner/training/unpadded.py; any other model its own forward from the first labelled column on)."""
    labels = batch["labels"]
    if unpadded.supports(model):
        ids, attention = batch["input_ids"], batch["attention_mask"]
        positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)  # right-padded rows start at 0
        states, real, _ = unpadded.forward(model, ids, attention, positions)  # [N, H]
        following = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100).flatten().index_select(0, real)  # [N]
        predicts = (following != -100).nonzero().squeeze(-1)
        logits = model.lm_head(states.index_select(0, predicts))
        return torch.nn.functional.cross_entropy(logits.float(), following.index_select(0, predicts))
    first = int((labels != -100).int().argmax(dim=1).min())  # earliest response column of any row
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   logits_to_keep=labels.shape[1] - first + 1).logits[:, :-1]  # predict columns first..end
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels[:, first:].flatten(),
                                             ignore_index=-100)


def sft_step(model, optimizer, batch: dict[str, torch.Tensor], dtype: torch.dtype | None) -> torch.Tensor:
    """One update on `batch`: the response loss under mixed precision, its gradient clipped to norm 1, an
    optimiser step. Returns the loss."""
    with mixed_precision(model, dtype):
        loss = response_loss(model, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def train_sft(model, tokenizer, tasks: list[Task], steps: int, batch_size: int, lr: float, warmup_steps: int,
              weight_decay: float, seed: int, precision: str = "auto") -> list[dict]:
    """Fine-tune `model` in place; returns one record per logged step."""
    dtype = autocast_dtype(precision, model)
    examples = tokenize_pairs(tokenizer, tasks)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    schedule = lr_schedule(optimizer, warmup_steps, steps)
    model.train()
    history, start = [], time.time()
    order: list[int] = []
    bar = progress(range(steps), desc="sft", unit="step")
    for step in bar:
        if len(order) < batch_size:
            order += rng.sample(range(len(examples)), len(examples))
        batch = collate([examples[i] for i in order[:batch_size]], tokenizer.pad_token_id)
        del order[:batch_size]
        loss = sft_step(model, optimizer, batch, dtype)
        schedule.step()
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        if step % 50 == 0 or step == steps - 1:
            history.append({"step": step, "loss": loss.item(), "lr": schedule.get_last_lr()[0],
                            "seconds": round(time.time() - start, 1)})
            log.info("sft step %d/%d loss %.4f", step + 1, steps, loss.item())
    model.eval()
    return history
