"""DPO's batches and update step: rounds of verified (right, wrong) pairs, then the preference loss.

A round: sample `samples_per_prompt` answers per prompt, verify them, pair a right one with a wrong one
(`data/pairs.py`), compute the reference's log-probs of every pair once (cached in the round's directory),
then take `dpo_epochs` passes over the pairs in batches of `dpo_batch_size`, one optimiser step each. The
first round may use a pairs file written by `reasoner pairs`; later rounds sample from the current policy
(online DPO, as in Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback", with a
verifier as the judge). The reference stays the starting policy in every round.

Every rank holds every pair of a step and trains on its share (pairs rank, rank + W, ...); the loss of a
micro-batch is weighted by its share of the step's pairs, so that ranks sum to the single-process loss.
The math is in `reasoner/algorithms/dpo.py`.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from data.pairs import pair_summary
from data.records import Task, read_jsonl, write_jsonl
from reasoner.training import distributed
from reasoner.algorithms.dpo import chosen_nll, preference_loss
from reasoner.config import DPOConfig, SamplingConfig, TrainConfig
from reasoner.training.rollout import encode_prompts, micro_batches, pad_batch, response_logprobs
from reasoner.sampling import sample_pairs
from reasoner.training.batches import add_shares, global_micro_count, reduce_sums
from reasoner.training.loop import Algorithm, Learner, step_seed

log = logging.getLogger("reasoner.train")


@dataclass(frozen=True)
class DPOSettings:
    """What DPO's rounds of pairs read, taken from the training config once (`DPOSettings.of`)."""

    dpo: DPOConfig
    sampling: SamplingConfig  # of the answers each round pairs
    output: Path  # each round's pairs and reference log-probs go into output/round-K
    seed: int
    micro_batch_size: int
    zero_stage: int

    @classmethod
    def of(cls, c: TrainConfig) -> DPOSettings:
        return cls(c.dpo, c.sampling, Path(c.output), c.seed, c.micro_batch_size, c.zero_stage)


@dataclass
class PairBatch:
    """The pairs of one optimiser step (every rank holds all of them) and their reference log-probs [P, 2]."""

    pairs: list[dict]
    ref: torch.Tensor


def pair_batch(tokenizer, pairs: list[dict]) -> dict:
    """Rows 0..P-1 are the chosen responses, rows P..2P-1 the rejected ones, each after its prompt (a tool's
    output tokens, where a pair has `chosen_mask` / `rejected_mask`, have no loss)."""
    prompt_ids = encode_prompts(tokenizer, [Task(p["id"], p["prompt"], "", "") for p in pairs])
    return pad_batch(prompt_ids * 2, [p["chosen_ids"] for p in pairs] + [p["rejected_ids"] for p in pairs],
                     tokenizer.pad_token_id,
                     [p.get("chosen_mask") for p in pairs] + [p.get("rejected_mask") for p in pairs])


