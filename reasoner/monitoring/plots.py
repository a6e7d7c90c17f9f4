"""The report's plots: PNG files of the training metrics and of held-out pass@k, drawn from what a run wrote.

It reads metrics.jsonl, alarms.jsonl, summary.json, eval/start.json and eval/final.json and the training
config, and needs none of them to be complete. The page that shows the plots is `page.py`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from data.records import read_jsonl  # noqa: E402
from reasoner.config import AlarmConfig, from_dict  # noqa: E402

COLORS = {"reward": "#1f77b4", "heldout": "#d62728", "accuracy": "#9467bd", "mean": "#1f77b4", "p90": "#ff7f0e",
          "correct": "#2ca02c", "wrong": "#d62728", "cap": "#7f0000", "entropy": "#9467bd", "kl": "#ff7f0e",
          "start": "#9aa5b1", "final": "#1f77b4", "alarm": "#d62728"}
ALARM_PLOTS = {"length_drift": "length", "truncation": "truncation", "entropy_collapse": "kl_entropy",
               "kl_spike": "kl_entropy", "reward_vs_heldout": "reward", "tool_failures": "tools",
               "rollout_mismatch": "mismatch"}


# ------------------------------------------------------------------------------------ reading the run

def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def load_metrics(run_dir: Path) -> list[dict]:
    return read_jsonl(Path(run_dir) / "metrics.jsonl", missing_ok=True)


def train_config(run_dir: Path) -> dict:
    """The training config: the run's `train` section, or a `reasoner train` output's config.json."""
    for path in (run_dir / "train" / "config.json", run_dir / "config.json"):
        if "steps" in read_json(path):
            return read_json(path)
    return read_json(run_dir / "run_config.json").get("train", {})


def alarm_thresholds(config: dict) -> AlarmConfig:
    try:
        return from_dict(AlarmConfig, config.get("alarms", {}))
    except (ValueError, TypeError):
        return AlarmConfig()


def series(metrics: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    points = [(m["step"], m[key]) for m in metrics if isinstance(m.get(key), (int, float))]
    if not points:
        return np.array([]), np.array([])
    steps, values = zip(*points)
    return np.array(steps), np.array(values, dtype=float)


def smooth(values: np.ndarray, window: int = 5) -> np.ndarray:
    """Centred moving average (so the curve does not lag the raw values); narrower at the ends."""
    if len(values) < 2:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(len(values))
    low, high = np.maximum(0, idx - window // 2), np.minimum(len(values), idx + window // 2 + 1)
    return (sums[high] - sums[low]) / (high - low)


# ------------------------------------------------------------------------------------ plots

def _figure(title: str, ylabel: str):
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    ax.set_title(title, fontsize=11, loc="left")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def _line(ax, label: str, x: np.ndarray, y: np.ndarray, color: str, width: float = 2.0, raw: bool = True) -> bool:
    """The smoothed curve, over the raw values drawn faintly; False when there is nothing to draw."""
    if not len(x):
        return False
    if raw and len(x) > 5:
        ax.plot(x, y, color=color, alpha=0.25, linewidth=1)
    ax.plot(x, smooth(y) if len(x) > 5 else y, color=color, linewidth=width, label=label)
    return True


def _right_axis(ax, ylabel: str, label: str, x: np.ndarray, y: np.ndarray, color: str, smoothed: bool) -> None:
    """A second series on its own scale (right axis), named in the left axis's legend; `smoothed`: faint
    raw values under a bold 5-step average, as `_line` draws them."""
    right = ax.twinx()
    right.spines[["top"]].set_visible(False)
    right.set_ylabel(ylabel, color=color)
    if smoothed:
        right.plot(x, y, color=color, alpha=0.25, linewidth=1)
    right.plot(x, smooth(y) if smoothed else y, color=color, linewidth=2 if smoothed else 1.2)
    ax.plot([], [], color=color, linewidth=2 if smoothed else 1.2, label=label)


def _mark_alarms(ax, steps: list[int]) -> None:
    for i, step in enumerate(sorted(set(steps))):
        ax.axvline(step, color=COLORS["alarm"], linestyle=":", linewidth=1.2, label="alarm" if i == 0 else None)


def _save(fig, ax, path: Path) -> None:
    handles, _ = ax.get_legend_handles_labels()
    if handles:  # below the axes, where it hides no data
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=min(3, len(handles)), fontsize=8,
                  frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_metrics(run_dir: Path, metrics: list[dict], config: dict | None = None,
                 alarms: list[dict] | None = None) -> list[tuple[str, str, str]]:
    """Write the training plots into RUN_DIR/plots; return (file, title, how to read it) triples."""
    config = config or {}
    thresholds = alarm_thresholds(config)
    alarm_steps: dict[str, list[int]] = {}
    for a in alarms or []:
        alarm_steps.setdefault(ALARM_PLOTS.get(a["alarm"], ""), []).append(a["step"])
    plots = run_dir / "plots"
    plots.mkdir(exist_ok=True)
    made = []

    def save(fig, ax, name: str, title: str, note: str) -> None:
        _mark_alarms(ax, alarm_steps.get(name, []))
        _save(fig, ax, plots / f"{name}.png")
        made.append((f"plots/{name}.png", title, note))

    title = "Reward and pass rate"
    fig, ax = _figure(title, "fraction")
    _line(ax, "training reward", *series(metrics, "reward_mean"), COLORS["reward"])
    steps, acc = series(metrics, "accuracy")
    _, reward = series(metrics, "reward_mean")
    if len(acc) and (len(acc) != len(reward) or np.abs(acc - reward).max() > 1e-9):
        _line(ax, "training pass rate", steps, acc, COLORS["accuracy"], width=1.5)
    hx, hy = series(metrics, "heldout_accuracy")
    if len(hx):
        ax.plot(hx, hy, "o-", color=COLORS["heldout"], linewidth=1.5, markersize=5, label="held-out check")
    top = max([0.25] + [float(np.nanmax(v)) for v in (reward, acc, hy) if len(v)])
    ax.set_ylim(-0.02, min(1.02, 1.15 * top))
    save(fig, ax, "reward", title, "Faint: each step; bold: 5-step centred average. Red dots: the periodic held-out "
         "check. Reward rising while the held-out line falls means the policy is learning the training set, "
         "not the skill.")

    title = "Response length (tokens)"
    fig, ax = _figure(title, "tokens")
    steps, mean_len = series(metrics, "response_length_mean")
    if len(mean_len):
        base = float(np.mean(mean_len[:thresholds.alarm_baseline_steps]))
        band = thresholds.length_drift_band
        ax.axhspan(base * (1 - band), base * (1 + band), color="grey", alpha=0.12,
                   label=f"drift band (baseline {base:.0f} \u00b1{band:.0%})")
        ax.axhline(base, color="grey", linestyle="--", linewidth=1)
    _line(ax, "right answers", *series(metrics, "response_length_correct"), COLORS["correct"], 1.3, raw=False)
    _line(ax, "wrong answers", *series(metrics, "response_length_wrong"), COLORS["wrong"], 1.3, raw=False)
    _line(ax, "p90", *series(metrics, "response_length_p90"), COLORS["p90"], width=1.5)
    _line(ax, "mean", steps, mean_len, COLORS["mean"])  # last, so that it is drawn on top
    cap = config.get("sampling", {}).get("max_new_tokens")
    if cap:
        ax.axhline(cap, color=COLORS["cap"], linestyle="-.", linewidth=1, label=f"length cap ({cap})")
    ax.set_ylim(bottom=0)
    save(fig, ax, "length", title, f"Grey band: \u00b1{thresholds.length_drift_band:.0%} around the mean length of "
         f"the first {thresholds.alarm_baseline_steps} steps; leaving it is the length-drift alarm. Right vs wrong "
         "answers apart show whether length buys accuracy.")

    title = "Truncation: responses stopped at the length cap"
    fig, ax = _figure(title, "fraction of responses")
    _line(ax, "truncation rate", *series(metrics, "truncation_rate"), COLORS["p90"])
    ax.axhline(thresholds.truncation_max, color=COLORS["alarm"], linestyle="--", linewidth=1,
               label=f"alarm above {thresholds.truncation_max:.0%}")
    ax.set_ylim(-0.02, max(0.5, float(np.nanmax(series(metrics, "truncation_rate")[1], initial=0)) + 0.05))
    save(fig, ax, "truncation", title, "A truncated response has no final answer, so its reward is zero whatever it "
         "reasoned; a rising rate silently caps the reward.")

    title = "Entropy and KL to the reference"
    fig, ax = _figure(title, "entropy (nats / token)")
    _line(ax, "entropy", *series(metrics, "entropy"), COLORS["entropy"])
    ax.axhline(thresholds.entropy_floor, color=COLORS["entropy"], linestyle="--", linewidth=1,
               label=f"entropy floor ({thresholds.entropy_floor:g})")
    ax.set_ylim(bottom=0)
    kx, kl = series(metrics, "kl")
    beta = config.get("beta")
    if len(kl) and np.any(kl != 0):
        _right_axis(ax, "KL", "KL (right axis)", kx, kl, COLORS["kl"], smoothed=True)
    else:
        why = " (beta = 0: no reference model)" if beta == 0 else ""
        ax.text(0.98, 0.04, f"KL not measured{why}", transform=ax.transAxes, ha="right", fontsize=8, color="#555")
    save(fig, ax, "kl_entropy", title, "Entropy falling towards zero means the policy has stopped exploring; a KL "
         "spike means one update moved it far from where it started.")

    title = "Policy update: clipped tokens"
    fig, ax = _figure(title, "fraction of tokens")
    _line(ax, "clipped low (ratio < 1 - eps_low)", *series(metrics, "clip_frac_low"), COLORS["wrong"])
    _line(ax, "clipped high (ratio > 1 + eps_high)", *series(metrics, "clip_frac_high"), COLORS["correct"])
    clipped = np.concatenate([series(metrics, "clip_frac_low")[1], series(metrics, "clip_frac_high")[1]])
    ax.set_ylim(0, max(0.05, 1.15 * float(np.nanmax(clipped, initial=0))))
    if not np.any(clipped):
        ax.text(0.5, 0.55, "no token was clipped", transform=ax.transAxes, ha="center", color="#555")
    save(fig, ax, "clipping", title, "Zero with one epoch per batch (the ratio is exactly 1); above a few percent "
         "the updates are larger than the clip range allows.")

    title = "Groups without signal and verifier health"
    fig, ax = _figure(title, "fraction")
    _line(ax, "groups with equal rewards (no gradient)", *series(metrics, "equal_reward_groups"), COLORS["mean"])
    _line(ax, "no answer found", *series(metrics, "no_answer_rate"), COLORS["p90"], width=1.5)
    _line(ax, "verifier timeout", *series(metrics, "verifier_timeout_rate"), COLORS["wrong"], width=1.5)
    ax.set_ylim(-0.02, 1.02)
    save(fig, ax, "groups_verifier", title, "Equal-reward groups (all right or all wrong) give GRPO no gradient. "
         "Timeouts and unparsable answers are verifier problems, not model ones.")

    if any("rollout_logprob_kl" in m for m in metrics):
        title = "Sampler against trainer: log-probs of the sampled tokens"
        fig, ax = _figure(title, "KL(sampler || trainer) per token")
        _line(ax, "KL (k3)", *series(metrics, "rollout_logprob_kl"), COLORS["kl"])
        ax.axhline(thresholds.rollout_kl_max, color=COLORS["alarm"], linestyle="--", linewidth=1,
                   label=f"alarm above {thresholds.rollout_kl_max:g}")
        ax.set_ylim(bottom=0)
        rx, worst = series(metrics, "rollout_ratio_max")
        if len(worst):
            _right_axis(ax, "largest pi_trainer / pi_sampler", "largest token ratio (right axis)", rx, worst,
                        COLORS["mean"], smoothed=False)
        save(fig, ax, "mismatch", title, "Zero when the trainer samples its own tokens in its own dtype. Another engine "
             "or dtype (vLLM, --rollout-dtype bfloat16) makes the samples off-policy; --tis-cap corrects for it.")

    if any("tool_use_rate" in m for m in metrics):
        title = "Tool calls (--tools python)"
        fig, ax = _figure(title, "fraction")
        _line(ax, "answers that called the tool", *series(metrics, "tool_use_rate"), COLORS["mean"])
        _line(ax, "right, with a call", *series(metrics, "accuracy_with_tool"), COLORS["correct"], 1.5, raw=False)
        _line(ax, "right, without a call", *series(metrics, "accuracy_without_tool"), COLORS["wrong"], 1.5, raw=False)
        _line(ax, "calls that failed", *series(metrics, "tool_error_rate"), COLORS["p90"], 1.2, raw=False)
        _line(ax, "calls that timed out", *series(metrics, "tool_timeout_rate"), COLORS["cap"], 1.2, raw=False)
        ax.set_ylim(-0.02, 1.02)
        save(fig, ax, "tools", title, "Does RL raise the use of the tool where it pays? Right-answer rates with and "
             "without a call show whether it does; failures are the program's errors, timeouts its own kind.")

    title = "Where each step's time went"
    fig, ax = _figure(title, "seconds")
    parts = [("generation", "time_generate_s", COLORS["mean"]), ("tool calls (sandbox)", "time_tool_s", COLORS["kl"]),
             ("verification", "time_verify_s", COLORS["p90"]), ("update", "time_train_s", COLORS["correct"]),
             ("held-out check", "time_heldout_s", COLORS["heldout"])]
    steps = np.array([m["step"] for m in metrics])
    stacks = [(label, np.array([m.get(key) or 0.0 for m in metrics], dtype=float), color)
              for label, key, color in parts if any(m.get(key) for m in metrics)]
    if any(m.get("time_tool_s") for m in metrics):  # the sandbox's share is inside the generation time
        stacks[0] = (stacks[0][0], stacks[0][1] - stacks[1][1], stacks[0][2])
    if stacks:
        ax.stackplot(steps, *[s for _, s, _ in stacks], labels=[label for label, _, _ in stacks],
                     colors=[c for _, _, c in stacks], alpha=0.8)
    save(fig, ax, "time", title, "Stacked seconds per step; tokens per second are in the table below.")
    return made


def eval_reports(run_dir: Path) -> dict[str, dict]:
    return {name: read_json(run_dir / "eval" / f"{name}.json") for name in ("start", "final")}


def passk_rows(summary: dict, evals: dict[str, dict]) -> list[dict]:
    """One row per (family, pass@k): start and final values with their 95% intervals where known, and the
    interval of the change (tasks resampled in pairs) where summary.json has one."""
    rows = []
    for family, values in summary.get("families", {}).items():
        for key in values.get("start", {}):
            row = {"family": family, "metric": key}
            for name in ("start", "final"):
                row[name] = values.get(name, {}).get(key, float("nan"))
                ci = evals.get(name, {}).get("by", {}).get("family", {}).get(family, {}).get(f"{key}_ci95")
                row[f"{name}_ci"] = ci
            row["change_ci"] = values.get("change", {}).get(f"{key}_ci95")
            rows.append(row)
    return rows


def plot_passk(run_dir: Path, rows: list[dict]) -> tuple[str, str, str] | None:
    if not rows:
        return None
    labels = [f"{r['family']}\n{r['metric']}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6.4, 1.1 * len(rows)), 4.2), dpi=120)
    for offset, name in ((-0.2, "start"), (0.2, "final")):
        values = np.array([r[name] for r in rows], dtype=float)
        errors = None
        if all(r[f"{name}_ci"] for r in rows):
            errors = np.array([[max(0.0, v - r[f"{name}_ci"][0]), max(0.0, r[f"{name}_ci"][1] - v)]
                               for v, r in zip(values, rows)]).T
        bars = ax.bar(x + offset, values, 0.4, yerr=errors, capsize=3, color=COLORS[name],
                      label=f"{name} policy" + (" (95% CI)" if errors is not None else ""), error_kw={"alpha": 0.6})
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=7, padding=2)
    ax.set_xticks(x, labels, fontsize=8)
    highest = max([0.0] + [v for r in rows for v in [r["start"], r["final"], *(r["start_ci"] or []),
                                                      *(r["final_ci"] or [])] if math.isfinite(v)])
    ax.set_ylim(0, min(1.08, max(0.3, 1.2 * highest)))
    ax.set_ylabel("pass@k")
    ax.set_title("Held-out pass@k: start vs final policy", fontsize=11, loc="left")
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    (run_dir / "plots").mkdir(exist_ok=True)
    fig.savefig(run_dir / "plots" / "passk.png")
    plt.close(fig)
    return ("plots/passk.png", "Held-out pass@k, start vs final policy",
            "Unbiased pass@k on the held-out split of each family; whiskers are bootstrap 95% intervals over tasks.")
