"""The report's page: one self-contained HTML file, `report.html`, beside the run's files.

The page opens from disk with no server: the plots (`plots.py`) are PNG files in plots/ beside it
(relative links), tables are plain HTML.
"""

from __future__ import annotations

import html
import json
import math
import time
from pathlib import Path

import numpy as np

from data.records import read_jsonl
from reasoner.config import AlarmConfig
from reasoner.monitoring.plots import (alarm_thresholds, eval_reports, load_metrics, passk_rows, plot_metrics,
                                       plot_passk, read_json, train_config)

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
    ("rollout_logprob_kl", "KL(sampler || trainer) per token", ".2e"),
    ("rollout_ratio_max", "largest token ratio trainer/sampler", ".3f"),
    ("generate_tokens_per_s", "generation tokens/s", ".0f"), ("train_tokens_per_s", "training tokens/s", ".0f"),
    ("time_generate_s", "time: generation (s)", ".2f"), ("time_verify_s", "time: verification (s)", ".2f"),
    ("time_train_s", "time: update (s)", ".2f"), ("time_step_s", "time: whole step (s)", ".2f"),
    ("tool_use_rate", "answers that called the tool", ".1%"), ("tool_calls_per_sample", "tool calls per answer", ".2f"),
    ("tool_error_rate", "tool calls that failed", ".1%"), ("tool_timeout_rate", "tool calls that timed out", ".1%"),
    ("accuracy_with_tool", "right, with a tool call", ".3f"), ("accuracy_without_tool", "right, without one", ".3f"),
    ("time_tool_s", "time: tool calls in the sandbox (s)", ".2f"),
]


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


def _ci(ci, spec: str = ".2f") -> str:
    return f" <span class='ci'>[{format(ci[0], spec)}, {format(ci[1], spec)}]</span>" if ci else ""


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
                         _fmt(r["final"], ".3f") + _ci(r["final_ci"]),
                         _delta(r["start"], r["final"]) + _ci(r["change_ci"], "+.2f")] for r in rows],
                       ["family", "metric", "start policy", "final policy", "change"])
        overall = summary.get("overall", {})
        if overall:
            table += "<p class='note'>All families: " + ", ".join(
                f"{k} {overall['start'][k]:.3f} &rarr; {overall.get('final', {}).get(k, float('nan')):.3f}"
                for k in overall.get("start", {})) + (
                ". Intervals: bootstrap 95% over tasks; the change's resamples tasks in pairs (the same task before "
                "and after). They cover the evaluation's draw of tasks and samples, not the training seed.</p>")
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
