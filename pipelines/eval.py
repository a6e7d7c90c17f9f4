"""`reasoner eval`: n samples per task, verified, and the unbiased pass@k (CONTRACT report format)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from data.records import read_tasks, write_json, write_jsonl
from pipelines.common import save_stage_config
from reasoner.config import EvalConfig
from reasoner.evaluation import sample_and_verify, sample_records, summarise
from reasoner.generation import SamplingParams, make_generator
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


def run_stage(config: EvalConfig) -> dict:
    if not (config.model and config.data and config.output):
        raise ValueError("eval: --model, --data and --output are required")
    ks = parse_ks(config.k, config.n)
    tasks = read_tasks(config.data)
    output = Path(config.output)
    tokenizer, model = load_tokenizer(config.model), load_model(config.model)
    save_stage_config(config, output.parent, output.stem + ".config.json")
    log.info("eval: %s on %d tasks, n=%d, k=%s", config.model, len(tasks), config.n, ks)
    generator = make_generator(config.backend, model, tokenizer)
    params = SamplingParams(config.sampling.max_new_tokens, config.sampling.temperature, config.sampling.top_p,
                            config.seed)
    torch.manual_seed(config.seed)
    results = sample_and_verify(generator, tasks, config.n, params, desc="eval")
    report = summarise(results, ks)
    report["model"] = str(config.model)
    write_jsonl(output.with_name(output.stem + ".samples.jsonl"), sample_records(results))
    write_json(output, report)
    overall = " ".join(f"{k}={v:.3f}" for k, v in report["overall"].items() if k.startswith("pass@") and "ci" not in k)
    log.info("eval: overall %s", overall)
    for family, agg in report["by"].get("family", {}).items():
        log.info("eval: %-6s pass@1=%.3f (%d tasks)", family, agg.get("pass@1", float("nan")), agg["tasks"])
    return report
