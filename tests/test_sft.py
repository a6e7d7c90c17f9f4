"""SFT's loss: the output layer only where a label is, the same value and gradient as the model's own loss
(on the real tokens only, reasoner/training/unpadded.py, or the model's own padded forward); mixed
precision keeps the output layer and the weights in float32."""

import pytest
import torch

from data.synthetic import generate
from reasoner.modeling import load_model, load_tokenizer
from reasoner.precision import autocast_dtype, mixed_precision
from reasoner.training.sft import collate, response_loss, tokenize_pairs


def _batch(tokenizer):
    tasks = generate("math", "train", 5, 0) + generate("code", "train", 3, 0)  # prompts of different lengths
    return collate(tokenize_pairs(tokenizer, tasks), tokenizer.pad_token_id)


def test_response_loss_is_the_models_loss_with_the_same_gradient(micro_model, forward_path):
    model, tokenizer = load_model(micro_model), load_tokenizer(micro_model)
    batch = _batch(tokenizer)
    assert len({int((row != -100).int().argmax()) for row in batch["labels"]}) > 1  # responses start apart

    def loss_and_grad(loss_fn):
        model.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    ours, ours_grad = loss_and_grad(lambda: response_loss(model, batch))
    theirs, theirs_grad = loss_and_grad(lambda: model(**batch).loss)
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(ours_grad, theirs_grad):
        torch.testing.assert_close(a, b)


def test_mixed_precision_runs_the_body_in_bfloat16_and_the_output_layer_in_float32(micro_model, forward_path):
    model, tokenizer = load_model(micro_model), load_tokenizer(micro_model)
    batch = _batch(tokenizer)
    seen = {}

    def record(name):
        def hook(module, args, out):
            seen[name] = out.dtype
        return hook

    model.model.layers[0].mlp.down_proj.register_forward_hook(record("body"))
    model.lm_head.register_forward_hook(record("head"))
    with mixed_precision(model, torch.bfloat16):
        loss = response_loss(model, batch)
    loss.backward()
    assert seen == {"body": torch.bfloat16, "head": torch.float32}
    seen.clear()
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    assert model.config._attn_implementation == "sdpa"  # plain attention inside the block only
    with torch.no_grad():
        full = model(**batch).loss  # outside the block: float32 again
    assert seen == {"body": torch.float32, "head": torch.float32}
    assert abs(float(loss) - float(full)) < 0.05 * float(full)
    assert autocast_dtype("float32", model) is None
    with pytest.raises(ValueError, match="unknown precision"):
        autocast_dtype("fp8", model)
