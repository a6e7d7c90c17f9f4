"""The Hugging Face generation backend: shapes, stop reasons, seeds, and log-probs that match a forward pass."""

from types import SimpleNamespace

import pytest
import torch

from reasoner.config import SamplingParams
from reasoner.generation import stop_token_ids
from reasoner.generation.hf import HFGenerator, sample_tokens
from reasoner.modeling import load_model, load_tokenizer
from reasoner.training.rollout import encode_prompts, pad_batch, response_logprobs
from data.synthetic import generate

PROMPTS = ["What is 12 + 30?", "Solve for x: 3x + 4 = 10.", "Write a Python function f(x) that returns x plus 3."]


def _generator(micro_model, **kwargs):
    return HFGenerator(load_model(micro_model), load_tokenizer(micro_model), **{"batch_size": 4, **kwargs})


def test_n_samples_per_prompt_with_consistent_fields(micro_model):
    gen = _generator(micro_model)
    groups = gen.generate(PROMPTS, 3, SamplingParams(max_new_tokens=10, seed=1))
    assert [len(g) for g in groups] == [3, 3, 3]
    for sample in (s for g in groups for s in g):
        assert len(sample.token_ids) == len(sample.logprobs) <= 10
        assert sample.finish_reason in ("stop", "length")
        assert (sample.finish_reason == "length") == (len(sample.token_ids) == 10 and
                                                       sample.token_ids[-1] != gen.tokenizer.eos_token_id)
        assert all(lp <= 0 for lp in sample.logprobs)


def test_same_seed_same_samples_other_seed_other_samples(micro_model):
    gen = _generator(micro_model)
    a = gen.generate(PROMPTS, 2, SamplingParams(max_new_tokens=8, seed=5))
    b = gen.generate(PROMPTS, 2, SamplingParams(max_new_tokens=8, seed=5))
    c = gen.generate(PROMPTS, 2, SamplingParams(max_new_tokens=8, seed=6))
    ids = lambda groups: [s.token_ids for g in groups for s in g]
    assert ids(a) == ids(b) and ids(a) != ids(c)



@pytest.mark.parametrize("configured, expected", [
    (None, {2}), (2, {2}), (7, {2, 7}), ([2, 0], {0, 2}), ([], {2}),
])
def test_stop_ids_are_the_tokenizers_eos_and_the_generation_configs(configured, expected):
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=configured))
    assert stop_token_ids(model, SimpleNamespace(eos_token_id=2)) == expected


def test_a_model_with_no_end_of_sequence_token_is_refused():
    with pytest.raises(ValueError, match="no end-of-sequence token"):
        stop_token_ids(SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=None)),
                       SimpleNamespace(eos_token_id=None))


@pytest.mark.parametrize("as_list", [True, False])  # generation_config.eos_token_id: a list or one id
def test_generation_stops_on_every_end_of_sequence_id_of_the_generation_config(micro_model, as_list):
    """Real chat models end a turn with one token and a text with another (SmolLM2: <|im_end|> and
    <|endoftext|>): a sample ends at the first of any, is "stop", keeps that id last, and its text omits it."""
    gen = _generator(micro_model)
    params = SamplingParams(max_new_tokens=12, temperature=0.0)  # greedy: rows that end change no other row
    before = [s for (s,) in gen.generate(PROMPTS, 1, params)]
    eos = gen.tokenizer.eos_token_id
    second = before[0].token_ids[2]  # a token the first sample draws third: now it ends that sample there
    assert second != eos and len(before[0].token_ids) > 3
    gen.model.generation_config.eos_token_id = [eos, second] if as_list else second
    after = [s for (s,) in gen.generate(PROMPTS, 1, params)]
    assert after[0].token_ids[-1] == second and after[0].finish_reason == "stop"
    for old, new in zip(before, after):  # each sample is the old one up to its first end
        ends = [i for i, t in enumerate(old.token_ids) if t in (eos, second)]
        if ends:
            assert new.token_ids == old.token_ids[:ends[0] + 1] and new.finish_reason == "stop"
            assert new.logprobs == old.logprobs[:ends[0] + 1]
            assert new.text == gen.tokenizer.decode(new.token_ids[:-1], skip_special_tokens=True)
        else:
            assert new.token_ids == old.token_ids and new.finish_reason == old.finish_reason

