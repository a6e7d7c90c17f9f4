"""Tool-integrated rollouts (`--tools python`): the block format, calls run in the sandbox and contained,
tokens in and tokens out, and the mask that gives the tool's output tokens no gradient."""

import pytest
import torch

from data.records import Task
from reasoner.algorithms.common import BatchSizes
from reasoner.algorithms.grpo import grpo_loss
from reasoner.config import SamplingConfig, SamplingParams
from reasoner.generation import Sample, make_generator
from reasoner.generation.hf import HFGenerator
from reasoner.generation.tools import OUTPUT_CHARS, ToolGenerator, closed_block, output_block, tool_program
from reasoner.modeling import load_model, load_tokenizer
from reasoner.training.batches import rollout_batch
from reasoner.training.rollout import encode_prompts, pad_batch, response_logprobs, verify_groups


@pytest.mark.parametrize("text, code", [
    ("Let me compute.\n```python\nprint(1)\n```", "print(1)"),
    ("```python\nx = 1\nprint(x)\n```\n", "x = 1\nprint(x)"),
    ("```py\nprint(2)\n```  \n", "print(2)"),
    ("```python\n```", ""),
    ("```python\nprint(1)\n", None),  # still open
    ("```python\ns = '```'", None),  # a fence inside a line does not close
    ("```python\nprint(1)\n```python", None),  # a new opening fence, not a closing one
    ("```\nprint(1)\n```", None),  # not a python block
    ("```text\nhello\n```", None),
    ("no code at all", None),
])
def test_closed_block(text, code):
    assert closed_block(text) == code


class ScriptedBackend:
    """A policy that plays a script: after k output blocks in its context it writes segment k of its
    prompt's script, token by token, asking `stop` after each token as the hf backend does."""

    def __init__(self, tokenizer, scripts: dict[str, list[str]]):
        self.tokenizer, self.scripts, self.calls = tokenizer, scripts, 0

    def load_weights(self, model) -> None:
        pass

    def generate_ids(self, contexts, n, params, stop=None):
        self.calls += 1
        eos, groups = self.tokenizer.eos_token_id, []
        for context in contexts:
            text = self.tokenizer.decode(context)
            script = next(s for prompt, s in self.scripts.items() if prompt in text)
            k = text.count("```output")
            planned = self.tokenizer(script[k], add_special_tokens=False).input_ids + [eos] * (k == len(script) - 1)
            group = []
            for _ in range(n):
                ids, finish = [], "length"
                for token in planned[:params.max_new_tokens]:
                    ids.append(token)
                    if token == eos:
                        finish = "stop"
                        break
                    if stop is not None and stop(ids):
                        finish = "paused"
                        break
                shown = self.tokenizer.decode(ids[:-1] if finish == "stop" else ids, skip_special_tokens=True)
                group.append(Sample(ids, shown, [-0.5] * len(ids), finish))
            groups.append(group)
        return groups


@pytest.fixture(scope="module")
def tokenizer(micro_model):
    return load_tokenizer(micro_model)


def tool_generator(tokenizer, sandbox, scripts, max_tool_calls=4):
    return ToolGenerator(ScriptedBackend(tokenizer, scripts), tokenizer, max_tool_calls, sandbox)


