"""`reasoner run`: the whole chain into one run directory, continuing where a previous run stopped.

    init-model -> sft -> eval (start) -> curate -> train -> eval (final) -> summary.json -> report

With --algo dpo, `pairs` runs between curate and train; DPO gets the same sample budget as GRPO and PPO
(steps x prompts_per_step x group_size), spent on samples_per_prompt answers to each of its prompts.

Each finished stage is recorded in DIR/stages.json and skipped next time; training resumes from its
last checkpoint. The stages run inside DIR, so every path they write into a config or summary is relative
to it: a copy of the directory resumes into the copy and never touches the original.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from pathlib import Path

import torch

from data.dedup import contamination, format_report
from data.records import read_tasks, write_json, write_tasks
from data.synthetic import generate
from pipelines import curate, eval as eval_stage, init_model, pairs, report, sft, train
from pipelines.common import StageBook, save_stage_config
from reasoner import config as cfg
from reasoner.evaluation import paired_change

HELP = "run the whole pipeline (init-model, sft, eval, curate, train, eval, report) into a directory"
CONFIG = cfg.RunConfig
log = logging.getLogger("reasoner.run")


OUTSIDE_PATHS = ("model", "data", "heldout", "hostfile")  # inputs a user gives, outside the run directory


def derived(name: str, given, used, why: str) -> None:
    """Log a value `run` sets in place of the one the config gave (never silently)."""
    if given != used:
        log.info("run: %s = %s (%s; the config gave %s)", name, used, why, given)


def sampler_processes(config: cfg.RunConfig) -> int:
    """`--sampler-processes`, with 0 resolved: two where the hf backend samples on a CPU of two or more cores
    for one training process without tools (two processes of one thread sampled 1.2-1.5x as fast as one of
    two threads, README: Speed), else one."""
    if config.sampler_processes < 0:
        raise ValueError(f"--sampler-processes: {config.sampler_processes} is not 0 (auto) or a count of processes")
    if config.sampler_processes:
        return config.sampler_processes
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    on_cpu = not torch.cuda.is_available()
    alone = config.nproc == 1 and not config.hostfile and config.train.backend == "hf"
    pausing = config.tools != "none"  # tool calls pause rows, and such calls sample in the main process
    return 2 if on_cpu and alone and not pausing and cores >= 2 else 1


def plan(config: cfg.RunConfig) -> dict[str, object]:
    """Every stage's config, derived from the run config in this one place (paths relative to `output`)."""
    out = Path(config.output)
    tasks_train = config.data or str(out / "tasks" / "train.jsonl")
    tasks_heldout = config.heldout or str(out / "tasks" / "heldout.jsonl")
    start_model = config.model or str(out / "init")
    do_sft = config.sft_steps > 0 or (config.sft_steps < 0 and not config.model)
    sft_config = dataclasses.replace(config.sft, model=start_model, data=tasks_train, output=str(out / "sft"),
                                     steps=config.sft_steps if config.sft_steps > 0 else config.sft.steps)
    policy = str(out / "sft" / "model") if do_sft else start_model
    tools = {"tools": config.tools, "max_tool_calls": config.max_tool_calls,  # every stage samples alike
             "sampler_processes": sampler_processes(config)}
    for stage in ("train", "eval"):
        given = getattr(config, stage).sampling
        used = dataclasses.replace(given, **tools)
        derived(f"{stage}.sampling", given, used,
                "--tools, --max-tool-calls and --sampler-processes hold for every stage")
        config = dataclasses.replace(config, **{stage: dataclasses.replace(getattr(config, stage), sampling=used)})
    sampler = config.train.precision if config.train.rollout_dtype == "auto" else config.train.rollout_dtype
    curate_config = dataclasses.replace(config.curate, model=policy, data=tasks_train,
                                        output=str(out / "curate" / "curated.jsonl"),
                                        sampling=dataclasses.replace(config.train.sampling),
                                        precision=sampler if sampler in cfg.PRECISIONS else config.curate.precision)
    train_config = dataclasses.replace(config.train, model=policy, data=curate_config.output,
                                       output=str(out / "train"), metrics=str(out / "metrics.jsonl"),
                                       algo=config.algo, heldout=config.train.heldout or tasks_heldout,
                                       nproc=config.nproc, hostfile=config.hostfile)
    dpo = config.train.dpo
    budget_prompts = dpo.prompts_per_round or max(1, config.train.steps * config.train.prompts_per_step
                                                  * config.train.group_size // (dpo.samples_per_prompt * dpo.dpo_rounds))
    pairs_config = cfg.PairsConfig(model=policy, data=curate_config.output, output=str(out / "pairs" / "pairs.jsonl"),
                                   samples_per_prompt=dpo.samples_per_prompt, pairs_per_prompt=dpo.pairs_per_prompt,
                                   length_matched=dpo.length_matched, max_prompts=budget_prompts,
                                   sampling=dataclasses.replace(config.train.sampling), seed=config.train.seed,
                                   backend=config.train.backend)
    if config.algo == "dpo":
        train_config.dpo = dataclasses.replace(dpo, pairs=pairs_config.output, prompts_per_round=budget_prompts)
    for name in ("sampling", "precision"):
        derived(f"curate.{name}", getattr(config.curate, name), getattr(curate_config, name),
                "curate estimates pass rates under the sampling that training will use")
    derived("sft.steps", config.sft.steps, sft_config.steps, "--sft-steps")
    for name in ("algo", "nproc", "hostfile"):
        derived(f"train.{name}", getattr(config.train, name), getattr(train_config, name), f"--{name}")
    if config.algo == "dpo":
        derived("train.dpo.prompts_per_round", dpo.prompts_per_round, budget_prompts,
                "the sample budget of GRPO: steps x prompts_per_step x group_size / (samples_per_prompt x rounds)")
    final_model = str(out / "train" / "final")
    evals = {name: dataclasses.replace(config.eval, model=model, data=tasks_heldout,
                                       output=str(out / "eval" / f"{name}.json"))
             for name, model in (("start", policy), ("final", final_model))}
    return {"tasks": (tasks_train, tasks_heldout), "init": start_model, "do_sft": do_sft, "sft": sft_config,
            "curate": curate_config, "pairs": pairs_config, "train": train_config, "eval_start": evals["start"],
            "eval_final": evals["final"], "final_model": final_model}


@contextlib.contextmanager
def inside(directory: Path):
    """Run the stages with `directory` as the working directory, and come back after."""
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def run_stage(config: cfg.RunConfig) -> Path:
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    # Inputs outside the run directory are kept absolute; the run directory itself is "." to its config.
    config = dataclasses.replace(config, output=".", **{name: str(Path(getattr(config, name)).resolve())
                                                        for name in OUTSIDE_PATHS if getattr(config, name)})
    saved = out / "run_config.json"
    if saved.is_file():
        stored = cfg.from_dict(cfg.RunConfig, json.loads(saved.read_text()), str(saved))
        stored.output = "."  # where the directory is now, whatever an older run_config.json says
        if cfg.to_dict(stored) != cfg.to_dict(config):
            log.warning("run: %s exists; continuing with its saved config (start a new directory to change it)", saved)
        config = stored
    else:
        save_stage_config(config, out, "run_config.json")
    with inside(out):
        run_stages(config)
    print(f"run directory: {out}\nreport: {out / 'report.html'}\nsummary: {out / 'summary.json'}")
    return out


def run_stages(config: cfg.RunConfig) -> None:
    """Every stage not yet done, in the run directory (the working directory)."""
    out = Path(config.output)
    book = StageBook(out)
    steps = plan(config)
    started = time.time()

    def stage(name: str, fn, *args) -> None:
        if book.done(name):
            log.info("run: %s already done, skipping", name)
            return
        log.info("run: ---- %s ----", name)
        t0 = time.time()
        fn(*args)
        book.mark(name, time.time() - t0)

    if not config.data or not config.heldout:
        stage("tasks", write_builtin_tasks, config, out / "tasks")
    check_contamination(*steps["tasks"], out / "contamination.json")
    if not config.model:
        stage("init-model", init_model.run_stage, cfg.InitModelConfig(output=steps["init"], seed=config.seed))
    if steps["do_sft"]:
        stage("sft", sft.run_stage, steps["sft"])
    stage("eval-start", eval_stage.run_stage, steps["eval_start"])
    stage("curate", curate.run_stage, steps["curate"])
    if config.algo == "dpo":
        stage("pairs", pairs.run_stage, steps["pairs"])
    stage("train", launch_training, steps["train"])
    stage("eval-final", eval_stage.run_stage, steps["eval_final"])
    summary = write_summary(config, steps, book)
    stage("report", report.run_stage, cfg_report(out))
    book.entries.pop("report", None)  # the report is cheap and always redrawn from the latest files
    write_json(out / "stages.json", book.entries)
    log.info("run: finished in %.0fs this time (%.0fs in all)", time.time() - started, summary["seconds"])
    for family, values in summary["families"].items():
        low, high = values["change"]["pass@1_ci95"]
        log.info("run: %-5s pass@1 %.3f -> %.3f (%+.3f, 95%% interval over tasks %+.3f to %+.3f)", family,
                 values["start"]["pass@1"], values["final"]["pass@1"], values["change"]["pass@1"], low, high)


def cfg_report(out: Path):
    return report.ReportConfig(run_dir=str(out))


def write_builtin_tasks(config: cfg.RunConfig, directory: Path) -> None:
    """The built-in math and code families (and calc if asked), train and held-out splits (disjoint by
    construction)."""
    counts = {"math": config.math_train_tasks, "code": config.code_train_tasks}
    if config.calc_train_tasks:
        counts["calc"] = config.calc_train_tasks
    train_tasks = [t for fam, count in counts.items() for t in generate(fam, "train", count, config.seed, config.slip_rate)]
    heldout = [t for fam in counts for t in generate(fam, "heldout", config.heldout_tasks, config.seed)]
    write_tasks(directory / "train.jsonl", train_tasks)
    write_tasks(directory / "heldout.jsonl", heldout)
    log.info("run: wrote %d training and %d held-out built-in tasks to %s", len(train_tasks), len(heldout), directory)


def check_contamination(train_path: str, heldout_path: str, report_path: Path) -> None:
    """Word 13-gram overlap of the held-out prompts with the training prompts: logged, and kept beside the run."""
    if report_path.is_file():
        return
    report = contamination(read_tasks(train_path), read_tasks(heldout_path))
    write_json(report_path, report)
    log.log(logging.WARNING if report["exact_duplicates"] else logging.INFO, "run: %s", format_report(report))


def launch_training(train_config: cfg.TrainConfig) -> None:
    train.run_stage(train_config)


def write_summary(config: cfg.RunConfig, steps: dict, book: StageBook) -> dict:
    out = Path(config.output)
    start = json.loads(Path(steps["eval_start"].output).read_text())
    final = json.loads(Path(steps["eval_final"].output).read_text())
    families = {}
    for family in sorted(set(start["by"].get("family", {})) | set(final["by"].get("family", {}))):
        pick = lambda report: {k: v for k, v in report["by"]["family"].get(family, {}).items()
                               if k.startswith("pass@") and "ci" not in k}
        of_family = lambda report: [row for row in report["tasks"] if row["family"] == family]
        before, after = pick(start), pick(final)
        change = {}
        for key in sorted(before.keys() & after.keys()):
            change.update(paired_change(of_family(start), of_family(final), key))
        families[family] = {"start": before, "final": after, "change": change}
    summary = {
        "algo": config.algo,
        "world_size": config.nproc,
        "seconds": round(book.seconds()),
        "final_model": steps["final_model"],  # relative to the run directory, as every path inside it
        "start_model": steps["train"].model,
        "families": families,
        "overall": {"start": {k: v for k, v in start["overall"].items() if k.startswith("pass@") and "ci" not in k},
                    "final": {k: v for k, v in final["overall"].items() if k.startswith("pass@") and "ci" not in k}},
        "stages": book.entries,
    }
    write_json(out / "summary.json", summary)
    return summary
