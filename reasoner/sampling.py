"""Sampling and verifying: n completions per task, each checked by the task's verifier.

What `reasoner eval` scores, what `reasoner curate` estimates pass rates from, and what `reasoner pairs`
(and online DPO rounds) pair right with wrong answers from.
"""

from __future__ import annotations

from dataclasses import dataclass

import verifiers
from data.pairs import pair_records
from data.records import Task
from reasoner.config import SamplingParams
from reasoner.generation import Generator, Sample
from reasoner.monitoring.metrics import progress


@dataclass
class TaskResult:
    task: Task
    samples: list[Sample]
    verdicts: list[verifiers.Verdict]

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def c(self) -> int:
        return sum(v.correct for v in self.verdicts)


def sample_and_verify(generator: Generator, tasks: list[Task], n: int, params: SamplingParams,
                      desc: str = "sampling", chunk: int = 64) -> list[TaskResult]:
    """n samples per task, each verified by the task's verifier; shows progress."""
    results: list[TaskResult] = []
    with progress(total=len(tasks), desc=desc, unit="task") as bar:
        for start in range(0, len(tasks), chunk):
            part = tasks[start:start + chunk]
            seeded = params.with_seed(params.seed + start)
            groups = generator.generate([t.prompt for t in part], n, seeded)
            items = [(t.verifier, s.graded_text, t.reference) for t, group in zip(part, groups) for s in group]
            verdicts = verifiers.verify_many(items)
            for i, (task, group) in enumerate(zip(part, groups)):
                results.append(TaskResult(task, group, verdicts[i * n:(i + 1) * n]))
            bar.update(len(part))
    return results


def sample_pairs(generator: Generator, tasks: list[Task], samples_per_prompt: int, pairs_per_prompt: int,
                 length_matched: bool, params: SamplingParams) -> list[dict]:
    """Sample, verify and pair (`data.pairs.pair_records`): the rows of a pairs file."""
    results = sample_and_verify(generator, tasks, samples_per_prompt, params, desc="pairs")
    pairs = []
    for r in results:
        pairs += pair_records(r.task, [s.text for s in r.samples], [s.token_ids for s in r.samples],
                              [v.correct for v in r.verdicts], [s.truncated for s in r.samples], pairs_per_prompt,
                              length_matched, params.seed, [s.loss_mask for s in r.samples])
    return pairs
