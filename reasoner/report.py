"""The run report: PNG plots of the training metrics and one self-contained HTML page.

The page opens from disk with no server: plots are PNG files in plots/ beside it (relative links), tables
are plain HTML. It reads what the stages wrote and needs none of them to be complete: metrics.jsonl,
alarms.jsonl, summary.json, eval/start.json and eval/final.json, and the run's (or training's) config.
"""

from __future__ import annotations

import html
import json
import math
import time
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
               "kl_spike": "kl_entropy", "reward_vs_heldout": "reward"}
METRIC_ROWS = [  # key, what it is, format
    ("reward_mean", "reward, mean", ".3f"), ("accuracy", "training pass rate", ".3f"),
    ("heldout_accuracy", "held-out check, pass rate", ".3f"),
    ("response_length_mean", "length, mean (tokens)", ".1f"), ("response_length_p10", "length, p10", ".0f"),
    ("response_length_p50", "length, median", ".0f"), ("response_length_p90", "length, p90", ".0f"),
    ("response_length_max", "length, max", ".0f"), ("response_length_correct", "length of right answers", ".1f"),
    ("response_length_wrong", "length of wrong answers", ".1f"), ("length_drift", "length drift vs baseline", "+.1%"),
    ("truncation_rate", "truncated at the cap", ".1%"), ("equal_reward_groups", "groups with equal rewards", ".1%"),
    ("no_answer_rate", "verifier found no answer", ".1%"), ("verifier_timeout_rate", "verifier timed out", ".1%"),
    ("kl", "KL to the reference", ".4f"), ("entropy", "entropy (nats/token)", ".3f"),
    ("clip_frac_low", "clipped, low side", ".2%"), ("clip_frac_high", "clipped, high side", ".2%"),
    ("grad_norm", "gradient norm", ".3g"), ("lr", "learning rate", ".2e"),
    ("generate_tokens_per_s", "generation tokens/s", ".0f"), ("train_tokens_per_s", "training tokens/s", ".0f"),
    ("time_generate_s", "time: generation (s)", ".2f"), ("time_verify_s", "time: verification (s)", ".2f"),
    ("time_train_s", "time: update (s)", ".2f"), ("time_step_s", "time: whole step (s)", ".2f"),
]


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
        right = ax.twinx()
        right.spines[["top"]].set_visible(False)
        right.set_ylabel("KL", color=COLORS["kl"])
        right.plot(kx, kl, color=COLORS["kl"], alpha=0.25, linewidth=1)
        right.plot(kx, smooth(kl), color=COLORS["kl"], linewidth=2)
        ax.plot([], [], color=COLORS["kl"], linewidth=2, label="KL (right axis)")
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

    title = "Where each step's time went"
    fig, ax = _figure(title, "seconds")
    parts = [("generation", "time_generate_s", COLORS["mean"]), ("verification", "time_verify_s", COLORS["p90"]),
             ("update", "time_train_s", COLORS["correct"]), ("held-out check", "time_heldout_s", COLORS["heldout"])]
    steps = np.array([m["step"] for m in metrics])
    stacks = [(label, np.array([m.get(key) or 0.0 for m in metrics], dtype=float), color)
              for label, key, color in parts if any(m.get(key) for m in metrics)]
    if stacks:
        ax.stackplot(steps, *[s for _, s, _ in stacks], labels=[label for label, _, _ in stacks],
                     colors=[c for _, _, c in stacks], alpha=0.8)
    save(fig, ax, "time", title, "Stacked seconds per step; tokens per second are in the table below.")
    return made


def eval_reports(run_dir: Path) -> dict[str, dict]:
    return {name: read_json(run_dir / "eval" / f"{name}.json") for name in ("start", "final")}


def passk_rows(summary: dict, evals: dict[str, dict]) -> list[dict]:
    """One row per (family, pass@k): start and final values with their 95% intervals where known."""
    rows = []
    for family, values in summary.get("families", {}).items():
        for key in values.get("start", {}):
            row = {"family": family, "metric": key}
            for name in ("start", "final"):
                row[name] = values.get(name, {}).get(key, float("nan"))
                ci = evals.get(name, {}).get("by", {}).get("family", {}).get(family, {}).get(f"{key}_ci95")
                row[f"{name}_ci"] = ci
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


