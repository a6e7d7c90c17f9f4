"""GRPO, PPO and DPO from the same start, with the same sample budget: which one pays on this task?

    python benchmarks/compare_algorithms.py --output runs/compare            # the embedded default
    python benchmarks/compare_algorithms.py --output /tmp/cmp --quick        # a minute-long smoke check
    python benchmarks/compare_algorithms.py --output runs/cmp --config my.yaml --algos grpo,ppo

The shared stages (built-in tasks, init-model, sft, eval of the start, curate) run once, into
OUTPUT/shared; each algorithm's run directory starts as a copy of them, and `reasoner run --algo A`
does the rest (for dpo: pairs; then train, the final eval and the report) in a child process whose wall
time and peak resident memory are measured. GRPO and PPO sample steps x prompts_per_step x group_size
answers; `reasoner run` gives DPO the same number (see pipelines/run.py). Length drift is the mean
length of the final policy's held-out answers over the start policy's, minus one.

Writes OUTPUT/compare.json and OUTPUT/compare.md (the table the README shows) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

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


def mean_length(samples: Path) -> float:
    rows = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    return sum(r["tokens"] for r in rows) / max(1, len(rows))


def row(algo: str, run_dir: Path, cost: dict) -> dict:
    if cost["failed"]:
        return {"algo": algo, "failed": True, **cost}
    summary = json.loads((run_dir / "summary.json").read_text())
    stages = summary["stages"]
    start, final = (mean_length(run_dir / "eval" / f"{n}.samples.jsonl") for n in ("start", "final"))
    families = {f: {"start": v["start"]["pass@1"], "final": v["final"]["pass@1"]}
                for f, v in summary["families"].items()}
    return {"algo": algo, "families": families,
            "train_s": sum(stages[s]["seconds"] for s in ("pairs", "train") if s in stages),
            "wall_s": cost["wall_s"], "peak_mib": cost["peak_mib"],
            "length_start": start, "length_final": final, "length_drift": final / max(1e-9, start) - 1.0}


def table(rows: list[dict]) -> str:
    families = sorted({f for r in rows for f in r.get("families", {})})
    head = ["algo", *[f"{f} pass@1 start -> final" for f in families], "train (s)", "run wall (s)",
            "peak memory (MiB)", "length drift"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("failed"):
            lines.append(f"| {r['algo']} | failed: see {r['algo']}/log.txt |" + " |" * (len(head) - 2))
            continue
        cells = [r["algo"]]
        for f in families:
            v = r["families"].get(f)
            cells.append(f"{v['start']:.3f} -> {v['final']:.3f} ({v['final'] - v['start']:+.3f})" if v else "-")
        cells += [f"{r['train_s']:.0f}", f"{r['wall_s']:.0f}", f"{r['peak_mib']:.0f}",
                  f"{r['length_drift']:+.1%} ({r['length_start']:.1f} -> {r['length_final']:.1f} tokens)"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="directory for the shared stages and one run per algorithm")
    parser.add_argument("--algos", default="grpo,ppo,dpo", help="comma-separated algorithms")
    parser.add_argument("--config", help="YAML or JSON run config applied to every run (as `reasoner run --config`)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script, not the algorithms")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.output)
    values = run_config(args)
    out.mkdir(parents=True, exist_ok=True)
    config_file = out / "compare_config.json"
    config_file.write_text(json.dumps(values, indent=2))
    prepare_shared(out / "shared", values)
    rows = []
    for algo in args.algos.split(","):
        run_dir = out / algo
        seed_run_dir(out / "shared", run_dir)
        cost = measured_run(algo, run_dir, config_file)
        rows.append(row(algo, run_dir, cost))
        (out / "compare.json").write_text(json.dumps(rows, indent=2))
    text = table(rows)
    (out / "compare.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
