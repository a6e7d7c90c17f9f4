"""`reasoner pairs`: (right, wrong) answer pairs from the policy's own verified samples, for DPO."""

from __future__ import annotations

import logging
import random
from pathlib import Path

from data.pairs import pair_summary
from data.records import read_tasks, write_json, write_jsonl
from pipelines.common import save_stage_config
from reasoner.config import PairsConfig
from reasoner.sampling import sample_pairs
from reasoner.generation import make_generator
from reasoner.modeling import load_model, load_tokenizer

HELP = "build DPO pairs (same prompt, one verified right, one wrong) from the policy's samples"
CONFIG = PairsConfig
log = logging.getLogger("reasoner.pairs")


def run_stage(config: PairsConfig) -> Path:
    if not (config.model and config.data and config.output):
        raise ValueError("pairs: --model, --data and --output are required")
    output = Path(config.output)
    tasks = read_tasks(config.data)
    if 0 < config.max_prompts < len(tasks):
        tasks = random.Random(config.seed).sample(tasks, config.max_prompts)
    tokenizer, model = load_tokenizer(config.model), load_model(config.model)
    save_stage_config(config, output.parent, output.stem + ".config.json")
    params = config.sampling.params(config.seed)
    generator = make_generator(config.backend, model, tokenizer, config.sampling)
    pairs = sample_pairs(generator, tasks, config.samples_per_prompt, config.pairs_per_prompt, config.length_matched,
                         params)
    write_jsonl(output, pairs)
    summary = pair_summary(pairs, len(tasks))
    write_json(output.with_name(output.stem + ".summary.json"), summary)
    log.info("pairs: %s", summary)
    if not pairs:
        raise ValueError("pairs: no prompt had both a right and a wrong sample; curate a band of prompts first")
    return output