@pytest.mark.parametrize("drop_fraction", [0.0, 1.0])  # ended rows dropped at once / never dropped
def test_logprobs_match_a_full_forward_pass_on_the_training_layout(micro_model, drop_fraction):
    """The sampler's log-probs (KV cache, ended rows dropped) equal those of one padded forward pass."""
    gen = _generator(micro_model, batch_size=12, drop_fraction=drop_fraction)
    tasks = generate("math", "heldout", 2) + generate("code", "heldout", 2)
    groups = gen.generate([t.prompt for t in tasks], 3, SamplingParams(max_new_tokens=12, seed=2))
    samples = [s for g in groups for s in g]
    prompt_ids = encode_prompts(gen.tokenizer, tasks)
    batch = pad_batch([prompt_ids[i // 3] for i in range(len(samples))], [s.token_ids for s in samples],
                      gen.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = response_logprobs(gen.model, batch)
    for row, sample in enumerate(samples):
        torch.testing.assert_close(logp[row, :len(sample.logprobs)], torch.tensor(sample.logprobs), atol=1e-4, rtol=1e-4)


def test_greedy_and_top_p():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0]])
    rng = torch.Generator().manual_seed(0)
    tokens, _ = sample_tokens(logits, SamplingParams(temperature=0.0), rng)
    assert tokens.tolist() == [1, 0]
    # top_p small enough keeps only the most likely token of each row
    for _ in range(20):
        tokens, _ = sample_tokens(logits, SamplingParams(top_p=0.5), rng)
        assert tokens.tolist() == [1, 0]


def test_sampled_frequencies_follow_the_tempered_softmax():
    """The inverse-CDF draw has the distribution torch.multinomial would: softmax(logits / T), top-p renormalised."""
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, -30.0]]).repeat(40_000, 1)
    rng = torch.Generator().manual_seed(0)
    tokens, logp = sample_tokens(logits, SamplingParams(temperature=0.7), rng)
    expected = torch.softmax(logits[0] / 0.7, dim=-1)
    torch.testing.assert_close(torch.bincount(tokens, minlength=5) / len(tokens), expected, atol=0.01, rtol=0)
    torch.testing.assert_close(logp, expected.log()[tokens])
    tokens, _ = sample_tokens(logits, SamplingParams(top_p=0.7), rng)  # keeps tokens 2 and 1 (0.64 + 0.24)
    kept = torch.softmax(logits[0, 1:3], dim=-1)
    torch.testing.assert_close(torch.bincount(tokens, minlength=5) / len(tokens),
                               torch.tensor([0.0, kept[0], kept[1], 0.0, 0.0]), atol=0.01, rtol=0)


def test_the_lean_llama_decoder_computes_what_the_models_own_forward_does(micro_model, monkeypatch):
    """Same prompts of different lengths, same seed: the preallocated-cache decoder and the model's forward
    with a DynamicCache give the same tokens and log-probs, through prompt repeats and row drops."""
    import reasoner.generation.hf as hf

    gen = _generator(micro_model, drop_fraction=0.0)  # drop ended rows at every end: select() runs often
    assert hf.supports(gen.model)
    params = SamplingParams(max_new_tokens=24, temperature=1.0, seed=3)
    lean = gen.generate(PROMPTS, 4, params)
    monkeypatch.setattr(hf, "supports", lambda model: False)
    plain = gen.generate(PROMPTS, 4, params)
    lean_samples, plain_samples = [s for g in lean for s in g], [s for g in plain for s in g]
    assert [s.token_ids for s in lean_samples] == [s.token_ids for s in plain_samples]
    assert len({len(s.token_ids) for s in lean_samples}) > 1  # rows ended at different steps
    for a, b in zip(lean_samples, plain_samples):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=1e-4)


def test_models_that_are_not_llama_keep_their_own_forward(micro_model):
    from transformers import GPT2Config, GPT2LMHeadModel

    import reasoner.generation.hf as hf

    tokenizer = load_tokenizer(micro_model)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                      eos_token_id=tokenizer.eos_token_id)).eval()
    assert not hf.supports(gpt2)
    groups = HFGenerator(gpt2, tokenizer).generate(PROMPTS[:2], 2, SamplingParams(max_new_tokens=6, seed=0))
    assert [len(g) for g in groups] == [2, 2] and all(len(s.token_ids) <= 6 for g in groups for s in g)


