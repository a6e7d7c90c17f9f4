"""The parts of the vLLM backend that need no GPU: parameter and weight-name mapping, output conversion."""

import sys
from types import SimpleNamespace

import pytest
import torch

from reasoner.config import SamplingParams
from reasoner.generation.vllm import hf_weight_name, sample_from_completion, vllm_sampling_kwargs, weights_for_vllm


def test_vllm_backend_is_not_imported_by_the_package():
    import reasoner.generation  # noqa: F401
    import reasoner.training.loop  # noqa: F401

    assert "vllm" not in sys.modules


def test_sampling_parameters_map_one_to_one():
    kwargs = vllm_sampling_kwargs(SamplingParams(max_new_tokens=64, temperature=0.7, top_p=0.9, seed=11), n=8,
                                  eos_ids={9, 2})
    assert kwargs == {"n": 8, "temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "seed": 11, "logprobs": 0,
                      "skip_special_tokens": True, "stop_token_ids": [2, 9]}


@pytest.mark.parametrize("name, tied, expected", [
    ("model.layers.0.self_attn.q_proj.weight", False, "model.layers.0.self_attn.q_proj.weight"),
    ("module.model.embed_tokens.weight", False, "model.embed_tokens.weight"),
    ("_orig_mod.module.model.norm.weight", False, "model.norm.weight"),
    ("base_model.model.model.layers.1.mlp.up_proj.weight", False, "model.layers.1.mlp.up_proj.weight"),
    ("lm_head.weight", True, None),
    ("module.lm_head.weight", False, "lm_head.weight"),
])
def test_weight_names(name, tied, expected):
    assert hf_weight_name(name, tied) == expected


def test_weights_for_vllm_drops_tied_head_and_detaches():
    w = torch.ones(2, requires_grad=True)
    out = dict(weights_for_vllm([("module.lm_head.weight", w), ("module.model.norm.weight", w)], True))
    assert list(out) == ["model.norm.weight"] and not out["model.norm.weight"].requires_grad


def _completion(ids, finish, logps, stop_reason=None):
    return SimpleNamespace(token_ids=ids, text="x", finish_reason=finish, stop_reason=stop_reason,
                           logprobs=[{t: SimpleNamespace(logprob=lp)} for t, lp in zip(ids, logps)])


def test_completion_to_sample_adds_the_eos_vllm_drops():
    sample = sample_from_completion(_completion([5, 6], "stop", [-0.1, -0.2]), eos_ids={0}, eos_token_id=0)
    assert sample.token_ids == [5, 6, 0] and sample.finish_reason == "stop"
    assert sample.logprobs[:2] == [-0.1, -0.2] and len(sample.logprobs) == 3


@pytest.mark.parametrize("ids, expected", [([5, 9], [5, 9]), ([5], [5, 9])])  # kept / dropped by vLLM
def test_a_sample_stopped_by_a_second_eos_id_ends_with_that_id(ids, expected):
    completion = _completion(ids, "stop", [-0.1] * len(ids), stop_reason=9)
    sample = sample_from_completion(completion, eos_ids={0, 9}, eos_token_id=0)
    assert sample.token_ids == expected and sample.finish_reason == "stop" and len(sample.logprobs) == 2


def test_completion_stopped_by_length():
    sample = sample_from_completion(_completion([5, 6, 7], "length", [-1.0, -1.0, -1.0]), eos_ids={0},
                                    eos_token_id=0)
    assert sample.token_ids == [5, 6, 7] and sample.truncated
