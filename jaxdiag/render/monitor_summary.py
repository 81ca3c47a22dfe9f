"""The summary of a monitored run (``monitoring.goodput.summarize``) for the terminal and as one HTML page.

Every string read from a stream (hosts, reasons, folders, messages) is shown as
text: control characters are replaced in the terminal, and HTML-escaped on the page.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from jaxdiag.render.html import PLOTLY_CONFIG

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(value: Any) -> str:
    """``value`` as text safe for a terminal: control characters (escape sequences) shown as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", "" if value is None else str(value))


def render_terminal(summary: dict[str, Any], *, width: int | None = None, color: bool = False) -> str:
    import io

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = io.StringIO()
    console = Console(file=out, width=width or 110, color_system="standard" if color else None, highlight=False)
    processes = summary["processes"]
    console.print(Text(f"jaxdiag monitor  {plain(summary['folder'])}"))
    for p in processes:
        state = "running (no stop line yet)" if p["running"] else "stopped"
        console.print(
            Text(
                f"process {plain(p['process'])} on {plain(p['host'])}: {p['steps']} steps in {p['span_s']:.1f} s "
                f"({state}); median step {p['median_step_ms']:.2f} ms, p90 {p['p90_step_ms']:.2f} ms; "
                f"goodput {p['goodput']:.1%}"
                + (f"; {p['unreadable_lines']} unreadable line(s) skipped" if p["unreadable_lines"] else "")
            )
        )
    table = Table(title="Where the time went (s, share)", title_justify="left")
    table.add_column("")
    for p in processes:
        table.add_column(Text(f"p{plain(p['process'])} {plain(p['host'])}"), justify="right")
    from jaxdiag.monitoring.goodput import CATEGORIES

    for name in CATEGORIES:
        cells = []
        for p in processes:
            total = sum(p["seconds"].values()) or 1.0
            cells.append(f"{p['seconds'][name]:.2f}  {p['seconds'][name] / total:6.1%}")
        table.add_row(name, *cells)
    console.print(table)
    for p in processes:
        head = f"p{plain(p['process'])}"
        for r in p["recompiles"]:
            console.print(
                Text(f"{head} recompile after warm-up at step {r['step']}: {plain(', '.join(r['functions']))}")
            )
        for w in p["windows"]:
            console.print(
                Text(
                    f"{head} capture window {w['window']} (steps {w['first_step']}-{w['last_step']}): "
                    f"{plain(w['reason'])}\n    {plain(w['run_dir'])}"
                )
            )
        if p["dropped"]:
            console.print(Text(f"{head} {len(p['dropped'])} older window(s) dropped (count or disk budget)"))
        for s in p["stragglers"]:
            console.print(Text(f"{head} straggler: {plain(s['message'])}"))
        for h in p["hangs"]:
            console.print(Text(f"{head} hang: {plain(h['message'])}"))
    return out.getvalue()


def render_html(summary: dict[str, Any]) -> str:
    """One self-contained page: the goodput table, step time over the run with the capture windows marked."""
    import plotly.graph_objects as go
    import plotly.offline

    from jaxdiag.monitoring.goodput import CATEGORIES

    fig = go.Figure()
    for p in summary["processes"]:
        series = p["series"]
        name = f"p{p['process']} {p['host']}"
        fig.add_trace(go.Scattergl(x=series["step"], y=series["wall_ms"], mode="lines", name=f"{name} step ms"))
        if any(v is not None for v in series["device_ms"]):
            fig.add_trace(
                go.Scattergl(x=series["step"], y=series["device_ms"], mode="markers", name=f"{name} device ms")
            )
        recompiles = [r["step"] for r in p["recompiles"]]
        if recompiles:
            by_step = dict(zip(series["step"], series["wall_ms"]))
            fig.add_trace(
                go.Scatter(
                    x=recompiles,
                    y=[by_step.get(s) for s in recompiles],
                    mode="markers",
                    marker={"symbol": "x", "size": 10},
                    name=f"{name} recompile after warm-up",
                )
            )
    for w in summary["processes"][0]["windows"] if summary["processes"] else ():
        if isinstance(w.get("first_step"), int) and isinstance(w.get("last_step"), int):
            fig.add_vrect(
                x0=w["first_step"] - 0.5,
                x1=w["last_step"] + 0.5,
                fillcolor="orange",
                opacity=0.25,
                line_width=0,
                annotation_text=f"window {w['window']}",
                annotation_position="top left",
            )
    fig.update_layout(
        title="Step time over the run (capture windows shaded)",
        xaxis_title="step",
        yaxis_title="ms",
        yaxis_type="log",
        height=420,
    )
    figure = fig.to_html(full_html=False, include_plotlyjs=False, div_id="jd-monitor-steps", config=PLOTLY_CONFIG)
    rows = []
    for name in CATEGORIES:
        cells = "".join(
            f"<td class='n'>{p['seconds'][name]:.2f} s ({p['seconds'][name] / (sum(p['seconds'].values()) or 1):.1%})</td>"
            for p in summary["processes"]
        )
        rows.append(f"<tr><td>{_e(name)}</td>{cells}</tr>")
    header = "".join(f"<th>p{_e(p['process'])} {_e(p['host'])}</th>" for p in summary["processes"])
    items = []
    for p in summary["processes"]:
        head = f"p{_e(p['process'])}"
        items += [
            f"<li>{head} window {_e(w['window'])} (steps {_e(w['first_step'])}-{_e(w['last_step'])}): "
            f"{_e(w['reason'])}<br><code>{_e(w['run_dir'])}</code></li>"
            for w in p["windows"]
        ]
        items += [
            f"<li>{head} recompile after warm-up at step {_e(r['step'])}: {_e(', '.join(r['functions']))}</li>"
            for r in p["recompiles"]
        ]
        items += [f"<li>{head} straggler: {_e(s['message'])}</li>" for s in p["stragglers"]]
        items += [f"<li>{head} hang: {_e(h['message'])}</li>" for h in p["hangs"]]
    lines = "".join(
        f"<p class='meta'>process {_e(p['process'])} on {_e(p['host'])}: {p['steps']} steps in {p['span_s']:.1f} s, "
        f"median step {p['median_step_ms']:.2f} ms, goodput {p['goodput']:.1%}</p>"
        for p in summary["processes"]
    )
    data = html.escape(json.dumps({k: v for k, v in summary.items() if k != "processes"}))
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>jaxdiag monitor</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1400px}"
        "table.jd{border-collapse:collapse;font-size:13px}table.jd th,table.jd td{border-bottom:1px solid #d0d7de;"
        "padding:4px 8px;text-align:left}td.n{text-align:right}.meta{color:#57606a;font-size:13px}</style>"
        f"<script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script></head><body>"
        f"<h1>jaxdiag monitor</h1><p class='meta' data-summary='{data}'>{_e(summary['folder'])}</p>{lines}"
        f"<h2>Where the time went</h2><table class='jd'><tr><th></th>{header}</tr>{''.join(rows)}</table>"
        f"<h2>Steps</h2>{figure}<h2>Events</h2><ul>{''.join(items) or '<li>none</li>'}</ul>"
        "</body></html>\n"
    )


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))