def test_a_call_appends_its_output_as_masked_tokens_of_their_own(tokenizer, sandbox):
    first, last = "Multiply.\n```python\nprint(123 * 456)\n```", "So the answer is \\boxed{56088}."
    gen = tool_generator(tokenizer, sandbox, {"What is 123 * 456?": [first, last]})
    [[sample]] = gen.generate(["What is 123 * 456?"], 1, SamplingParams(max_new_tokens=200))
    block = output_block("56088\n", after_newline=False)
    ids = [tokenizer(first, add_special_tokens=False).input_ids,
           tokenizer(block, add_special_tokens=False).input_ids,
           tokenizer(last, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]]
    assert sample.token_ids == ids[0] + ids[1] + ids[2]  # the sampled ids and the output's own ids, untouched
    assert sample.loss_mask == [1] * len(ids[0]) + [0] * len(ids[1]) + [1] * len(ids[2])
    assert sample.logprobs == [-0.5] * len(ids[0]) + [0.0] * len(ids[1]) + [-0.5] * len(ids[2])
    assert sample.text == first + block + last
    assert sample.graded_text == first + "\n" + last  # the policy's own text, a line break for the block
    assert sample.finish_reason == "stop"
    [call] = sample.tool_calls
    assert (call.code, call.status, call.output) == ("print(123 * 456)", "ok", "56088\n")
    verdict = verify_groups([Task("t", "What is 123 * 456?", "math", "56088")], [[sample]]).verdicts[0]
    assert verdict.correct


def test_a_code_answer_is_graded_on_the_block_the_policy_wrote_last(tokenizer, sandbox):
    """A draft block runs as a call; the final block right after its output starts a line of its own in
    the policy's context, and so in the graded text: the code verifier grades the final block, whichever
    of the two is right (found by an outside red team: the graded text once fused the draft's closing fence
    with the final block's opening one, and the draft was graded)."""
    import json

    import verifiers

    wrong, right = "a, b = map(int, input().split())\nprint(a - b)\n", "a, b = map(int, input().split())\nprint(a + b)\n"
    reference = json.dumps({"stdio": [{"input": "2 3\n", "output": "5\n"}]})
    for draft, final, reward in ((wrong, right, 1.0), (right, wrong, 0.0)):
        script = [f"Draft:\n```python\n{draft}```", f"```python\n{final}```", "Done."]
        [[sample]] = tool_generator(tokenizer, sandbox, {"Add.": script}).generate(["Add."], 1,
                                                                                  SamplingParams(max_new_tokens=300))
        assert len(sample.tool_calls) == 2 and "```\n```python" in sample.graded_text
        assert verifiers.verify_many([("code", sample.graded_text, reference)])[0].reward == reward


def test_an_output_of_wide_characters_is_cut_in_tokens(tokenizer, sandbox):
    """300 characters of 4-byte characters would be some 1,200 byte-level tokens; the output is cut to
    TOKENS_PER_CHAR tokens per character shown, so a call cannot spend the response's budget on tool tokens
    (found by an outside red team)."""
    from reasoner.generation.tools import OUTPUT_CHARS, TOKENS_PER_CHAR

    script = ["```python\nprint('\\U0001F600' * 1000)\n```", "Done."]
    [[sample]] = tool_generator(tokenizer, sandbox, {"Smile.": script}).generate(["Smile."], 1,
                                                                                SamplingParams(max_new_tokens=2000))
    assert sample.loss_mask.count(0) <= OUTPUT_CHARS * TOKENS_PER_CHAR + 40  # the cut output, fences, the note
    assert "more characters" in sample.tool_calls[0].output and sample.finish_reason == "stop"


def test_later_blocks_see_earlier_definitions_but_not_their_output(tokenizer, sandbox):
    script = ["```python\nx = 6\nprint('first')\n```", "```python\nprint(x * 7)\n```", "Done."]
    [[sample]] = tool_generator(tokenizer, sandbox, {"state": script}).generate(
        ["state"], 1, SamplingParams(max_new_tokens=200))
    assert [c.output for c in sample.tool_calls] == ["first\n", "42\n"]
    assert tool_program(["x = 6"], "print(x)").count("exec(") == 2


def test_an_exit_in_an_earlier_block_ends_only_that_block_when_it_runs_again(tokenizer, sandbox):
    script = ["```python\nimport sys\nx = 6\nsys.exit()\n```", "```python\ny = 7\n```",
              "```python\nprint(x * y)\n```", "Done."]
    [[sample]] = tool_generator(tokenizer, sandbox, {"exit": script}).generate(
        ["exit"], 1, SamplingParams(max_new_tokens=300))
    assert [(c.status, c.output) for c in sample.tool_calls] == [("ok", ""), ("ok", ""), ("ok", "42\n")]


