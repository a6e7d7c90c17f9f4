"""DPO and IPO against small examples computed by hand (default tolerances), and a smoke run of the trainer."""

import json
import math

import torch

from reasoner.algorithms.dpo import dpo_sigmoid_loss, implicit_margin, ipo_loss, preference_loss

# policy prefers chosen by 1 nat more than the reference does, and rejected by 1 nat less: h = 2
POLICY_CHOSEN, POLICY_REJECTED = torch.tensor([-1.0]), torch.tensor([-3.0])
REF_CHOSEN, REF_REJECTED = torch.tensor([-2.0]), torch.tensor([-2.0])


def test_implicit_margin_by_hand():
    torch.testing.assert_close(implicit_margin(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED),
                               torch.tensor([2.0]))


def test_sigmoid_dpo_by_hand():
    h = torch.tensor([2.0])
    torch.testing.assert_close(dpo_sigmoid_loss(h, beta=0.5), torch.tensor([math.log(1 + math.exp(-1))]))
    torch.testing.assert_close(dpo_sigmoid_loss(torch.tensor([0.0]), beta=0.5), torch.tensor([math.log(2)]))
    # label smoothing 0.1: 0.9 * log(1 + e^-1) + 0.1 * log(1 + e^1)
    expected = 0.9 * math.log(1 + math.exp(-1)) + 0.1 * math.log(1 + math.exp(1))
    torch.testing.assert_close(dpo_sigmoid_loss(h, beta=0.5, label_smoothing=0.1), torch.tensor([expected]))


def test_ipo_by_hand():
    h = torch.tensor([2.0])
    torch.testing.assert_close(ipo_loss(h, beta=0.5), torch.tensor([1.0]))  # (2 - 1/(2*0.5))^2
    torch.testing.assert_close(ipo_loss(h, beta=0.25), torch.tensor([0.0]))  # h sits at its target 1/(2 beta)


def test_preference_loss_statistics_by_hand():
    loss, stats = preference_loss(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED, beta=0.5)
    torch.testing.assert_close(loss, torch.tensor(math.log(1 + math.exp(-1))))
    torch.testing.assert_close(stats["chosen_reward"], torch.tensor(0.5))
    torch.testing.assert_close(stats["rejected_reward"], torch.tensor(-0.5))
    torch.testing.assert_close(stats["reward_margin"], torch.tensor(1.0))
    torch.testing.assert_close(stats["reward_accuracy"], torch.tensor(1.0))


def test_dpo_gradient_raises_chosen_and_lowers_rejected():
    chosen, rejected = torch.tensor([-2.0], requires_grad=True), torch.tensor([-2.0], requires_grad=True)
    for loss_type in ("sigmoid", "ipo"):
        loss, _ = preference_loss(chosen, rejected, REF_CHOSEN, REF_REJECTED, beta=0.1, loss_type=loss_type)
        chosen.grad = rejected.grad = None
        loss.backward()
        assert chosen.grad.item() < 0 < rejected.grad.item()


# ------------------------------------------------------------------------------------ the trainer

def test_dpo_trainer_smoke_offline_round_then_online_round(micro_model, tmp_path):
    from data.pairs import pair_records
    from data.records import write_jsonl
    from data.synthetic import generate
    from reasoner.config import DPOConfig, SamplingConfig, TrainConfig
    from reasoner.training.dpo import dpo_algorithm, reference_logprobs
    from reasoner.training.loop import train
    from reasoner.modeling import load_model, load_tokenizer

    tokenizer, model = load_tokenizer(micro_model), load_model(micro_model)
    tasks = generate("math", "train", 3, 0)
    pairs = []
    for t in tasks:
        right = tokenizer(t.reference, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        pairs += pair_records(t, [t.reference, "0"], [right, [5, 6, tokenizer.eos_token_id]], [True, False],
                              [False, False], 1, True, 0)
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    config = TrainConfig(output=str(tmp_path / "train"), algo="dpo", lr=1e-2, warmup_steps=1, precision="float32",
                         sampling=SamplingConfig(max_new_tokens=4), micro_batch_size=2,
                         dpo=DPOConfig(pairs=str(tmp_path / "pairs.jsonl"), dpo_epochs=3, dpo_batch_size=2,
                                       dpo_rounds=1, samples_per_prompt=2))
    reference = load_model(micro_model)
    final = train(config, model, tokenizer, dpo_algorithm(config, model, tasks))
    lines = (tmp_path / "train" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3 * 2  # 3 epochs of 2 batches (3 pairs, 2 per batch)
    cached = reference_logprobs(reference, tokenizer, pairs, 2, tmp_path / "train" / "round-0" / "ref_logps.pt")
    recomputed = reference_logprobs(reference, tokenizer, pairs, 2, tmp_path / "fresh.pt")
    torch.testing.assert_close(cached, recomputed)  # the cache holds the starting policy's log-probs
    trained = reference_logprobs(load_model(final), tokenizer, pairs, 2, tmp_path / "trained.pt")
    margin = lambda lp: (lp[:, 0] - lp[:, 1]).mean()
    assert margin(trained) > margin(recomputed)  # the policy now prefers the right answers more

    # a second, online round resumes after the first and samples from the policy (a random model may find
    # no (right, wrong) pair: the round then leaves the policy as it is)
    config.dpo.dpo_rounds = 2
    train(config, model, tokenizer, dpo_algorithm(config, model, tasks))
    assert (tmp_path / "train" / "round-1" / "pairs.jsonl").is_file()
    steps = [json.loads(line)["step"] for line in (tmp_path / "train" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(len(steps))) and len(steps) >= 6  # round 1 continues the step count


def test_chosen_nll_is_the_per_token_negative_log_likelihood():
    from reasoner.algorithms.dpo import chosen_nll

    # -(-6 / 3 + -2 / 4) / 2 = (2 + 0.5) / 2
    torch.testing.assert_close(chosen_nll(torch.tensor([-6.0, -2.0]), torch.tensor([3.0, 4.0])), torch.tensor(1.25))


def test_run_gives_dpo_the_sample_budget_of_grpo(tmp_path):
    from pipelines.run import plan
    from reasoner.config import RunConfig

    config = RunConfig(output=str(tmp_path), algo="dpo")
    config.train.steps, config.train.prompts_per_step, config.train.group_size = 10, 4, 8  # 320 samples
    config.train.dpo.samples_per_prompt, config.train.dpo.dpo_rounds = 8, 2
    steps = plan(config)
    assert steps["train"].dpo.prompts_per_round == 20 and steps["pairs"].max_prompts == 20  # 320 / (8 x 2)
    assert steps["train"].dpo.pairs == steps["pairs"].output and steps["pairs"].data == steps["curate"].output
