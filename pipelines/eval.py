"""`reasoner eval`: n samples per task, verified, and the unbiased pass@k (the report format the README describes).

With `--responses FILE` it scores given responses (one `{"id", "response"}` per line, any number per
task) instead of sampling a model: the same report from outside generations, or from reference answers.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

import torch

import verifiers
from data.records import DataError, Task, iter_jsonl, read_tasks, require, write_json, write_jsonl
from pipelines.common import save_stage_config
from reasoner.config import EvalConfig
from reasoner.evaluation import sample_records, summarise
from reasoner.sampling import TaskResult, sample_and_verify
from reasoner.generation import Sample, make_generator
from reasoner.modeling import load_model, load_tokenizer

HELP = "sample N completions per task and report unbiased pass@k"
CONFIG = EvalConfig
log = logging.getLogger("reasoner.eval")


def parse_ks(text: str, n: int) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise ValueError(f"eval: --k must be comma-separated integers, got {text!r}") from None
    if not ks or ks[0] < 1 or ks[-1] > n:
        raise ValueError(f"eval: every k must be between 1 and n={n}, got {text!r}")
    return ks


def given_responses(path: str, tasks: list[Task]) -> list[TaskResult]:
    """The responses in `path` verified against their tasks (the tasks that have responses, in file order)."""
    by_id: dict[str, list[str]] = defaultdict(list)
    known = {t.id for t in tasks}
    for lineno, row in iter_jsonl(path):
        require(row, ("id", "response"), f"{path}:{lineno}")
        if str(row["id"]) not in known:
            raise DataError(f"{path}:{lineno}: field 'id': no task {row['id']!r} in the data")
        by_id[str(row["id"])].append(str(row["response"]))
    chosen = [t for t in tasks if t.id in by_id]
    verdicts = iter(verifiers.verify_many([(t.verifier, r, t.reference) for t in chosen for r in by_id[t.id]]))
    return [TaskResult(t, [Sample([], r, [], "stop") for r in by_id[t.id]], [next(verdicts) for _ in by_id[t.id]])
            for t in chosen]


def run_stage(config: EvalConfig) -> dict:
    if not ((config.model or config.responses) and config.data and config.output):
        raise ValueError("eval: --model (or --responses), --data and --output are required")
    tasks = read_tasks(config.data)
    output = Path(config.output)
    if config.responses:
        results = given_responses(config.responses, tasks)
        if not results:
            raise DataError(f"{config.responses}: no responses")
        ks = parse_ks(config.k, min(r.n for r in results))
        log.info("eval: %d responses to %d of %d tasks from %s, k=%s", sum(r.n for r in results), len(results),
                 len(tasks), config.responses, ks)
    else:
        ks = parse_ks(config.k, config.n)
        tokenizer, model = load_tokenizer(config.model), load_model(config.model)
        log.info("eval: %s on %d tasks, n=%d, k=%s", config.model, len(tasks), config.n, ks)
        generator = make_generator(config.backend, model, tokenizer, config.sampling)
        params = config.sampling.params(config.seed)
        torch.manual_seed(config.seed)
        results = sample_and_verify(generator, tasks, config.n, params, desc="eval")
    save_stage_config(config, output.parent, output.stem + ".config.json")
    report = summarise(results, ks)
    report["model"] = str(config.model or config.responses)
    write_jsonl(output.with_name(output.stem + ".samples.jsonl"), sample_records(results))
    write_json(output, report)
    overall = " ".join(f"{k}={v:.3f}" for k, v in report["overall"].items() if k.startswith("pass@") and "ci" not in k)
    log.info("eval: overall %s", overall)
    if "tools" in report:
        log.info("eval: tools %s", " ".join(f"{k}={v:.3f}" for k, v in report["tools"].items()))
    for family, agg in report["by"].get("family", {}).items():
        log.info("eval: %-6s pass@1=%.3f (%d tasks)", family, agg.get("pass@1", float("nan")), agg["tasks"])
    return report