def sequence_logprobs(model, batch: dict, micro_batch_size: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum of each response's token log-probs: [rows]."""
    return torch.cat([(response_logprobs(model, mb, dtype=dtype)[0] * mb["response_mask"]).sum(-1)
                      for mb in micro_batches(batch, micro_batch_size)])


@torch.no_grad()
def reference_logprobs(reference, tokenizer, pairs: list[dict], micro_batch_size: int, cache: Path,
                       dtype: torch.dtype | None = None) -> torch.Tensor:
    """[P, 2] (chosen, rejected) summed log-probs under the reference, computed once and cached in `cache`
    (every rank computes them, so that ZeRO 3's collective forwards line up; rank 0 writes the cache)."""
    cached = cache.is_file()
    distributed.barrier()  # every rank has looked before rank 0 may write it
    if cached:
        return torch.load(cache, weights_only=True)
    rows = [torch.zeros(0, 2)]
    for start in range(0, len(pairs), micro_batch_size):
        part = pairs[start:start + micro_batch_size]
        both = sequence_logprobs(reference, pair_batch(tokenizer, part), micro_batch_size, dtype)  # [2p]
        rows.append(torch.stack([both[:len(part)], both[len(part):]], dim=-1))
    result = torch.cat(rows)
    if distributed.is_main():
        cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save(result, cache.with_name(cache.name + ".tmp"))
        os.replace(cache.with_name(cache.name + ".tmp"), cache)
    return result


class PairSource:
    """The loop's `Source` for DPO: the batches of pairs of each round, one optimiser step each.

    A round's steps are known once its pairs are: `finished(step)` opens the next round (sampling its
    pairs) when `step` is past the current one. The checkpointed state is (round, step it started at);
    a round's pairs are kept in its directory, so a resumed round trains on the same pairs in the same order.
    """

    def __init__(self, settings: DPOSettings, tasks: list[Task]):
        self.s, self.tasks = settings, tasks
        self.round, self.round_start, self.batches = -1, 0, []

    def start(self, learner: Learner, generator, state: dict | None) -> None:
        self.learner, self.generator = learner, generator
        if state is not None and "round" in state:
            self.open_round(state["round"], state["round_start"])

    def state(self) -> dict:
        return {"round": self.round, "round_start": self.round_start}

    def finished(self, step: int) -> bool:
        while step >= self.round_start + len(self.batches):
            if self.round + 1 >= self.s.dpo.dpo_rounds:
                return True
            self.open_round(self.round + 1, self.round_start + len(self.batches))
        return False

    def next(self, step: int) -> tuple[PairBatch, dict]:
        index = self.batches[step - self.round_start]
        pairs = [self.pairs[i] for i in index]
        lengths = np.array([len(p["chosen_ids"]) for p in pairs] + [len(p["rejected_ids"]) for p in pairs])
        truncated = [False] * len(pairs) + [bool(p["meta"].get("rejected_truncated", False)) for p in pairs]
        # reward_mean: the sampled pass rate of the round's prompts; lengths are the pairs' own (the
        # policy's length drift shows in the held-out checks and in eval)
        return PairBatch(pairs, self.ref[index]), {
            "round": self.round, "reward_mean": self.sampled_accuracy,
            "response_length_mean": float(lengths.mean()), "response_length_p90": float(np.percentile(lengths, 90)),
            "chosen_length_mean": float(lengths[:len(pairs)].mean()),
            "rejected_length_mean": float(lengths[len(pairs):].mean()), "truncation_rate": float(np.mean(truncated)),
        }

    def open_round(self, round_: int, start: int) -> None:
        s, dpo = self.s, self.s.dpo
        round_dir = s.output / f"round-{round_}"
        self.pairs = self.round_pairs(round_, round_dir)
        if not self.pairs and round_ == 0:
            raise ValueError("dpo: no pairs (no prompt had both a right and a wrong sample); curate a band first")
        if not self.pairs:
            log.warning("dpo: round %d found no (right, wrong) pair; the policy is left as it is", round_)
        self.ref = reference_logprobs(self.learner.reference, self.learner.tokenizer, self.pairs,
                                      s.micro_batch_size, round_dir / "ref_logps.pt", self.learner.autocast)
        self.sampled_accuracy = float(np.mean([p["meta"].get("pass_rate_sampled", np.nan) for p in self.pairs]
                                              or [np.nan]))
        order_rng = random.Random(f"{s.seed}/{round_}")
        self.batches = []
        for _ in range(dpo.dpo_epochs):
            order = order_rng.sample(range(len(self.pairs)), len(self.pairs))
            self.batches += [order[i:i + dpo.dpo_batch_size] for i in range(0, len(order), dpo.dpo_batch_size)]
        self.round, self.round_start = round_, start
        log.info("dpo: round %d: %d pairs, %d steps from step %d", round_, len(self.pairs), len(self.batches), start)

    def round_pairs(self, round_: int, round_dir: Path) -> list[dict]:
        """The given pairs file (round 0), a round's pairs already sampled, or freshly sampled ones."""
        s, dpo = self.s, self.s.dpo
        if round_ == 0 and dpo.pairs:
            return read_jsonl(dpo.pairs)
        if (round_dir / "pairs.jsonl").is_file():
            return read_jsonl(round_dir / "pairs.jsonl")
        tasks = self.tasks
        if 0 < dpo.prompts_per_round < len(tasks):
            tasks = random.Random(f"{s.seed}/prompts/{round_}").sample(tasks, dpo.prompts_per_round)
        with distributed.gathered_parameters(self.learner.model, s.zero_stage):
            pairs = sample_pairs(self.generator, tasks, dpo.samples_per_prompt, dpo.pairs_per_prompt,
                                 dpo.length_matched, s.sampling.params(step_seed(s.seed, round_)))
        if distributed.is_main():
            write_jsonl(round_dir / "pairs.jsonl", pairs)
        distributed.barrier()
        log.info("dpo: round %d pairs %s", round_, pair_summary(pairs, len(tasks)))
        return pairs


def dpo_update(dpo: DPOConfig, micro_batch_size: int, learner: Learner, batch: PairBatch) -> dict:
    """One optimiser step on this rank's share of the step's pairs; statistics of the whole (global) batch."""
    rank, world = distributed.rank(), distributed.world_size()
    total = len(batch.pairs)
    mine = list(range(rank, total, world))
    per_micro = max(1, micro_batch_size // 2)  # a pair is two rows
    chunks = [mine[i:i + per_micro] for i in range(0, len(mine), per_micro)] or [[0]]  # [0]: weight 0 below
    weights = [len(c) / total for c in chunks] if mine else [0.0]
    count = global_micro_count(len(mine), per_micro)
    chunks, weights = chunks + [chunks[-1]] * (count - len(chunks)), weights + [0.0] * (count - len(weights))
    own_tokens = sum(len(batch.pairs[i]["chosen_ids"]) + len(batch.pairs[i]["rejected_ids"]) for i in mine)
    tokens = max(1.0, distributed.all_reduce([float(own_tokens)])[0])
    learner.model.train()
    totals: dict[str, float] = {"kl": 0.0, "entropy": 0.0}
    for i, (chunk, weight) in enumerate(zip(chunks, weights)):
        mb, ref, p = pair_batch(learner.tokenizer, [batch.pairs[j] for j in chunk]), batch.ref[chunk], len(chunk)
        mask = mb["response_mask"]  # [2p, T]
        logp, entropy = response_logprobs(learner.model, mb, with_entropy=True, dtype=learner.autocast)  # [2p, T]
        policy = (logp * mask).sum(-1)  # [2p]
        loss, stats = preference_loss(policy[:p], policy[p:], ref[:, 0], ref[:, 1], dpo.dpo_beta, dpo.dpo_loss,
                                      dpo.label_smoothing)
        stats["nll"] = chosen_nll(policy[:p].detach(), mask[:p].sum(-1))
        if dpo.nll_coef:
            loss = loss + dpo.nll_coef * chosen_nll(policy[:p], mask[:p].sum(-1))
        learner.engine.backward(loss * weight, last=i == len(chunks) - 1)
        add_shares(totals, {"loss": loss.detach(), **stats}, weight)
        if weight:
            # k1 estimate of KL(pi || ref) per token on the pair samples (not samples of pi: a rough gauge)
            totals["kl"] += float((policy.detach() - ref.T.flatten()).sum()) / tokens
            totals["entropy"] += float((entropy * mask).sum()) / tokens
    grad_norm = learner.engine.step()
    learner.model.eval()
    return {**reduce_sums(totals), "grad_norm": float(grad_norm), "train_tokens": float(own_tokens)}


def dpo_algorithm(config: TrainConfig, model, tasks: list[Task]) -> Algorithm:
    """DPO for the loop: rounds of pairs, the reference always loaded (the loss needs it)."""
    dpo = config.dpo
    log.info("dpo: loss %s%s", dpo.dpo_loss, f" + {dpo.nll_coef} x NLL of the chosen answer (RPO; --nll-coef 0 is "
             "plain DPO)" if dpo.nll_coef else " (plain DPO: --nll-coef 0)")
    return Algorithm("dpo", PairSource(DPOSettings.of(config), tasks),
                     partial(dpo_update, dpo, config.micro_batch_size), needs_reference=True)
