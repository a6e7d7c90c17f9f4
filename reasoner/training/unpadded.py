"""The Llama forward of a training step, on the real tokens of a padded batch only.

A batch of responses of different lengths is padded to its longest row, and the model's own forward pays
for every padding column in each projection, the MLP and the output layer: 13-14% of the columns of an
SFT step or a GRPO update on the embedded default. Here the tokens whose attention mask is 1 are taken out
of the batch ([N, hidden], N = real tokens), every per-token layer runs on them alone, and only attention,
which needs each row's keys in order, puts them back into the padded layout ([rows, heads, columns, head
dim]) for one batched product. The output layer then runs only where the caller needs logits.

It computes the same function as the Hugging Face forward from the same weights, with the model's own
norms, MLP, rotary embedding and attention function (`sdpa`, or `eager` as under CPU mixed precision), so
only the rounding of the products differs (their shapes do). `supports(model)` says which models; the
others take their own forward (reasoner/training/rollout.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, eager_attention_forward

from reasoner.generation import llama_decode

ATTENTION = {"sdpa": sdpa_attention_forward, "eager": eager_attention_forward}


def supports(model: torch.nn.Module) -> bool:
    """A Llama whose forward the lean decoder reproduces, with an attention function this module calls."""
    return llama_decode.supports(model) and getattr(model.config, "_attn_implementation", None) in ATTENTION


@dataclass
class Prefix:
    """Keys and values of every layer for a set of shared prefixes (a batch's distinct prompts), padded:
    [prefixes, kv heads, width, head dim] each, and which columns are real tokens [prefixes, width]."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    valid: torch.Tensor


def forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
            prefix: Prefix | None = None, prefix_of_row: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, Prefix]:
    """The decoder body on the real tokens of `input_ids` [B, T] (where `attention_mask` is 1), each row
    continuing `prefix` row `prefix_of_row[b]` when given. Returns the last hidden states after the final norm
    [N, hidden] of the N real tokens in row-major order, their flat indices into [B, T], and this batch's
    keys and values as a `Prefix` (for rows that continue it)."""
    body = model.model
    rows, width = input_ids.shape
    real = attention_mask.flatten().nonzero().squeeze(-1)  # [N]
    hidden = body.embed_tokens(input_ids.flatten().index_select(0, real))  # [N, H]
    cos, sin = body.rotary_emb(hidden[None], position_ids.flatten().index_select(0, real)[None])  # [1, N, D]
    valid = attention_mask.bool()
    allowed = attention_allowed(valid, None if prefix is None else per_row(prefix.valid, prefix_of_row))
    config, keys, values = model.config, [], []
    attend = ATTENTION[config._attn_implementation]
    mask = allowed if config._attn_implementation == "sdpa" else additive(allowed, hidden.dtype)  # as the model's own
    for index, layer in enumerate(body.layers):
        attention = layer.self_attn
        x = layer.input_layernorm(hidden)
        head_dim = attention.head_dim
        q = attention.q_proj(x).view(len(real), -1, head_dim)  # [N, heads, D]
        k = attention.k_proj(x).view(len(real), -1, head_dim)  # [N, kv heads, D]
        v = attention.v_proj(x).view(len(real), -1, head_dim)
        q, k = apply_rotary_pos_emb(q, k, cos[0], sin[0])
        q, k, v = (padded(t, real, rows, width) for t in (q, k, v))  # [B, heads, T, D]
        keys.append(k)
        values.append(v)
        if prefix is not None:
            k = torch.cat([per_row(prefix.keys[index], prefix_of_row), k], dim=2)
            v = torch.cat([per_row(prefix.values[index], prefix_of_row), v], dim=2)
        out, _ = attend(attention, q, k, v, mask, dropout=0.0 if not attention.training else attention.attention_dropout,
                        scaling=attention.scaling)  # [B, T, heads, D]
        out = out.reshape(rows * width, -1).index_select(0, real)  # [N, heads * D]
        hidden = hidden + attention.o_proj(out)
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return body.norm(hidden), real, Prefix(keys, values, valid)


def padded(tokens: torch.Tensor, real: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """[N, heads, D] of the real tokens -> [rows, heads, width, D], zeros at the padding."""
    out = tokens.new_zeros(rows * width, *tokens.shape[1:]).index_copy(0, real, tokens)
    return out.view(rows, width, *tokens.shape[1:]).transpose(1, 2)


def per_row(values: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`values[rows]` with a gradient that is the same from run to run. Rows that share a source (a group's
    prompt) add their gradients into it. On the CPU, the backward of `values[rows]` does so with atomic float
    adds from several threads (for tensors of 32768 elements or more), so the order of the sum, and its last
    bits, change from run to run, and a two-thread run of one seed drifted from itself after about 140 steps;
    `index_select` adds in a fixed order there. On CUDA it is the other way round (PyTorch's
    `use_deterministic_algorithms` lists both)."""
    return values.index_select(0, rows) if values.device.type == "cpu" else values[rows]


def attention_allowed(valid: torch.Tensor, prefix_valid: torch.Tensor | None) -> torch.Tensor:
    """[B, 1, T, P + T]: query t of a row sees the real tokens of its prefix (P columns) and its own real
    tokens up to t. A padding query also sees itself: its output is never used, but a query with no key
    at all would make NaN that the backward carries into the weights."""
    rows, width = valid.shape
    own = torch.ones(width, width, dtype=torch.bool, device=valid.device).tril()[None] & valid[:, None, :]
    own = own | torch.eye(width, dtype=torch.bool, device=valid.device)[None]
    if prefix_valid is not None:
        own = torch.cat([prefix_valid[:, None, :].expand(rows, width, -1), own], dim=-1)
    return own[:, None]


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask as the float mask `eager` attention adds to its scores (0 or the dtype's minimum)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)