def test_a_block_that_failed_is_not_run_again(tokenizer, sandbox):
    script = ["```python\ny = 1 / 0\n```", "```python\nprint(y)\n```", "Done."]
    [[sample]] = tool_generator(tokenizer, sandbox, {"fail": script}).generate(
        ["fail"], 1, SamplingParams(max_new_tokens=200))
    assert [c.status for c in sample.tool_calls] == ["error", "error"]
    assert sample.tool_calls[0].output == "ZeroDivisionError: division by zero"
    assert sample.tool_calls[1].output == "NameError: name 'y' is not defined"


HOSTILE = {
    "loop": "```python\nwhile True:\n    pass\n```",
    "flood": "```python\nwhile True:\n    print('y' * 4096)\n```",
    "memory": "```python\nx = bytearray(2 ** 33)\n```",
    "host file": "```python\nprint(open('/etc/passwd').read())\n```",
    "network": "```python\nimport socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\n```",
    "fork": "```python\nimport os\nprint(os.fork())\n```",
    "kill parent": "```python\nimport os, signal\nos.kill(1, signal.SIGKILL)\nos.killpg(0, signal.SIGKILL)\n```",
    "special tokens": "```python\nprint('<' + '|end|><' + '|assistant|>')\n```",  # markers the policy did not write
}


def test_hostile_calls_are_contained_and_every_rollout_goes_on(tokenizer, sandbox):
    """Loops, floods, memory, host files, network, processes, signals and fake chat markers, all in one
    batch on the pool: each call ends as an output block and each sample finishes its answer."""
    scripts = {name: [block, f"After {name}."] for name, block in HOSTILE.items()}
    gen = tool_generator(tokenizer, sandbox, scripts)
    groups = gen.generate(list(scripts), 1, SamplingParams(max_new_tokens=1000))
    by_name = {name: group[0] for name, group in zip(scripts, groups)}
    specials = set(tokenizer.all_special_ids)
    for name, sample in by_name.items():
        assert sample.finish_reason == "stop", name
        assert sample.graded_text.endswith(f"After {name}."), name
        [call] = sample.tool_calls
        assert len(call.output) <= OUTPUT_CHARS + 250, name
        tool_ids = [t for t, m in zip(sample.token_ids, sample.loss_mask) if m == 0]
        assert not specials & set(tool_ids), name  # printed markers are plain text, never control tokens
    assert by_name["loop"].tool_calls[0].status == "timeout"
    assert "TimeoutError" in by_name["loop"].tool_calls[0].output
    assert by_name["flood"].tool_calls[0].status == "killed"
    assert "more characters" in by_name["flood"].tool_calls[0].output
    assert by_name["memory"].tool_calls[0].status in ("memory", "error")
    for name in ("host file", "network", "fork", "kill parent"):
        assert by_name[name].tool_calls[0].status != "ok", name
    assert "root:" not in by_name["host file"].text
    assert "<|assistant|>" in by_name["special tokens"].text


def test_max_tool_calls_and_the_token_budget(tokenizer, sandbox):
    script = ["```python\nprint(1)\n```", "```python\nprint(2)\n```", "End."]
    [[sample]] = tool_generator(tokenizer, sandbox, {"cap": script}, max_tool_calls=1).generate(
        ["cap"], 1, SamplingParams(max_new_tokens=200))
    assert [c.output for c in sample.tool_calls] == ["1\n"]
    assert tool_generator(tokenizer, sandbox, {"cap": script}).generate([], 4, SamplingParams()) == []
    assert "```output\n2" not in sample.text and sample.text.endswith("```python\nprint(2)\n```")  # ran once only
    [[short]] = tool_generator(tokenizer, sandbox, {"cap": script}).generate(
        ["cap"], 1, SamplingParams(max_new_tokens=len(tokenizer(script[0]).input_ids) + 3))
    assert short.finish_reason == "length" and len(short.token_ids) == len(short.loss_mask) == len(short.logprobs)
    assert len(short.token_ids) == len(tokenizer(script[0]).input_ids) + 3