def test_lean_decoder_logits_equal_a_full_forward_step_by_step(micro_model):
    """Decoder logits after prefill, prompt repeats, row drops and single-token steps, against one forward
    of each row's whole sequence; a sharpened copy of the micro model makes attention matter."""
    from reasoner.generation.llama_decode import StaticCacheDecoder

    model, tokenizer = load_model(micro_model), load_tokenizer(micro_model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)  # a random micro model's attention is near uniform; this one's is not
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    enc = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
    positions = (enc.attention_mask.cumsum(-1) - 1).clamp(min=0)
    steps = torch.tensor([[20, 21, 22, 23], [30, 31, 32, 33], [40, 41, 42, 43], [50, 51, 52, 53]])  # 2 per prompt
    decoder = StaticCacheDecoder(model)
    with torch.no_grad():
        logits = [decoder.prefill(enc.input_ids, enc.attention_mask, positions, 5 + 4).repeat_interleave(2, 0)]
        decoder.repeat_interleave(2)
        rows, position = torch.arange(4), positions[:, -1:].repeat_interleave(2, 0) + 1
        for t in range(4):
            if t == 2:  # row 1 ends: drop it
                rows, position = rows[[0, 2, 3]], position[[0, 2, 3]]
                decoder.select(torch.tensor([0, 2, 3]))
            out = decoder.step(steps[rows, t], position)
            position = position + 1
            full = torch.zeros(4, out.shape[-1])
            full[rows] = out
            logits.append(full)
        for row in range(4):
            prompt = prompts[row // 2]
            ids = torch.tensor([prompt + steps[row].tolist()])
            expected = model(input_ids=ids).logits[0, len(prompt) - 1:]  # predictions after the prompt, each step
            for t in range(5):
                if row == 1 and t >= 3:
                    continue  # dropped
                torch.testing.assert_close(logits[t][row], expected[t], atol=2e-5, rtol=1e-5)


# -- sampling in several processes ---------------------------------------------------------------------------


def _ids_and_logprobs(groups):
    return [s.token_ids for g in groups for s in g], [lp for g in groups for s in g for lp in s.logprobs]


def _same_samples(got, expected):
    got_ids, got_logprobs = _ids_and_logprobs(got)
    expected_ids, expected_logprobs = _ids_and_logprobs(expected)
    assert got_ids == expected_ids
    torch.testing.assert_close(torch.tensor(got_logprobs), torch.tensor(expected_logprobs), atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def two_processes(micro_model):
    from reasoner.generation.processes import ProcessGenerator

    return ProcessGenerator(load_model(micro_model), load_tokenizer(micro_model), 2, batch_size=4)


def test_two_processes_sample_each_share_of_the_prompts_with_a_seed_of_its_own(micro_model, two_processes):
    """Three prompts in two processes: the first two as one process samples them with the call's seed, the
    third as it samples it with the seed one stride on."""
    from reasoner.generation.processes import SHARE_SEED_STRIDE, split_shares

    assert split_shares([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]] and split_shares([1], 2) == [[1], []]
    params = SamplingParams(max_new_tokens=12, seed=5)
    alone = _generator(micro_model)
    got = two_processes.generate(PROMPTS, 3, params)
    _same_samples(got, alone.generate(PROMPTS[:2], 3, params)
                  + alone.generate(PROMPTS[2:], 3, params.with_seed(5 + SHARE_SEED_STRIDE)))
    _same_samples(two_processes.generate(PROMPTS, 3, params), got)  # the same call, the same samples
    assert len(two_processes.generate(PROMPTS[:1], 2, params)) == 1  # fewer prompts than processes


def test_the_processes_sample_from_the_weights_loaded_after_an_update(micro_model, two_processes):
    """`load_weights` writes the new weights into the memory the processes read: no copy is sent."""
    changed = load_model(micro_model)
    with torch.no_grad():
        for p in changed.parameters():
            p.mul_(3.0)
    params = SamplingParams(max_new_tokens=12, seed=9)
    before = two_processes.generate(PROMPTS[:2], 4, params)
    two_processes.load_weights(changed)
    after = two_processes.generate(PROMPTS[:2], 4, params)
    _same_samples(after[:1], HFGenerator(changed, load_tokenizer(micro_model)).generate(PROMPTS[:1], 4, params))
    assert _ids_and_logprobs(after)[1] != _ids_and_logprobs(before)[1]
    two_processes.load_weights(load_model(micro_model))


def test_a_failing_or_killed_sampler_process_is_reported_and_the_next_call_works(micro_model, two_processes):
    import os
    import signal

    from reasoner.generation.processes import _workers

    params = SamplingParams(max_new_tokens=6, seed=1)
    with pytest.raises(RuntimeError, match="(?s)sampler process 1 failed:.*IndexError"):
        two_processes.generate_ids([[5, 6], [10**6]], 2, params)  # a token id past the vocabulary
    expected = two_processes.generate(PROMPTS, 2, params)
    os.kill(_workers(2)[0].process.pid, signal.SIGKILL)
    _workers(2)[0].process.join(timeout=10)
    _same_samples(two_processes.generate(PROMPTS, 2, params), expected)  # a new process, given the model again


def test_sampler_processes_need_the_hf_backend_and_at_least_one():
    from reasoner.config import SamplingConfig
    from reasoner.generation import make_generator

    with pytest.raises(ValueError, match="needs --backend hf"):
        make_generator("vllm", None, None, SamplingConfig(sampler_processes=2))
    with pytest.raises(ValueError, match="at least 1"):
        make_generator("hf", None, None, SamplingConfig(sampler_processes=0))
    on_meta = torch.nn.Linear(2, 2, device="meta")  # not on the CPU
    with pytest.raises(ValueError, match="samples on the CPU"):
        make_generator("hf", on_meta, None, SamplingConfig(sampler_processes=2))


def test_every_stage_of_run_samples_in_the_processes_asked_and_eval_runs_in_them(micro_model, tmp_path):
    import json

    from data.records import write_tasks
    from pipelines import run
    from pipelines.cli import main
    from reasoner.config import RunConfig

    steps = run.plan(RunConfig(output=str(tmp_path / "run"), sampler_processes=2))
    for stage in ("curate", "pairs", "train", "eval_start", "eval_final"):
        assert steps[stage].sampling.sampler_processes == 2, stage
    write_tasks(tmp_path / "tasks.jsonl", generate("math", "heldout", 3))
    assert main(["eval", "--model", str(micro_model), "--data", str(tmp_path / "tasks.jsonl"), "--output",
                 str(tmp_path / "eval.json"), "--n", "2", "--k", "1", "--max-new-tokens", "6",
                 "--sampler-processes", "2"]) == 0
    assert len(json.loads((tmp_path / "eval.json").read_text())["tasks"]) == 3
    assert json.loads((tmp_path / "eval.config.json").read_text())["sampling"]["sampler_processes"] == 2


def test_run_samples_in_two_processes_on_a_cpu_of_two_cores_with_one_training_process(monkeypatch):
    from pipelines import run
    from reasoner.config import RunConfig

    monkeypatch.setattr(run.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(run.os, "sched_getaffinity", lambda pid: {0, 1})
    assert run.sampler_processes(RunConfig()) == 2
    assert run.sampler_processes(RunConfig(sampler_processes=3)) == 3  # asked for: taken as given
    assert run.sampler_processes(RunConfig(nproc=2)) == 1  # the ranks share the cores
    assert run.sampler_processes(RunConfig(tools="python")) == 1  # tool calls sample in the main process
    monkeypatch.setattr(run.os, "sched_getaffinity", lambda pid: {0})
    assert run.sampler_processes(RunConfig()) == 1
    monkeypatch.setattr(run.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(run.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert run.sampler_processes(RunConfig()) == 1  # a GPU samples in one process
    with pytest.raises(ValueError, match="--sampler-processes"):
        run.sampler_processes(RunConfig(sampler_processes=-1))


def test_without_room_in_shared_memory_sampling_stays_in_this_process_and_says_why(micro_model, monkeypatch, caplog):
    """A container's /dev/shm is often 64 MB, and writing past it kills a process with SIGBUS."""
    from types import SimpleNamespace as Stat

    import reasoner.generation.processes as processes
    from reasoner.config import SamplingConfig
    from reasoner.generation import make_generator

    model, tokenizer = load_model(micro_model), load_tokenizer(micro_model)
    assert processes.shared_memory_problem(model, None) == ""  # this machine has room
    monkeypatch.setattr(processes.os, "statvfs", lambda path: Stat(f_bavail=16, f_frsize=4096))  # 64 KB free
    assert "MB free" in processes.shared_memory_problem(model, torch.bfloat16)
    with caplog.at_level("WARNING"):
        generator = make_generator("hf", model, tokenizer, SamplingConfig(sampler_processes=2))
    assert isinstance(generator, HFGenerator) and "shm-size" in caplog.text
