"""`reasoner curate`: estimate each prompt's pass rate under the policy and keep a middle band."""

from __future__ import annotations

import logging
from pathlib import Path

from data.curation import balanced_subset, format_histogram, histogram, select_band, wilson_interval
from data.records import read_tasks, write_json, write_tasks
from pipelines.common import save_stage_config
from reasoner.config import CurateConfig
from reasoner.sampling import sample_and_verify
from reasoner.generation import make_generator
from reasoner.modeling import load_model, load_tokenizer
from reasoner.precision import autocast_dtype

HELP = "keep the prompts whose pass rate under the policy lies in a band"
CONFIG = CurateConfig
log = logging.getLogger("reasoner.curate")


def run_stage(config: CurateConfig) -> Path:
    if not (config.model and config.data and config.output):
        raise ValueError("curate: --model, --data and --output are required")
    if not 0.0 <= config.band_low <= config.band_high <= 1.0:
        raise ValueError(f"curate: need 0 <= band-low <= band-high <= 1, got {config.band_low}, {config.band_high}")
    output = Path(config.output)
    tasks = balanced_subset(read_tasks(config.data), config.candidates, config.seed)
    tokenizer, model = load_tokenizer(config.model), load_model(config.model)
    save_stage_config(config, output.parent, output.stem + ".config.json")
    log.info("curate: %d candidate prompts, %d samples each", len(tasks), config.samples_per_prompt)
    params = config.sampling.params(config.seed)
    generator = make_generator(config.backend, model, tokenizer, config.sampling,
                               dtype=autocast_dtype(config.precision, model))
    results = sample_and_verify(generator, tasks, config.samples_per_prompt, params, desc="curate")
    rates = []
    for r in results:
        low, high = wilson_interval(r.c, r.n)
        r.task.meta.update({"pass_rate": r.c / r.n, "pass_rate_ci95": [round(low, 4), round(high, 4)],
                            "pass_rate_samples": r.n})
        rates.append(r.c / r.n)
    kept = select_band([r.task for r in results], rates, config.band_low, config.band_high, config.max_prompts,
                       config.seed)
    if not kept:
        raise ValueError(f"curate: no prompt has a pass rate in [{config.band_low}, {config.band_high}]; "
                         "widen the band or warm the policy up first")
    write_tasks(output, kept)
    hist = histogram(rates)
    by_family: dict[str, int] = {}
    for t in kept:
        by_family[t.family] = by_family.get(t.family, 0) + 1
    write_json(output.with_name(output.stem + ".histogram.json"),
               {"candidates": len(tasks), "kept": len(kept), "kept_by_family": by_family,
                "band": [config.band_low, config.band_high], "histogram": hist})
    log.info("curate: pass-rate histogram of %d prompts:\n%s", len(rates), format_histogram(hist))
    log.info("curate: kept %d prompts in [%.2f, %.2f]: %s", len(kept), config.band_low, config.band_high, by_family)
    return output