# ------------------------------------------------------------------------------------ the page

def _table(rows: list[list[str]], header: list[str], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "<span class='na'>n/a</span>"
    return format(value, spec)


def _delta(before: float, after: float, spec: str = "+.3f", good_up: bool = True) -> str:
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (before, after)):
        return ""
    change = after - before
    cls = "flat" if abs(change) < 1e-12 else ("up" if (change > 0) == good_up else "down")
    return f"<span class='{cls}'>{format(change, spec)}</span>"


def _ci(ci) -> str:
    return f" <span class='ci'>[{ci[0]:.2f}, {ci[1]:.2f}]</span>" if ci else ""


def _card(label: str, value: str, detail: str = "", cls: str = "") -> str:
    return f"<div class='card {cls}'><div class='label'>{label}</div><div class='value'>{value}</div>" \
           f"<div class='detail'>{detail}</div></div>"


def _cards(metrics: list[dict], rows: list[dict], alarms: list[dict], thresholds: AlarmConfig) -> str:
    cards = []
    for r in rows:
        if r["metric"] == "pass@1":
            cards.append(_card(f"held-out pass@1, {html.escape(r['family'])}",
                               f"{_fmt(r['start'], '.3f')} &rarr; {_fmt(r['final'], '.3f')}",
                               _delta(r["start"], r["final"])))
    if metrics:
        n = thresholds.alarm_baseline_steps
        head, tail = metrics[:n], metrics[-n:]
        mean = lambda rs, k: float(np.mean([r[k] for r in rs if isinstance(r.get(k), (int, float))] or [np.nan]))
        r0, r1 = mean(head, "reward_mean"), mean(tail, "reward_mean")
        cards.append(_card(f"training reward (first / last {n} steps)", f"{_fmt(r0, '.3f')} &rarr; {_fmt(r1, '.3f')}",
                           _delta(r0, r1)))
        l0, l1 = mean(head, "response_length_mean"), mean(tail, "response_length_mean")
        drift = l1 / l0 - 1 if l0 > 0 else float("nan")
        inside = abs(drift) <= thresholds.length_drift_band
        cards.append(_card("mean length (tokens)", f"{_fmt(l0, '.1f')} &rarr; {_fmt(l1, '.1f')}",
                           f"drift {_fmt(drift, '+.0%')} (band \u00b1{thresholds.length_drift_band:.0%})",
                           "" if inside else "bad"))
        trunc = mean(tail, "truncation_rate")
        cards.append(_card(f"truncated (last {n} steps)", _fmt(trunc, ".1%"),
                           f"alarm above {thresholds.truncation_max:.0%}",
                           "bad" if trunc > thresholds.truncation_max else ""))
    names = sorted({a["alarm"] for a in alarms})
    cards.append(_card("alarms", str(len(alarms)), html.escape(", ".join(names)) or "none fired",
                       "bad" if alarms else "good"))
    return "<div class='cards'>" + "".join(cards) + "</div>"


def _alarm_section(alarms: list[dict], thresholds: AlarmConfig, measured: bool) -> str:
    limits = (f"length outside \u00b1{thresholds.length_drift_band:.0%} of the first "
              f"{thresholds.alarm_baseline_steps} steps; truncation above {thresholds.truncation_max:.0%}; entropy "
              f"below {thresholds.entropy_floor:g} or {thresholds.entropy_min_fraction:.0%} of its start; KL above "
              f"{thresholds.kl_spike_factor:g}x its median and {thresholds.kl_spike_floor:g}; held-out accuracy "
              f"{thresholds.heldout_drop:g} below its best while the reward rose {thresholds.reward_rise:g}")
    if not measured:
        return "<h2 id='alarms'>Alarms</h2><p class='na'>No training metrics in this directory.</p>"
    if not alarms:
        body = "<p class='ok'>No alarm fired.</p>"
    else:
        rows = [[str(a["step"]), f"<b>{html.escape(a['alarm'])}</b>", html.escape(a["message"])] for a in alarms]
        body = _table(rows, ["step", "alarm", "what happened"], "alarms")
    return f"<h2 id='alarms'>Alarms ({len(alarms)})</h2>{body}<p class='note'>Checked every step: {limits}. " \
           f"Each alarm is also a WARNING line in the log and a line of <a href='alarms.jsonl'>alarms.jsonl</a>.</p>"


