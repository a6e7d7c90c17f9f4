"""`reasoner train`: RL on task records (GRPO here; PPO and DPO by --algo)."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
from pathlib import Path

import torch

from data.records import read_tasks
from pipelines.common import save_stage_config
from reasoner.training import distributed
from reasoner.config import TrainConfig
from reasoner.modeling import load_model, load_tokenizer

HELP = "reinforcement learning from verifiable rewards"
CONFIG = TrainConfig
log = logging.getLogger("reasoner.train")


def launch(config: TrainConfig) -> Path:
    """Re-run this stage under the DeepSpeed launcher with `config.nproc` processes (per machine)."""
    output = Path(config.output)
    output.mkdir(parents=True, exist_ok=True)
    config_file = output / "launch_config.json"
    save_stage_config(dataclasses.replace(config, nproc=1), output, config_file.name)  # ranks do not relaunch
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed on the CPU: gloo between processes
    command = ["deepspeed", "--num_gpus", str(config.nproc), "--no_local_rank", "--master_port",
               str(config.master_port)]
    if config.hostfile:
        command += ["--hostfile", config.hostfile]
    command += ["--module", "pipelines.cli", "train", "--config", str(config_file)]
    if shutil.which("deepspeed") is None:
        raise ValueError("train: --nproc above 1 needs the `deepspeed` launcher on PATH")
    log.info("train: launching %d processes: %s", config.nproc, " ".join(command))
    result = subprocess.run(command, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"train: the DeepSpeed launcher exited with status {result.returncode}")
    return output / "final"


def run_stage(config: TrainConfig) -> Path:
    if not (config.model and config.data and config.output):
        raise ValueError("train: --model, --data and --output are required")
    if config.nproc > 1 and not distributed.launched_distributed():
        return launch(config)
    distributed.init()
    if not distributed.is_main():
        logging.getLogger().setLevel(logging.WARNING)
    from reasoner.training import ALGORITHMS
    from reasoner.training.loop import train

    if config.algo not in ALGORITHMS:
        raise ValueError(f"train: unknown --algo {config.algo!r}; choose one of {', '.join(ALGORITHMS)}")
    tasks = read_tasks(config.data)
    tokenizer, model = load_tokenizer(config.model), load_model(config.model, device=distributed.device())
    if distributed.is_main():
        save_stage_config(config, Path(config.output))
    log.info("train: %s on %d tasks, %d steps of %d prompts x %d samples", config.algo, len(tasks), config.steps,
             config.prompts_per_step, config.group_size)
    heldout = read_tasks(config.heldout) if config.heldout else None
    final = train(config, model, tokenizer, ALGORITHMS[config.algo](config, model, tasks), heldout)
    distributed.shutdown()
    return final
