"""The two decoders the HF backend steps: a lean one for Llama-architecture models with a preallocated KV
cache, and the model's own forward with a `DynamicCache` for every other model.

Both answer `prefill(ids, attention, positions, capacity)`, `step(tokens, positions)`, `select(rows)` and
`repeat_interleave(n)`. The lean decoder computes the same function as the Hugging Face forward from the
same weights (read from the model at each call, so an update is seen at once), with the cache written in
place instead of grown by `torch.cat` on every layer, a boolean key mask instead of a rebuilt causal one,
and attention as two batched matrix products (PyTorch's fused CPU attention costs more for one query per
row). It takes a `LlamaForCausalLM` with the standard rotary embedding, norms and activation (SmolLM2 is
one) whose weights are whole (not split by ZeRO 3); `supports(model)` says which.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from reasoner.modeling import cache_kwarg


def supports(model: torch.nn.Module) -> bool:
    """Whether `model` is a Llama whose forward this module reproduces."""
    config = getattr(model, "config", None)
    partitioned = any(hasattr(p, "ds_id") for p in model.parameters())  # ZeRO 3 gathers weights in its hooks
    return (type(model).__name__ == "LlamaForCausalLM" and getattr(config, "hidden_act", "") == "silu"
            and not getattr(config, "pretraining_tp", 1) > 1 and not partitioned)


class HFDecoder:
    """The model's own forward with a `DynamicCache`: any causal LM."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.cache_kwarg = model, cache_kwarg(model)
        self.cache = self.attention = None

    def prefill(self, input_ids, attention_mask, position_ids, capacity: int) -> torch.Tensor:
        self.cache, self.attention = DynamicCache(), attention_mask
        return self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=True, logits_to_keep=1, **{self.cache_kwarg: self.cache}).logits[:, -1]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.attention = torch.cat([self.attention, self.attention.new_ones(len(tokens), 1)], dim=-1)
        return self.model(input_ids=tokens[:, None], attention_mask=self.attention, position_ids=positions,
                          use_cache=True, **{self.cache_kwarg: self.cache}).logits[:, -1]

    def select(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.attention = self.attention[rows]

    def repeat_interleave(self, n: int) -> None:
        self.cache.batch_repeat_interleave(n)
        self.attention = self.attention.repeat_interleave(n, 0)


class StaticCacheDecoder:
    """Keys and values of every layer in one preallocated tensor each, [layers, rows, kv heads, capacity,
    head dim]; `valid` [rows, capacity] marks the positions a row attends to (its prompt's real tokens and
    what it has generated)."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        config = model.config
        self.layers = model.model.layers
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.group = self.heads // self.kv_heads  # query heads per key/value head
        self.keys = self.values = self.valid = None
        self.length = 0

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                capacity: int) -> torch.Tensor:
        """Encode left-padded prompts [rows, width] into a fresh cache of `capacity` positions; return the
        logits after the last position [rows, vocab]."""
        rows, width = input_ids.shape
        parameter = next(self.model.parameters())
        shape = (len(self.layers), rows, self.kv_heads, capacity, self.head_dim)
        self.keys = torch.zeros(shape, dtype=parameter.dtype, device=parameter.device)
        self.values = torch.zeros_like(self.keys)
        self.valid = torch.zeros(rows, capacity, dtype=torch.bool, device=parameter.device)
        self.valid[:, :width] = attention_mask.bool()
        causal = torch.ones(width, width, dtype=torch.bool, device=parameter.device).tril()
        mask = causal[None, None] & self.valid[:, None, None, :width]  # [rows, 1, width, width]
        # A padding query row sees no key at all, which gives NaN; let it see itself (its output is unused).
        mask = mask | torch.eye(width, dtype=torch.bool, device=parameter.device)[None, None]
        self.length = 0
        return self._forward(input_ids, position_ids, mask)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token per row [rows] at `positions` [rows, 1]; return the next logits [rows, vocab]."""
        self.valid[:, self.length] = True
        return self._forward(tokens[:, None], positions, self.valid[:, None, None, :self.length + 1])

    def select(self, rows: torch.Tensor) -> None:
        """Keep only `rows` of the cache (ended rows dropped)."""
        self.keys, self.values = self.keys[:, rows], self.values[:, rows]
        self.valid = self.valid[rows]

    def repeat_interleave(self, n: int) -> None:
        """Give each row n copies of itself (n samples of one prompt share its encoded prefix)."""
        self.keys = self.keys.repeat_interleave(n, 1)
        self.values = self.values.repeat_interleave(n, 1)
        self.valid = self.valid.repeat_interleave(n, 0)

    def _forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        model = self.model.model
        hidden = model.embed_tokens(input_ids)  # [rows, T, hidden]
        cos, sin = model.rotary_emb(hidden, position_ids)  # [rows, T, head dim]
        rows, width = input_ids.shape
        start, end = self.length, self.length + width
        for index, layer in enumerate(self.layers):
            attention = layer.self_attn
            x = layer.input_layernorm(hidden)
            q = attention.q_proj(x).view(rows, width, self.heads, self.head_dim).transpose(1, 2)
            k = attention.k_proj(x).view(rows, width, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attention.v_proj(x).view(rows, width, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            self.keys[index, :, :, start:end] = k
            self.values[index, :, :, start:end] = v
            keys, values = self.keys[index, :, :, :end], self.values[index, :, :, :end]  # [rows, kv, L, D]
            q = q.reshape(rows, self.kv_heads, self.group * width, self.head_dim)
            scores = (q @ keys.transpose(-1, -2)).float() * attention.scaling  # [rows, kv, group*T, L]
            scores = scores.view(rows, self.kv_heads, self.group, width, end).masked_fill(~mask[:, :, None], float("-inf"))
            weights = torch.softmax(scores, dim=-1).to(values.dtype).view(rows, self.kv_heads, self.group * width, end)
            out = (weights @ values).view(rows, self.heads, width, self.head_dim)
            hidden = hidden + attention.o_proj(out.transpose(1, 2).reshape(rows, width, -1))
            x = layer.post_attention_layernorm(hidden)
            mlp = layer.mlp
            hidden = hidden + mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
        self.length = end
        return self.model.lm_head(model.norm(hidden[:, -1]))
