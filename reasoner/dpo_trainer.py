"""DPO on pairs built from the policy's own verified samples, with optional online rounds.

A round: sample `samples_per_prompt` answers per prompt, verify them, pair a right one with a wrong one
(`data/pairs.py`), compute the reference's log-probs of every pair once (cached in the round's directory),
then take `dpo_epochs` passes of the sigmoid DPO or IPO loss over the pairs. The first round may use a
pairs file written by `reasoner pairs`; later rounds sample from the current policy (online DPO, as in
Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback", with a verifier as the judge).
The reference stays the starting policy in every round. A checkpoint is written after each round.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from data.pairs import pair_records, pair_summary
from data.records import Task, write_jsonl
from reasoner.algorithms.dpo import chosen_nll, preference_loss
from reasoner import distributed
from reasoner.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, truncate_metrics
from reasoner.config import TrainConfig
from reasoner.evaluation import sample_and_verify
from reasoner.generation import SamplingParams, make_generator
from reasoner.metrics import MetricsWriter
from reasoner.rollout import encode_prompts, micro_batches, pad_batch, response_logprobs
from reasoner.trainer import step_seed

log = logging.getLogger(__name__)


def sample_pairs(generator, tasks: list[Task], samples_per_prompt: int, pairs_per_prompt: int, length_matched: bool,
                 params: SamplingParams) -> list[dict]:
    """Sample, verify and pair: the rows of a pairs file."""
    results = sample_and_verify(generator, tasks, samples_per_prompt, params, desc="pairs")
    pairs = []
    for r in results:
        pairs += pair_records(r.task, [s.text for s in r.samples], [s.token_ids for s in r.samples],
                              [v.correct for v in r.verdicts], [s.truncated for s in r.samples], pairs_per_prompt,
                              length_matched, params.seed)
    return pairs


def pair_batch(tokenizer, pairs: list[dict]) -> dict:
    """Rows 0..P-1 are the chosen responses, rows P..2P-1 the rejected ones, each after its prompt."""
    prompt_ids = encode_prompts(tokenizer, [Task(p["id"], p["prompt"], "", "") for p in pairs])
    return pad_batch(prompt_ids * 2, [p["chosen_ids"] for p in pairs] + [p["rejected_ids"] for p in pairs],
                     tokenizer.pad_token_id)


def sequence_logprobs(model, batch: dict, micro_batch_size: int) -> torch.Tensor:
    """Sum of each response's token log-probs: [rows]."""
    return torch.cat([(response_logprobs(model, mb)[0] * mb["response_mask"]).sum(-1)
                      for mb in micro_batches(batch, micro_batch_size)])


@torch.no_grad()
def reference_logprobs(reference, tokenizer, pairs: list[dict], micro_batch_size: int, cache: Path) -> torch.Tensor:
    """[P, 2] (chosen, rejected) summed log-probs under the reference, computed once and cached in `cache`."""
    if cache.is_file():
        return torch.load(cache, weights_only=True)
    rows = [torch.zeros(0, 2)]
    for start in range(0, len(pairs), micro_batch_size):
        part = pairs[start:start + micro_batch_size]
        both = sequence_logprobs(reference, pair_batch(tokenizer, part), micro_batch_size)  # [2p]
        rows.append(torch.stack([both[:len(part)], both[len(part):]], dim=-1))
    result = torch.cat(rows)
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save(result, cache)
    return result