def _metrics_table(metrics: list[dict]) -> str:
    rows = []
    for key, label, spec in METRIC_ROWS:
        values = [m[key] for m in metrics if isinstance(m.get(key), (int, float))]
        if not values:
            continue
        first = next(m[key] for m in metrics if isinstance(m.get(key), (int, float)))
        rows.append([f"{label} <code>{key}</code>", _fmt(first, spec), _fmt(values[-1], spec),
                     _fmt(min(values), spec), _fmt(max(values), spec), _fmt(float(np.mean(values)), spec)])
    return _table(rows, ["metric (field in metrics.jsonl)", "first", "last", "min", "max", "mean"], "metrics")


def _figure_html(src: str, title: str, note: str) -> str:
    return f"<figure><img src='{src}' alt='{html.escape(title)}'><figcaption><b>{html.escape(title)}.</b> " \
           f"{html.escape(note)}</figcaption></figure>"


def _figures(plots: list[tuple[str, str, str]]) -> str:
    return "<div class='plots'>" + "".join(_figure_html(*plot) for plot in plots) + "</div>"


def _sections(values: dict, name: str) -> list[tuple[str, dict]]:
    """A nested config as (dotted section name, its plain settings) pairs, the section before its parts."""
    plain = {k: v for k, v in values.items() if not isinstance(v, dict)}
    out = [(name, plain)] if plain else []
    for key, value in values.items():
        if isinstance(value, dict):
            out += _sections(value, f"{name}.{key}" if name != "run" else key)
    return out


def _config_value(value) -> str:
    if value == "":
        return "<span class='na'>(unset)</span>"
    return html.escape(value if isinstance(value, str) else json.dumps(value))


def _config_section(path: Path) -> str:
    """The config as one small key/value table per section, then the file verbatim (folded)."""
    config = json.loads(path.read_text())
    tables = "".join(
        f"<div class='cfg'><h3>{html.escape(name)}</h3>"
        + _table([[html.escape(k), _config_value(v)] for k, v in values.items()], ["setting", "value"], "cfg")
        + "</div>" for name, values in _sections(config, "run"))
    return (f"<div class='cfgs'>{tables}</div><details><summary>{html.escape(path.name)}, verbatim</summary>"
            f"<pre>{html.escape(path.read_text())}</pre></details>")


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1180px;margin:1.5em auto;
  padding:0 1.2em;color:#1d232a;line-height:1.45}
