"""Every --algo from the same start, with the same sample budget, over seeds: which one pays on this task?

    python benchmarks/compare_algorithms.py --output runs/compare            # every algorithm, seeds 0, 1, 2
    python benchmarks/compare_algorithms.py --output /tmp/cmp --quick --seeds 0   # a smoke check of the script
    python benchmarks/compare_algorithms.py --output runs/cmp --config my.yaml --algos grpo,dr_grpo,ppo

The shared stages (built-in tasks, init-model, sft, eval of the start, curate) run once, into
OUTPUT/shared; each algorithm's run directory starts as a copy of them, and `reasoner run --algo A`
does the rest (for dpo: pairs; then train, the final eval and the report) in a child process whose wall
time and peak resident memory are measured. The on-policy algorithms sample steps x prompts_per_step x
group_size answers; `reasoner run` gives DPO the same number (see pipelines/run.py). `dr_grpo` is GRPO with
Dr. GRPO's two knobs, `grpo_bf16` samples in bfloat16 while training in float32, `grpo_bf16_tis` corrects
that with truncated importance sampling (`VARIANTS`; not in the default list). Each seed is the training seed (`train.seed`: which prompts, which
samples, DPO's pairs); the start model and the curated tasks are the same for every run. Length drift is
the mean length of the final policy's held-out answers over the start policy's, minus one.

Writes OUTPUT/compare.json (every run) and OUTPUT/compare.md (per algorithm: the mean over seeds, the
range, and each seed; the table the README shows) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {  # name -> (--algo, train knobs)
    "dr_grpo": ("grpo", {"aggregation": "dr_grpo", "scale_by_std": False}),
    "grpo_bf16": ("grpo", {"rollout_dtype": "bfloat16"}),  # sampler in bfloat16, trainer in float32
    "grpo_bf16_tis": ("grpo", {"rollout_dtype": "bfloat16", "tis_cap": 2.0}),  # ... corrected by TIS
}
ALGOS = "grpo,dr_grpo,rloo,reinforce++,reinforce++-baseline,gspo,cispo,ppo,dpo"
SHARED_STAGES = ("tasks", "init-model", "sft", "eval-start", "curate")
SHARED_PATHS = ("tasks", "init", "sft", "curate", "eval/start.json", "eval/start.samples.jsonl")
QUICK = {"sft": {"steps": 60}, "curate": {"candidates": 200},
         "train": {"steps": 6, "prompts_per_step": 8, "group_size": 4}, "eval": {"n": 2, "k": "1,2"}}


def run_config(args) -> dict:
    from reasoner import config as cfg

    values = cfg.load_file(args.config) if args.config else {}
    if args.quick:
        for section, settings in QUICK.items():
            values[section] = {**settings, **values.get(section, {})}
        values.setdefault("math_train_tasks", 300)
        values.setdefault("code_train_tasks", 300)
        values.setdefault("heldout_tasks", 30)
    return values


def prepare_shared(shared: Path, values: dict) -> None:
    """The stages every algorithm starts from, run once (and skipped when already done)."""
    from pipelines import curate, eval as eval_stage, init_model, run, sft
    from pipelines.common import StageBook, setup_logging
    from reasoner import config as cfg

    setup_logging(shared)
    config = cfg.from_dict(cfg.RunConfig, {**values, "output": str(shared)}, "compare")
    steps, book = run.plan(config), StageBook(shared)
    jobs = {"tasks": lambda: run.write_builtin_tasks(config, shared / "tasks"),
            "init-model": lambda: init_model.run_stage(cfg.InitModelConfig(output=steps["init"], seed=config.seed)),
            "sft": lambda: sft.run_stage(steps["sft"]),
            "eval-start": lambda: eval_stage.run_stage(steps["eval_start"]),
            "curate": lambda: curate.run_stage(steps["curate"])}
    wanted = {"tasks": not (config.data and config.heldout), "init-model": not config.model, "sft": steps["do_sft"],
              "eval-start": True, "curate": True}  # the same conditions as pipelines/run.py
    for name in SHARED_STAGES:
        if wanted[name] and not book.done(name):
            t0 = time.time()
            jobs[name]()
            book.mark(name, time.time() - t0)


def seed_run_dir(shared: Path, run_dir: Path) -> None:
    """A run directory that already holds the shared stages, so `reasoner run` goes on from curate."""
    if (run_dir / "stages.json").is_file():
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    for rel in SHARED_PATHS:
        src, dst = shared / rel, run_dir / rel
        if not src.exists():  # stages skipped because --model or --data were given
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dst) if src.is_dir() else shutil.copy2(src, dst)
    book = json.loads((shared / "stages.json").read_text())
    (run_dir / "stages.json").write_text(json.dumps({k: book[k] for k in SHARED_STAGES if k in book}, indent=2))


def measured_run(algo: str, run_dir: Path, config_file: Path) -> dict:
    """`reasoner run --algo algo` in a child process: wall seconds and peak resident memory (MiB)."""
    child = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)")
    command = [sys.executable, "-m", "pipelines.cli", "run", "--algo", algo, "--output", str(run_dir),
               "--config", str(config_file)]
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", child, *command], stdout=subprocess.PIPE, text=True, check=True)
    peak_kib, rc = (int(x) for x in out.stdout.split()[-2:])
    if rc:
        print(f"compare: `{' '.join(command)}` failed with exit code {rc}; see {run_dir}/log.txt", file=sys.stderr)
    return {"wall_s": time.time() - t0, "peak_mib": peak_kib / 1024, "failed": bool(rc)}


def run_values(values: dict, name: str, seed: int) -> dict:
    """The run config of one algorithm (or variant) and seed."""
    knobs = VARIANTS.get(name, (name, {}))[1]
    return {**values, "train": {**values.get("train", {}), **knobs, "seed": seed}}


def mean_length(samples: Path) -> float:
    rows = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    return sum(r["tokens"] for r in rows) / max(1, len(rows))


def row(algo: str, seed: int, run_dir: Path, cost: dict) -> dict:
    if cost["failed"]:
        return {"algo": algo, "seed": seed, "failed": True, **cost}
    summary = json.loads((run_dir / "summary.json").read_text())
    stages = summary["stages"]
    start, final = (mean_length(run_dir / "eval" / f"{n}.samples.jsonl") for n in ("start", "final"))
    families = {f: {"start": v["start"]["pass@1"], "final": v["final"]["pass@1"]}
                for f, v in summary["families"].items()}
    return {"algo": algo, "seed": seed, "families": families,
            "train_s": sum(stages[s]["seconds"] for s in ("pairs", "train") if s in stages),
            "wall_s": cost["wall_s"], "peak_mib": cost["peak_mib"],
            "length_start": start, "length_final": final, "length_drift": final / max(1e-9, start) - 1.0}


def spread(values: list[float], spec: str) -> str:
    """Mean over seeds, the range [min, max], and each seed's value."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return format(mean, spec)
    each = ", ".join(format(v, spec) for v in values)
    return f"**{mean:{spec}}** [{min(values):{spec}}, {max(values):{spec}}] ({each})"


