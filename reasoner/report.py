"""The run report: PNG plots of the training metrics and one self-contained HTML page.

The page opens from disk with no server: plots are PNG files beside it, tables are plain HTML.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def load_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def series(metrics: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    points = [(m["step"], m[key]) for m in metrics if m.get(key) is not None]
    if not points:
        return np.array([]), np.array([])
    steps, values = zip(*points)
    return np.array(steps), np.array(values, dtype=float)


def smooth(values: np.ndarray, window: int = 5) -> np.ndarray:
    if len(values) < window:
        return values
    kernel = np.ones(window) / window
    padded = np.concatenate([np.full(window - 1, values[0]), values])
    return np.convolve(padded, kernel, mode="valid")


def _plot(path: Path, title: str, lines: list[tuple[str, np.ndarray, np.ndarray]], ylabel: str,
          band: tuple[np.ndarray, float, float] | None = None) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    for label, x, y in lines:
        if len(x):
            (line,) = ax.plot(x, y, alpha=0.25, linewidth=1)
            ax.plot(x, smooth(y), color=line.get_color(), linewidth=2, label=label)
    if band is not None:
        x, low, high = band
        ax.fill_between(x, low, high, color="grey", alpha=0.12, label="drift band")
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if any(len(x) for _, x, _ in lines):
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_metrics(run_dir: Path, metrics: list[dict], drift_band: float = 0.5) -> list[tuple[str, str]]:
    """Write the PNG plots into RUN_DIR/plots; return (file name, caption) pairs."""
    plots = run_dir / "plots"
    plots.mkdir(exist_ok=True)
    made = []

    def add(name: str, caption: str, *args, **kwargs):
        _plot(plots / name, caption, *args, **kwargs)
        made.append((f"plots/{name}", caption))

    add("reward.png", "Reward and training pass rate",
        [("reward mean", *series(metrics, "reward_mean")), ("accuracy", *series(metrics, "accuracy"))], "reward")
    steps, mean_len = series(metrics, "response_length_mean")
    band = None
    if len(mean_len):
        base = float(np.mean(mean_len[:5]))
        band = (steps, base * (1 - drift_band), base * (1 + drift_band))
    add("length.png", "Response length (tokens)",
        [("mean", steps, mean_len), ("p90", *series(metrics, "response_length_p90")),
         ("right answers", *series(metrics, "response_length_correct")),
         ("wrong answers", *series(metrics, "response_length_wrong"))], "tokens", band=band)
    add("truncation.png", "Truncation rate (stopped at the length cap)",
        [("truncation rate", *series(metrics, "truncation_rate"))], "fraction")
    add("kl_entropy.png", "KL to the reference and policy entropy",
        [("kl", *series(metrics, "kl")), ("entropy", *series(metrics, "entropy"))], "nats / token")
    add("equal_groups.png", "Groups with all-equal rewards (no gradient)",
        [("equal-reward groups", *series(metrics, "equal_reward_groups"))], "fraction")
    return made


def plot_passk(run_dir: Path, summary: dict) -> tuple[str, str] | None:
    families = summary.get("families", {})
    if not families:
        return None
    labels, start, final = [], [], []
    for family, values in families.items():
        for key in values["start"]:
            labels.append(f"{family}\n{key}")
            start.append(values["start"][key])
            final.append(values["final"].get(key, float("nan")))
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(6.4, 0.9 * len(labels)), 3.6), dpi=110)
    ax.bar(x - 0.2, start, 0.4, label="start policy")
    ax.bar(x + 0.2, final, 0.4, label="final policy")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_title("Held-out pass@k: start vs final")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(run_dir / "plots" / "passk.png")
    plt.close(fig)
    return "plots/passk.png", "Held-out pass@k, start vs final policy"


def _table(rows: list[list[str]], header: list[str]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = """body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222}h1{font-size:1.6em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.3em .7em;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.plots{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0}figcaption{font-size:.85em;color:#555}img{max-width:520px;border:1px solid #eee}
.alarm{background:#fff3f0;border-left:4px solid #d33;padding:.4em .8em;margin:.3em 0}.up{color:#080}.down{color:#b00}
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.8em;max-height:30em}"""


def write_report(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    metrics = load_metrics(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    plots = plot_metrics(run_dir, metrics) if metrics else []
    passk = plot_passk(run_dir, summary) if summary else None
    if passk:
        plots.insert(0, passk)
    parts = [f"<h1>reasoner run: {html.escape(run_dir.name)}</h1>"]
    if summary:
        parts.append(f"<p>algorithm <b>{html.escape(str(summary.get('algo')))}</b>, world size "
                     f"{summary.get('world_size')}, {summary.get('seconds')} s, final model "
                     f"<code>{html.escape(str(summary.get('final_model')))}</code></p>")
        rows = []
        for family, values in summary.get("families", {}).items():
            for key, before in values["start"].items():
                after = values["final"].get(key, float("nan"))
                delta = after - before
                rows.append([family, key, f"{before:.3f}", f"{after:.3f}", f"{delta:+.3f}"])
        parts.append("<h2>Held-out results</h2>" + _table(rows, ["family", "metric", "start", "final", "change"]))
    alarms_path = run_dir / "alarms.jsonl"
    if alarms_path.is_file():
        alarms = [json.loads(line) for line in alarms_path.read_text().splitlines() if line.strip()]
        parts.append(f"<h2>Alarms ({len(alarms)})</h2>" + ("".join(
            f"<div class='alarm'>step {a['step']}: <b>{html.escape(a['alarm'])}</b> {html.escape(a['message'])}</div>"
            for a in alarms) or "<p>none fired</p>"))
    if metrics:
        last = metrics[-1]
        keys = ["reward_mean", "accuracy", "response_length_mean", "response_length_p90", "truncation_rate", "kl",
                "entropy", "equal_reward_groups", "time_step_s"]
        first = metrics[0]
        rows = [[k, f"{first.get(k) or 0:.4g}", f"{last.get(k) or 0:.4g}"] for k in keys if k in last]
        parts.append(f"<h2>Training ({len(metrics)} steps)</h2>" + _table(rows, ["metric", "first step", "last step"]))
    if plots:
        parts.append("<h2>Plots</h2><div class='plots'>" + "".join(
            f"<figure><img src='{src}' alt='{html.escape(cap)}'><figcaption>{html.escape(cap)}</figcaption></figure>"
            for src, cap in plots) + "</div>")
    config_path = run_dir / "run_config.json"
    if config_path.is_file():
        parts.append("<h2>Configuration</h2><pre>" + html.escape(config_path.read_text()) + "</pre>")
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>reasoner report</title><style>{STYLE}</style>" \
           f"</head><body>{''.join(parts)}</body></html>"
    out = run_dir / "report.html"
    out.write_text(page, encoding="utf-8")
    return out
