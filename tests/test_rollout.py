"""Padded batches: trimming the columns that are padding in every row changes no log-prob."""

import torch

from reasoner.modeling import load_model, load_tokenizer
from reasoner.training.rollout import micro_batches, pad_batch, response_logprobs, trim_padding


def test_trimmed_micro_batches_give_the_same_logprobs(micro_model):
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
            assert piece["response_mask"].shape == (1, len(responses[row]))
            assert piece["advantages"].tolist() == [batch["advantages"][row].item()]


def test_trim_keeps_one_response_column_of_a_masked_piece():
    batch = pad_batch([[5, 6], [7]], [[8, 9], [10]], pad_id=0)
    batch["response_mask"] = torch.zeros_like(batch["response_mask"])
    trimmed = trim_padding(batch)
    assert trimmed["input_ids"].shape == (2, 3) and trimmed["response_mask"].shape == (2, 1)