def table(rows: list[dict]) -> str:
    """One line per algorithm: held-out pass@1 after training per family, train seconds, peak memory and
    length drift, each the mean over seeds with its range (failed seeds named, left out of the means)."""
    families = sorted({f for r in rows for f in r.get("families", {})})
    algos = list(dict.fromkeys(r["algo"] for r in rows))
    starts = {f: next(r["families"][f]["start"] for r in rows if f in r.get("families", {})) for f in families}
    head = ["algo", "seeds", *[f"{f} pass@1 (start {starts[f]:.3f})" for f in families], "train (s)",
            "peak memory (MiB)", "length drift"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algo in algos:
        done = [r for r in rows if r["algo"] == algo and not r.get("failed")]
        failed = [str(r["seed"]) for r in rows if r["algo"] == algo and r.get("failed")]
        seeds = ",".join(str(r["seed"]) for r in done) + (f" (failed: {','.join(failed)})" if failed else "")
        if not done:
            lines.append(f"| {algo} | {seeds} |" + " |" * (len(head) - 2))
            continue
        cells = [algo, seeds]
        cells += [spread([r["families"][f]["final"] for r in done if f in r["families"]], ".3f") for f in families]
        cells += [spread([r["train_s"] for r in done], ".0f"), f"{max(r['peak_mib'] for r in done):.0f} (max)",
                  spread([r["length_drift"] for r in done], "+.1%")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="directory for the shared stages and one run per algorithm")
    parser.add_argument("--algos", default=ALGOS, help=f"comma-separated algorithms (default: {ALGOS})")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    parser.add_argument("--config", help="YAML or JSON run config applied to every run (as `reasoner run --config`)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script, not the algorithms")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.output)
    values = run_config(args)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare_config.json").write_text(json.dumps(values, indent=2))
    prepare_shared(out / "shared", values)
    done = {(r["algo"], r["seed"]): r for r in json.loads((out / "compare.json").read_text())} \
        if (out / "compare.json").is_file() else {}  # a rerun goes on where it stopped
    for seed in (int(s) for s in args.seeds.split(",")):  # seed-major: a partial run has every algorithm
        for name in args.algos.split(","):
            if (name, seed) not in done:
                run_dir = out / name / f"seed-{seed}"
                seed_run_dir(out / "shared", run_dir)
                config_file = run_dir.parent / f"config.seed-{seed}.json"
                config_file.write_text(json.dumps(run_values(values, name, seed), indent=2))
                done[name, seed] = row(name, seed, run_dir, measured_run(VARIANTS.get(name, (name,))[0], run_dir,
                                                                         config_file))
                (out / "compare.json").write_text(json.dumps(list(done.values()), indent=2))
    text = table(list(done.values()))  # every run in OUTPUT, this invocation's and earlier ones'

    (out / "compare.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