def test_without_a_closed_block_the_wrapper_is_the_backend(micro_model, sandbox):
    model, tok = load_model(micro_model), load_tokenizer(micro_model)
    backend = HFGenerator(model, tok, batch_size=8)
    prompts, params = ["What is 12 + 30?", "Solve for x: 3x + 4 = 10."], SamplingParams(max_new_tokens=12, seed=4)
    plain = backend.generate(prompts, 2, params)
    wrapped = ToolGenerator(backend, tok, 2, sandbox).generate(prompts, 2, params)
    for a, b in zip((s for g in plain for s in g), (s for g in wrapped for s in g)):
        assert (a.token_ids, a.logprobs, a.text, a.finish_reason) == (b.token_ids, b.logprobs, b.text, b.finish_reason)
        assert b.loss_mask == [1] * len(b.token_ids) and not b.tool_calls


def test_the_hf_backend_pauses_and_resumes_on_the_training_layout(micro_model):
    """`stop` pauses a row; continuing from prompt + sampled ids + a tool block's ids samples with the
    log-probs one forward pass over the training sequence gives (tokens in, tokens out)."""
    model, tok = load_model(micro_model), load_tokenizer(micro_model)
    backend = HFGenerator(model, tok, batch_size=8)
    [prompt] = encode_prompts(tok, [Task("t", "What is 12 + 30?", "math", "42")])
    [[first]] = backend.generate_ids([prompt], 1, SamplingParams(max_new_tokens=20, seed=2),
                                     stop=lambda ids: len(ids) == 5)
    assert first.finish_reason == "paused" and len(first.token_ids) == 5
    tool = tok(output_block("<|end|> 42\n", True), add_special_tokens=False, split_special_tokens=True).input_ids
    [[second]] = backend.generate_ids([prompt + first.token_ids + tool], 1, SamplingParams(max_new_tokens=10, seed=3))
    response = first.token_ids + tool + second.token_ids
    batch = pad_batch([prompt], [response], tok.pad_token_id, [[1] * 5 + [0] * len(tool) + [1] * len(second.token_ids)])
    assert batch["input_ids"][0].tolist() == prompt + response
    with torch.no_grad():
        logp, _ = response_logprobs(model, batch)
    sampled = torch.tensor(first.logprobs + [0.0] * len(tool) + second.logprobs)
    torch.testing.assert_close(logp[0] * batch["response_mask"][0], sampled, atol=1e-4, rtol=1e-4)