h1{font-size:1.7em;margin:.2em 0}
h2{font-size:1.25em;margin-top:1.8em;border-bottom:2px solid #e3e7eb;padding-bottom:.25em}
.meta{color:#555;font-size:.92em}code{font-size:.85em;color:#555}nav a{margin-right:1em;font-size:.92em}
.cards{display:flex;flex-wrap:wrap;gap:.8em;margin:1em 0}
.card{border:1px solid #dde3e8;border-radius:8px;padding:.6em .9em;flex:1 1 0;min-width:130px;background:#fafbfc}
.card .label{font-size:.8em;color:#555}.card .value{font-size:1.25em;font-weight:600;white-space:nowrap}
.card .detail{font-size:.85em}
.card.bad{border-color:#e0a0a0;background:#fff5f4}.card.good{border-color:#a8d5b0;background:#f4fbf5}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
td,th{border:1px solid #dde3e8;padding:.3em .7em;text-align:right}td{white-space:nowrap}
th{background:#f1f4f6}td:first-child,th:first-child{text-align:left}
table.alarms td,table.alarms th{text-align:left}table.alarms td:last-child{white-space:normal;max-width:760px}
.plots{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:1.4em 1.6em}
figure{margin:0}figure img{width:100%;border:1px solid #eef0f2;border-radius:4px}
figcaption{font-size:.85em;color:#444;margin-top:.3em}
.up{color:#11812b;font-weight:600}.down{color:#c0282d;font-weight:600}.flat{color:#777}.ci{color:#777;font-size:.85em}
.na{color:#999}.ok{color:#11812b;font-weight:600}.note{font-size:.85em;color:#555}
.split{display:grid;grid-template-columns:auto minmax(0,1fr);gap:1.6em;align-items:start}
.cfgs{column-count:3;column-gap:1.4em}.cfg{break-inside:avoid;padding-bottom:.4em}
.cfg h3{font-size:1em;margin:.5em 0 .2em}table.cfg{font-size:.8em;width:100%}
table.cfg td{white-space:normal;word-break:break-all}table.cfg td:first-child{word-break:normal;width:45%}
table.cfg td:last-child,table.cfg th:last-child{text-align:left}
summary{cursor:pointer;color:#555;font-size:.9em;margin-top:.8em}
pre{background:#f6f8fa;padding:1em;overflow:auto;font-size:.8em;max-height:32em;border-radius:6px}
"""


def write_report(run_dir: Path) -> Path:
    """Draw the plots and write RUN_DIR/report.html; return the page's path."""
    run_dir = Path(run_dir)
    metrics = load_metrics(run_dir)
    alarms = read_jsonl(run_dir / "alarms.jsonl", missing_ok=True)
    summary = read_json(run_dir / "summary.json")
    config = train_config(run_dir)
    thresholds = alarm_thresholds(config)
    rows = passk_rows(summary, eval_reports(run_dir))
    passk = plot_passk(run_dir, rows)
    plots = plot_metrics(run_dir, metrics, config, alarms) if metrics else []

    title = f"reasoner run: {run_dir.resolve().name}"
    facts = [f"algorithm <b>{html.escape(str(summary.get('algo') or config.get('algo', '?')))}</b>",
             f"{len(metrics)} training steps"]
    if summary:
        facts += [f"world size {summary.get('world_size')}", f"{summary.get('seconds', 0) / 60:.1f} min in all",
                  f"final model <code>{html.escape(str(summary.get('final_model')))}</code>"]
    facts.append(f"report written {time.strftime('%Y-%m-%d %H:%M')}")
    parts = [f"<h1>{html.escape(title)}</h1><p class='meta'>{' &middot; '.join(facts)}</p>",
             "<nav><a href='#alarms'>alarms</a><a href='#heldout'>held-out results</a><a href='#training'>training "
             "plots</a><a href='#metrics'>metrics table</a><a href='#config'>configuration</a></nav>",
             _cards(metrics, rows, alarms, thresholds),
             _alarm_section(alarms, thresholds, bool(metrics))]
    if rows:
        table = _table([[html.escape(r["family"]), r["metric"], _fmt(r["start"], ".3f") + _ci(r["start_ci"]),
                         _fmt(r["final"], ".3f") + _ci(r["final_ci"]), _delta(r["start"], r["final"])] for r in rows],
                       ["family", "metric", "start policy", "final policy", "change"])
        overall = summary.get("overall", {})
        if overall:
            table += "<p class='note'>All families: " + ", ".join(
                f"{k} {overall['start'][k]:.3f} &rarr; {overall.get('final', {}).get(k, float('nan')):.3f}"
                for k in overall.get("start", {})) + ". Intervals: bootstrap 95% over tasks.</p>"
        parts.append("<h2 id='heldout'>Held-out results</h2><div class='split'><div>" + table + "</div>"
                     + _figure_html(*passk) + "</div>")
    else:
        parts.append("<h2 id='heldout'>Held-out results</h2><p class='na'>No summary.json yet (it is written after "
                     "the final evaluation of <code>reasoner run</code>).</p>")
    if plots:
        parts.append(f"<h2 id='training'>Training ({len(metrics)} steps)</h2>" + _figures(plots))
        parts.append("<h2 id='metrics'>Per-step metrics</h2>" + _metrics_table(metrics)
                     + "<p class='note'>Every step's values are in <a href='metrics.jsonl'>metrics.jsonl</a>.</p>")
    for name, path in (("run", run_dir / "run_config.json"), ("training", run_dir / "config.json")):
        if path.is_file():
            parts.append(f"<h2 id='config'>Configuration ({name})</h2>" + _config_section(path))
            break
    page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>")
    out = run_dir / "report.html"
    out.write_text(page, encoding="utf-8")
    return out
