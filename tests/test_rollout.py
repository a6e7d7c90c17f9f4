"""Padded batches: trimming the columns that are padding in every row changes no log-prob, and rows that
share a prompt share its forward without changing a logit or a gradient, whether the model runs only its
real tokens (a Llama model, reasoner/training/unpadded.py) or its own forward on the padded batch."""

import pytest
import torch

from reasoner.modeling import load_model, load_tokenizer
from reasoner.training.rollout import micro_batches, pad_batch, response_forward, response_logprobs, trim_padding


def test_trimmed_micro_batches_give_the_same_logprobs(micro_model, forward_path):
    model, tokenizer = load_model(micro_model), load_tokenizer(micro_model)
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15]]  # the short prompts' rows are mostly padding
    responses = [[20, 21, 22, 23, 24, 25, 26], [30, 31], [40]]
    batch = pad_batch(prompts, responses, tokenizer.pad_token_id)
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5])
    with torch.no_grad():
        full, _ = response_logprobs(model, batch)  # [3, 7]
        pieces = [trim_padding(mb) for mb in micro_batches(batch, 1)]
        assert [tuple(p["input_ids"].shape) for p in pieces] == [(1, 13), (1, 4), (1, 4)]
        assert [p["prompt_width"] for p in pieces] == [6, 2, 3]
        for row, piece in enumerate(pieces):
            logp, _ = response_logprobs(model, piece)
            torch.testing.assert_close(logp[0], full[row, :len(responses[row])])
            assert not full[row, len(responses[row]):].any()  # padding has no log-prob
            assert piece["response_mask"].shape == (1, len(responses[row]))
            assert piece["advantages"].tolist() == [batch["advantages"][row].item()]


def test_trim_keeps_one_response_column_of_a_masked_piece():
    batch = pad_batch([[5, 6], [7]], [[8, 9], [10]], pad_id=0)
    batch["response_mask"] = torch.zeros_like(batch["response_mask"])
    trimmed = trim_padding(batch)
    assert trimmed["input_ids"].shape == (2, 3) and trimmed["response_mask"].shape == (2, 1)


def _every_row_alone(model, batch):
    """The reference computation: one plain forward of every row with its own copy of its prompt, at the
    positions that predict a real response token."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], output_hidden_states=True)
    width = batch["prompt_width"]
    rows, columns = batch["response_mask"].nonzero(as_tuple=True)
    return out.logits[:, width - 1:][rows, columns], out.hidden_states[-1][:, width - 1:][rows, columns]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])  # eager: what CPU mixed precision runs
def test_rows_sharing_a_prompt_share_its_forward_with_the_same_logits_and_gradient(micro_model, forward_path, attention):
    """A group's samples (and a pair's answers) encode their prompt once; logits, hidden states and the
    gradient of every weight equal those of each row alone, including rows whose prompt is unique."""
    model, tokenizer = load_model(micro_model), load_tokenizer(micro_model)
    model.set_attn_implementation(attention)
    prompts = [[5, 6, 7]] * 3 + [[11, 12]] * 2 + [[13, 14, 15, 16]]  # groups of 3, 2 and 1
    responses = [[20, 21, 22, 23], [30], [40, 41], [50, 51, 52], [60, 61], [70]]
    batch = pad_batch(prompts, responses, tokenizer.pad_token_id)
    lengths = torch.tensor([len(r) for r in responses])
    weights = torch.linspace(-1, 1, len(responses)).repeat_interleave(lengths)  # [N]: one per response token

    def grads(forward):
        model.zero_grad()
        logits, hidden = forward()
        (logits.log_softmax(-1)[..., 3] * weights).sum().backward()
        return logits.detach(), hidden.detach(), [p.grad.clone() for p in model.parameters()]

    def shared_forward():
        out = response_forward(model, batch, hidden=True)
        assert out.rows.tolist() == [r for r, resp in enumerate(responses) for _ in resp]
        assert out.columns.tolist() == [c for resp in responses for c in range(len(resp))]
        assert out.targets(batch).tolist() == [t for resp in responses for t in resp]
        return out.logits, out.hidden

    logits, hidden, shared = grads(shared_forward)
    expected_logits, expected_hidden, alone = grads(lambda: _every_row_alone(model, batch))
    torch.testing.assert_close(logits, expected_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hidden, expected_hidden, atol=1e-5, rtol=1e-5)
    for got, want in zip(shared, alone):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert any(g.abs().sum() > 0 for g in shared)


def test_the_shared_prompt_gradient_is_the_same_on_every_run_with_two_threads(micro_model, forward_path):
    """Each row's copy of its prompt's cache and logits sends its gradient back to the one shared prompt. With
    two threads, plain indexing sums those gradients with atomic adds in an order that changes from run to run
    (a two-thread training run drifted from itself after ~140 steps); the sum must come out the same, bit for
    bit. 16 prompts x 8 rows, interleaved so that every prompt's rows are split between the threads, and big
    enough (128 x 384 logits) for PyTorch to use its threads."""
    model, tokenizer = load_model(micro_model), load_tokenizer(micro_model)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 300, (16,), generator=generator).tolist() for _ in range(16)]
    rows = range(128)
    batch = pad_batch([prompts[row % 16] for row in rows],
                      [torch.randint(5, 300, (1 + row % 7,), generator=generator).tolist() for row in rows],
                      tokenizer.pad_token_id)
    weights = torch.linspace(-1, 1, len(rows))

    def gradient_bytes():
        model.zero_grad()
        out = response_forward(model, batch)
        (out.logits.log_softmax(-1) * weights[out.rows, None]).sum().backward()
        return b"".join(p.grad.numpy().tobytes() for p in model.parameters())

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runs = {gradient_bytes() for _ in range(8)}
    finally:
        torch.set_num_threads(threads)
    assert len(runs) == 1