def test_tool_output_tokens_get_no_gradient(micro_model, tokenizer, sandbox):
    """The GRPO loss (clipped ratio and KL) and its gradient are the same whatever the log-probs at the
    tool's output positions are; with a mask of all ones (no tool mask) they are not."""
    model = load_model(micro_model)
    scripts = {"What is 123 * 456?": ["```python\nprint(123 * 456)\n```", "\\boxed{56088}"],
               "What is 2 + 2?": ["\\boxed{4}"]}
    groups = tool_generator(tokenizer, sandbox, scripts).generate(list(scripts), 1, SamplingParams(max_new_tokens=200))
    tasks = [Task("a", "What is 123 * 456?", "math", "56088"), Task("b", "What is 2 + 2?", "math", "4")]
    rollout = verify_groups(tasks, groups)
    batch = rollout_batch(tokenizer, rollout)
    mask = batch["response_mask"]
    tool = torch.tensor(groups[0][0].loss_mask) == 0
    assert tool.any() and (mask[0, :len(tool)][tool] == 0).all() and (mask[0, :len(tool)][~tool] == 1).all()
    advantages = torch.tensor([1.0, -1.0])
    every = (batch["attention_mask"][:, batch["prompt_width"]:] > 0).float()  # every response token
    at_tool = (every > 0) & (mask == 0)

    def gradient(mask, noise_at_tool: bool):
        model.zero_grad()
        logp, _ = response_logprobs(model, batch)
        if noise_at_tool:  # what the policy "would" assign the tool's tokens: must not matter
            logp = torch.where(at_tool, logp * 3 + torch.randn_like(logp), logp)
        sizes = BatchSizes(tokens=int(mask.sum()), sequences=2, max_new_tokens=200)
        loss, stats = grpo_loss(logp, logp.detach() - 0.1, logp.detach() + 0.2, advantages, mask, sizes, 0.2, 0.28,
                                0.1, "k3", "token_mean")
        loss.backward()
        return loss.detach(), stats["kl"], torch.cat([p.grad.flatten() for p in model.parameters()])

    torch.manual_seed(0)
    loss, kl, grad = gradient(mask, False)
    loss2, kl2, grad2 = gradient(mask, True)
    torch.testing.assert_close((loss2, kl2, grad2), (loss, kl, grad))
    _, _, grad3 = gradient(every, False)  # a control: without the tool mask the same noise changes the gradient
    _, _, grad4 = gradient(every, True)
    assert not torch.allclose(grad3, grad4)


def test_ppo_steps_over_the_tool_output_as_if_it_were_not_there():
    """GAE and the end-of-episode score on a response with a tool block equal those of the same response
    with the block cut out, at every discount."""
    from reasoner.algorithms.ppo import gae, token_rewards

    torch.manual_seed(0)
    values, kl = torch.randn(2, 7), torch.rand(2, 7)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 0], [1, 0, 0, 1, 1, 1, 1]], dtype=torch.float32)  # tool blocks, padding
    for gamma, lam in ((1.0, 1.0), (0.9, 0.8)):
        rewards = token_rewards(torch.tensor([1.0, -1.0]), kl, mask, 0.1)
        advantages, returns = gae(rewards, values, mask, gamma, lam)
        for row in range(2):
            keep = mask[row] > 0
            flat_rewards = token_rewards(torch.tensor([[1.0, -1.0][row]]), kl[row, keep][None],
                                         torch.ones(1, int(keep.sum())), 0.1)
            flat_adv, flat_ret = gae(flat_rewards, values[row, keep][None], torch.ones(1, int(keep.sum())), gamma, lam)
            torch.testing.assert_close(advantages[row, keep], flat_adv[0])
            torch.testing.assert_close(returns[row, keep], flat_ret[0])
            assert (advantages[row, ~keep] == 0).all()


def test_sft_encodes_a_solutions_output_block_as_a_rollout_would_and_gives_it_no_loss(tokenizer):
    from data.synthetic import generate
    from reasoner.training.sft import collate, tokenize_pairs

    tool_task = next(t for t in generate("calc", "train", 20) if t.meta["solution_uses_tool"])
    plain_task = generate("math", "train", 1)[0]
    (ids, prompt_len, trained), (plain_ids, plain_len, plain_trained) = tokenize_pairs(tokenizer, [tool_task, plain_task])
    before, answer = tool_task.meta["solution"].split(output_block(f"{tool_task.reference}\n", False))
    parts = [tokenizer(text, add_special_tokens=False).input_ids
             for text in (before, output_block(f"{tool_task.reference}\n", False), answer)]
    assert ids[prompt_len:] == parts[0] + parts[1] + parts[2] + [tokenizer.eos_token_id]
    assert trained == [True] * len(parts[0]) + [False] * len(parts[1]) + [True] * (len(parts[2]) + 1)
    assert plain_ids[plain_len:] == tokenizer(plain_task.meta["solution"]).input_ids + [tokenizer.eos_token_id]
    assert all(plain_trained)
    labels = collate([(ids, prompt_len, trained)], tokenizer.pad_token_id)["labels"][0, prompt_len:len(ids)]
    assert labels.tolist() == [i if t else -100 for i, t in zip(ids[prompt_len:], trained)]