def read_pairs(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def train_dpo(config: TrainConfig, model, tokenizer, tasks: list[Task]) -> Path:
    """DPO rounds from the last checkpoint in `config.output` (or from scratch); return the final model path."""
    dpo = config.dpo
    output = Path(config.output)
    checkpoints = output / "checkpoints"
    metrics = MetricsWriter(Path(config.metrics or output / "metrics.jsonl"))
    torch.manual_seed(config.seed)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    engine = distributed.make_engine(model, config.lr, config.warmup_steps, config.grad_clip)
    generator = make_generator(config.backend, model, tokenizer)
    start_round, step = 0, 0
    checkpoint = latest_checkpoint(checkpoints)
    if checkpoint is not None:
        model.load_state_dict(type(model).from_pretrained(checkpoint).state_dict())
        state = load_checkpoint(checkpoint, engine)
        start_round, step = state["round"], state["step"]
        log.info("dpo: resuming from %s (round %d, step %d)", checkpoint, start_round, step)
    truncate_metrics(metrics.path, step)

    for round_ in range(start_round, dpo.dpo_rounds):
        t0 = time.time()
        round_dir = output / f"round-{round_}"
        if round_ == 0 and dpo.pairs:
            pairs = read_pairs(dpo.pairs)
        else:
            params = SamplingParams(config.sampling.max_new_tokens, config.sampling.temperature,
                                    config.sampling.top_p, step_seed(config.seed, round_))
            chosen = tasks
            if 0 < dpo.prompts_per_round < len(tasks):
                chosen = random.Random(f"{config.seed}/prompts/{round_}").sample(tasks, dpo.prompts_per_round)
            pairs = sample_pairs(generator, chosen, dpo.samples_per_prompt, dpo.pairs_per_prompt, dpo.length_matched,
                                 params)
            write_jsonl(round_dir / "pairs.jsonl", pairs)
            log.info("dpo: round %d pairs %s", round_, pair_summary(pairs, len(chosen)))
        if not pairs and round_ == 0:
            raise ValueError("dpo: no pairs (no prompt had both a right and a wrong sample); curate a band first")
        if not pairs:
            log.warning("dpo: round %d found no (right, wrong) pair; the policy is left as it is", round_)
        ref = reference_logprobs(reference, tokenizer, pairs, config.micro_batch_size, round_dir / "ref_logps.pt")
        sampled_accuracy = float(np.mean([p["meta"].get("pass_rate_sampled", np.nan) for p in pairs] or [np.nan]))
        order_rng = random.Random(f"{config.seed}/{round_}")
        model.train()
        bar = tqdm(total=dpo.dpo_epochs * -(-len(pairs) // dpo.dpo_batch_size), desc=f"dpo round {round_}",
                   unit="step", dynamic_ncols=True, mininterval=2)
        for _ in range(dpo.dpo_epochs):
            order = order_rng.sample(range(len(pairs)), len(pairs))
            for start in range(0, len(order), dpo.dpo_batch_size):
                idx = order[start:start + dpo.dpo_batch_size]
                record = dpo_step(config, model, tokenizer, engine, [pairs[i] for i in idx], ref[idx])
                engine.schedule()
                record.update(step=step, round=round_, lr=engine.lr, reward_mean=sampled_accuracy)
                metrics.write(record)
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.3f}", acc=f"{record['reward_accuracy']:.2f}")
                step += 1
        bar.close()
        model.eval()
        log.info("dpo: round %d done, %d pairs, %d steps so far, %.0fs", round_, len(pairs), step, time.time() - t0)
        save_checkpoint(checkpoints, round_ + 1, engine, tokenizer, {"round": round_ + 1, "step": step})
    final = output / "final"
    model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    return final


def dpo_step(config: TrainConfig, model, tokenizer, engine, pairs: list[dict], ref: torch.Tensor) -> dict:
    """One optimiser step on a batch of pairs; returns the metrics line (without step)."""
    t0 = time.time()
    batch = pair_batch(tokenizer, pairs)
    mask = batch["response_mask"]  # [2P, T]
    logp, entropy = response_logprobs(model, batch, with_entropy=True)  # [2P, T]
    policy = (logp * mask).sum(-1)  # [2P]
    p = len(pairs)
    loss, stats = preference_loss(policy[:p], policy[p:], ref[:, 0], ref[:, 1], config.dpo.dpo_beta,
                                  config.dpo.dpo_loss, config.dpo.label_smoothing)
    stats["nll"] = chosen_nll(policy[:p].detach(), mask[:p].sum(-1))
    if config.dpo.nll_coef:
        loss = loss + config.dpo.nll_coef * chosen_nll(policy[:p], mask[:p].sum(-1))
    engine.backward(loss, last=True)
    grad_norm = engine.step()
    lengths = mask.sum(-1).numpy()
    truncated = [False] * p + [bool(q["meta"].get("rejected_truncated", False)) for q in pairs]
    return {
        "loss": float(loss.detach()), **{k: float(v) for k, v in stats.items()},
        "grad_norm": float(grad_norm),
        # the pairs' own lengths; the policy's length drift shows in eval (start vs final samples)
        "response_length_mean": float(lengths.mean()), "response_length_p90": float(np.percentile(lengths, 90)),
        "chosen_length_mean": float(lengths[:p].mean()), "rejected_length_mean": float(lengths[p:].mean()),
        "truncation_rate": float(np.mean(truncated)),
        # k1 estimate of KL(pi || ref) per token on the pair samples (not samples of pi: a rough gauge)
        "kl": float((policy.detach() - ref.T.flatten()).sum() / mask.sum()),
        "entropy": float((entropy * mask).sum() / mask.sum()),
        "time_step_s": time.time() - t0,
    }