def test_tool_metrics_in_a_training_step_and_an_eval_report(tokenizer, sandbox):
    from reasoner.evaluation import sample_records, summarise
    from reasoner.sampling import TaskResult
    from reasoner.training.groups import rollout_metrics

    scripts = {"What is 123 * 456?": ["```python\nprint(123 * 456)\n```", "\\boxed{56088}"],
               "What is 2 + 2?": ["\\boxed{5}"],
               "What is 1 / 0?": ["```python\nprint(1 / 0)\n```", "\\boxed{0}"],
               "What is 3 + 3?": ["\\boxed{6}"]}
    groups = tool_generator(tokenizer, sandbox, scripts).generate(list(scripts), 2, SamplingParams(max_new_tokens=200))
    tasks = [Task("a", "What is 123 * 456?", "math", "56088"), Task("b", "What is 2 + 2?", "math", "4"),
             Task("c", "What is 1 / 0?", "math", "1"), Task("d", "What is 3 + 3?", "math", "6")]
    metrics = rollout_metrics(verify_groups(tasks, groups))
    assert metrics["tool_calls_per_sample"] == 0.5 and metrics["tool_use_rate"] == 0.5
    assert metrics["tool_error_rate"] == 0.5 and metrics["tool_timeout_rate"] == 0.0
    assert metrics["accuracy_with_tool"] == 0.5 and metrics["accuracy_without_tool"] == 0.5
    assert metrics["time_tool_s"] > 0
    rollout = verify_groups(tasks, groups)
    results = [TaskResult(t, rollout.samples[2 * i:2 * i + 2], rollout.verdicts[2 * i:2 * i + 2])
               for i, t in enumerate(tasks)]
    report = summarise(results, [1])
    assert report["tools"]["tool_use_rate"] == 0.5 and report["by"]["family"]["math"]["tools"]["tool_use_rate"] == 0.5
    assert [r["tool_calls"] for r in sample_records(results)] == [["ok"]] * 2 + [[]] * 2 + [["error"]] * 2 + [[]] * 2
    plain = [Sample([1], "\\boxed{4}", [-0.1], "stop"), Sample([1], "\\boxed{5}", [-0.1], "stop")]
    assert "tool_use_rate" not in rollout_metrics(verify_groups(tasks[1:2], [plain]))  # without tools: no tool keys


def test_every_stage_takes_tools_and_run_sets_them_for_every_stage(tmp_path, micro_model):
    import json

    from data.records import write_tasks
    from data.synthetic import generate
    from pipelines import run
    from pipelines.cli import main
    from reasoner.config import RunConfig, TrainConfig

    write_tasks(tmp_path / "tasks.jsonl", generate("calc", "heldout", 2))
    assert main(["eval", "--model", str(micro_model), "--data", str(tmp_path / "tasks.jsonl"), "--output",
                 str(tmp_path / "eval.json"), "--n", "2", "--k", "1", "--max-new-tokens", "8", "--tools", "python",
                 "--max-tool-calls", "2"]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["tools"]["tool_calls_per_sample"] >= 0.0
    assert json.loads((tmp_path / "eval.config.json").read_text())["sampling"]["max_tool_calls"] == 2
    steps = run.plan(RunConfig(output=str(tmp_path / "run"), tools="python", max_tool_calls=3))
    for stage in ("curate", "pairs", "train", "eval_start", "eval_final"):
        assert (steps[stage].sampling.tools, steps[stage].sampling.max_tool_calls) == ("python", 3), stage
    assert run.plan(RunConfig(output=str(tmp_path / "run")))["train"].sampling.tools == "none"
    with pytest.raises(SystemExit):
        main(["train", "--tools", "bash"])
    with pytest.raises(ValueError, match="--tools python needs --backend hf"):
        make_generator("vllm", None, None, SamplingConfig(tools="python"))
    assert TrainConfig().sampling.tools == "none"


def test_dpo_pairs_of_tool_samples_keep_the_mask(tokenizer, sandbox):
    from reasoner.sampling import sample_pairs
    from reasoner.training.dpo import pair_batch

    class TwoAnswers(ScriptedBackend):  # one right answer after a call, one wrong one without
        def generate_ids(self, contexts, n, params, stop=None):
            groups = super().generate_ids(contexts, 1, params, stop)
            if n == 1:
                return groups
            self.scripts = {"What is 123 * 456?": ["\\boxed{1}"]}
            wrong = super().generate_ids(contexts, 1, params, stop)
            self.scripts = scripts
            return [groups[0] + wrong[0]]

    scripts = {"What is 123 * 456?": ["```python\nprint(123 * 456)\n```", "\\boxed{56088}"]}
    gen = ToolGenerator(TwoAnswers(tokenizer, scripts), tokenizer, 4, sandbox)
    [pair] = sample_pairs(gen, [Task("a", "What is 123 * 456?", "math", "56088")], 2, 1, True,
                          SamplingParams(max_new_tokens=200))
    assert 0 in pair["chosen_mask"] and pair["rejected_mask"] == [1] * len(pair["rejected_ids"])
    mask = pair_batch(tokenizer, [pair])["response_mask"]
    assert mask[0, :len(pair["chosen_mask"])].tolist() == [float(m) for m in pair["chosen_mask"]]
    assert mask[1].sum() == len(pair["rejected_ids"])


@pytest.mark.parametrize("algo", ["grpo", "rloo", "reinforce++", "gspo", "cispo"])
def test_every_policy_gradient_update_trains_on_the_policys_tokens_only(micro_model, tokenizer, sandbox, algo):
    """The whole update path (micro-batches, trimming, the sampler/trainer gap) on a rollout with tool output:
    the tool's tokens, whose sampler log-prob is 0, count neither as trained tokens nor as a mismatch."""
    from reasoner.config import TrainConfig
    from reasoner.training import distributed
    from reasoner.training.loop import Learner
    from reasoner.training.policy_gradient import Settings, policy_gradient_update

    scripts = {"What is 123 * 456?": ["```python\nprint(123 * 456)\n```", "\\boxed{56088}"],
               "What is 2 + 2?": ["```python\nprint(2 + 2)\n```", "\\boxed{5}"]}
    groups = tool_generator(tokenizer, sandbox, scripts).generate(list(scripts), 1, SamplingParams(max_new_tokens=200))
    rollout = verify_groups([Task("a", "What is 123 * 456?", "math", "56088"), Task("b", "What is 2 + 2?", "math", "4")],
                            [[groups[0][0], groups[1][0]]])  # one group of two: one right, one wrong
    torch.manual_seed(0)
    model = load_model(micro_model)
    with torch.no_grad():
        trainer = response_logprobs(model, rollout_batch(tokenizer, rollout))[0]
    for row, sample in enumerate(rollout.samples):  # the sampler agrees with the trainer on the policy's tokens
        sample.logprobs = [lp if m else 0.0 for lp, m in zip(trainer[row, :len(sample.token_ids)].tolist(),
                                                             sample.loss_mask)]
    config = TrainConfig(lr=1e-3, warmup_steps=1, micro_batch_size=1, algo=algo)
    engine = distributed.make_engine(model, config.lr, config.warmup_steps, config.grad_clip)
    stats = policy_gradient_update(Settings.of(algo, config), Learner(model, tokenizer, engine, None), rollout)
    assert stats["train_tokens"] == sum(sum(s.loss_mask) for s in rollout.samples)
    assert stats["rollout_logprob_kl"] == pytest.approx(0.0, abs=1e-5)
    assert stats["rollout_ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert stats["grad_norm"] > 0
