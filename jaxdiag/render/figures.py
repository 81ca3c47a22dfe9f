"""Plotly figures of a ``Report``, shared by the HTML report and the notebook dashboard.

Each builder is ``fn(report, ...) -> plotly.graph_objects.Figure`` and only formats
what the report holds: its sections for per-step numbers, the ``timeline`` section
for the events of the steps drawn, ``op_durations`` for the histogram; so a saved
report draws what the trace drew. (Only a timeline of a step the report did not
keep reads the trace, when the report was built in this process.) A section with
nothing in it gives a figure that says "no data" and why, never an error.
plotly is imported inside the builders, so importing this module costs nothing.
(Eleven builders and their shared helpers make it run past 400 lines, to about 600: each builder is
short, and they share the report's reading and the "no data" figure; the timeline's event selection
and merging live in ``render.timeline``.)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from jaxdiag.render.chart_text import shown_as_text
from jaxdiag.render.chart_text import text as chart_text

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from jaxdiag.analyses.host_wait_section import CauseWait, StepCause

    from jaxdiag.reporting.model import Report

#: Fixed colours, so a component has the same colour in every figure.
COLORS = {
    "device compute": "#4C78A8",
    "exposed collectives": "#F58518",
    "overlapped": "#54A24B",
    "compile": "#E45756",
    "compile wait": "#E45756",
    "in-execution gaps": "#D8B5A5",
    "idle": "#BAB0AC",
    "steady": "#4C78A8",
}
_CAUSE_COLORS = ("#B279A2", "#EECA3B", "#9D755D", "#FF9DA6", "#72B7B2", "#79706E", "#D67195")
_TEMPLATE = "plotly_white"


def all_figures(
    report: "Report", *, step: int | None = None, host: str | None = None, devices: Sequence[str] | None = None
) -> dict[str, "go.Figure"]:
    """Every figure of every section (``render.registry``), in the order the HTML report shows them."""
    from jaxdiag.render.registry import figure_names

    figures = {}
    for name in figure_names():
        builder = globals()[name]
        figures[name] = (
            builder(report, step, host=host, devices=devices) if name == "step_timeline" else builder(report)
        )
    return figures


def sharding_collectives(report: "Report") -> "go.Figure":
    from jaxdiag.render.sharding_figure import sharding_collectives

    return sharding_collectives(report)


def sharding_layouts(report: "Report") -> "go.Figure":
    from jaxdiag.render.sharding_layout import sharding_layouts

    return sharding_layouts(report)


def roofline(report: "Report") -> "go.Figure":
    """Top ops on the device's roofline (see ``render.ops_memory``)."""
    from jaxdiag.render.ops_memory import roofline as draw

    return draw(report)


def default_step(report: "Report") -> int | None:
    """A typical step to draw: the median-wall step among those that did not compile."""
    from jaxdiag.reporting.timeline_events import default_step as typical

    return typical(report.steps)


def step_breakdown(report: "Report", *, max_bars: int = 500) -> "go.Figure":
    """Stacked bars per step: device compute, exposed collectives, host wait by cause, compile wait,
    in-execution gaps, idle; disjoint parts that add up to the step's wall time.

    Host waits (``host_wait_ms``) are split by the causes of ``host_waits.by_step``; their
    compile part is drawn as ``compile wait`` (``compile_wait_ms``: the device waiting for a
    compile), never the host's ``compile_ms``, which may overlap device work. In-execution
    gaps are device idle with an execution in flight, not host waits. Idle is the rest of
    the step's wall time. A report without ``compile_wait_ms`` (before 1.4, whose
    ``host_wait_ms`` left compiles out) draws its ``compile_ms`` as the compile wait. A
    button switches between milliseconds and shares of each step. More than ``max_bars``
    steps are averaged in groups of consecutive steps, and the chart says so.
    """
    go = _go()
    title = "Where each step's time went"
    steps = report.steps
    if not steps:
        return no_data(title, f"no steps were found in this capture; {_MARK_STEPS}")
    by_step = {
        e.step: {c.cause: _ms(c.ms) for c in e.by_cause if c.cause != "compile"} for e in report.host_waits.by_step
    }
    causes = [c.cause for c in report.host_waits.by_cause if c.cause != "compile"]
    for step_waits in by_step.values():
        causes += [c for c in step_waits if c not in causes]
    unknown = "host wait (cause unknown)"
    rows: dict[str, list[float]] = {"device compute": [], "exposed collectives": []}
    rows.update({f"host wait: {c}": [] for c in causes})
    rows.update({unknown: [], "compile wait": [], "in-execution gaps": [], "idle": []})
    walls: list[float] = []
    for s in steps:
        wall, busy, exposed = _ms(s.wall_ms), _ms(s.device_busy_ms), _ms(s.exposed_collective_ms)
        waits = by_step.get(s.step)
        rows["device compute"].append(max(busy - exposed, 0.0))
        rows["exposed collectives"].append(exposed)
        for c in causes:
            rows[f"host wait: {c}"].append((waits or {}).get(c, 0.0))
        compile_wait = _ms(s.compile_cost_ms)
        if s.compile_wait_ms is not None:  # 1.4: host_wait_ms holds the compile wait
            rows[unknown].append(max(_ms(s.host_wait_ms) - compile_wait, 0.0) if waits is None else 0.0)
        else:  # older reports: host_wait_ms left compiles out, compile_ms was their part
            rows[unknown].append(_ms(s.host_wait_ms) if waits is None else 0.0)
        rows["compile wait"].append(compile_wait)
        rows["in-execution gaps"].append(_ms(s.in_execution_gap_ms))
        used = sum(r[-1] for name, r in rows.items() if name != "idle")
        rows["idle"].append(max(wall - used, 0.0))
        walls.append(wall)
    x = [s.step for s in steps]
    note = ""
    if len(steps) > max_bars:
        k = math.ceil(len(steps) / max_bars)
        x, walls = x[::k], _mean_groups(walls, k)
        rows = {name: _mean_groups(v, k) for name, v in rows.items()}
        note = f"{len(steps):,} steps: each bar is the mean of {k} consecutive steps"
    rows = {name: v for name, v in rows.items() if any(v)}
    fig = go.Figure()
    cause_colors = iter(_CAUSE_COLORS * 4)
    pct: dict[str, list[float]] = {}
    for name, values in rows.items():
        color = COLORS.get(name) or next(cause_colors)
        pct[name] = [100.0 * v / w if w > 0 else 0.0 for v, w in zip(values, walls)]
        fig.add_trace(
            go.Bar(
                x=x,
                y=values,
                name=name,
                marker_color=color,
                customdata=walls,
                # Built with our <br>: the name is escaped here, not in _finish.
                hovertemplate=f"step %{{x}}<br>{chart_text(name)}: %{{y:.3f}}<br>step wall: %{{customdata:.3f}} ms"
                "<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        bargap=0.15,
        xaxis_title="step",
        yaxis_title="ms",
        updatemenus=[
            dict(
                type="buttons",
                direction="right",
                x=1.0,
                xanchor="right",
                y=1.12,
                yanchor="bottom",
                showactive=True,
                buttons=[
                    dict(label="ms", method="update", args=[{"y": list(rows.values())}, {"yaxis.title.text": "ms"}]),
                    dict(
                        label="% of step",
                        method="update",
                        args=[{"y": list(pct.values())}, {"yaxis.title.text": "% of step wall time"}],
                    ),
                ],
            )
        ],
    )
    return _finish(fig, title, note)


def host_wait_waterfall(report: "Report", step: int | None = None, *, include_compile: bool = False) -> "go.Figure":
    """Device-idle time by what the host was doing, cause by cause, to the total.

    Compile is left out by default (its chart is the compile timeline; kept, it
    dwarfs every other cause); the chart says how much was left out.
    """
    go = _go()
    hw = report.host_waits
    title = "Host waits by cause" + (f", step {step}" if step is not None else "")
    causes: Sequence[CauseWait | StepCause] = (
        hw.by_cause if step is None else next((e.by_cause for e in hw.by_step if e.step == step), ())
    )
    compile_ms = sum(_ms(c.ms) for c in causes if c.cause == "compile")
    shown = [c for c in causes if (include_compile or c.cause != "compile") and _ms(c.ms) > 0]
    if not shown:
        why = "the devices never waited on the host" if not causes else "the only wait was compiling"
        return no_data(title, why)
    names = [c.cause for c in shown]
    values = [_ms(c.ms) for c in shown]
    fig = go.Figure(
        go.Waterfall(
            x=[*names, "total"],
            y=[*values, sum(values)],
            measure=["relative"] * len(values) + ["total"],
            text=[_fmt_ms(v) for v in [*values, sum(values)]],
            textposition="outside",
            connector={"line": {"color": "#BAB0AC"}},
            increasing={"marker": {"color": _CAUSE_COLORS[0]}},
            totals={"marker": {"color": "#4C78A8"}},
            hovertemplate="%{x}: %{y:.3f} ms<extra></extra>",
        )
    )
    fig.update_layout(yaxis_title="device idle, ms", showlegend=False)
    note = (
        f"compile ({_fmt_ms(compile_ms)}) left out: see the compile timeline"
        if compile_ms and not include_compile
        else ""
    )
    return _finish(fig, title, note)


def small_op_histogram(report: "Report", *, top: int = 10) -> "go.Figure":
    """Device compute-op durations on a log scale, the small-op threshold marked, and the top offenders.

    The bins come from the ``op_durations`` section, the offenders from ``small_ops``.
    """
    import numpy as np
    from plotly.subplots import make_subplots

    go = _go()
    so = report.small_ops
    od = report.section("op_durations") or {}
    threshold = so.threshold_us if so.threshold_us is not None else od.get("threshold_us")
    title = f"Device op durations (small: under {float(threshold):g} µs)" if threshold else "Device op durations"
    edges = np.asarray(od.get("edges_us") or [], dtype=np.float64)
    counts = np.asarray(od.get("counts") or [], dtype=np.int64)
    offenders = [o for o in so.top if _ms(o.total_ms) > 0][:top]
    if not len(counts) and not offenders:
        return no_data(title, "no device compute ops in this report" + _older(report, "op_durations"))
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.55, 0.45],
        horizontal_spacing=0.2,
        subplot_titles=("ops by duration (log scale)", f"top {len(offenders)} small-op offenders"),
    )
    notes = []
    if len(counts):
        # Bin edges fall on the threshold, so the red bars hold exactly the ops counted as small.
        mids = np.sqrt(edges[:-1] * edges[1:])
        small = mids < (threshold or 0)
        fig.add_trace(
            go.Bar(
                x=mids,
                y=counts,
                width=np.diff(edges),
                marker_color=np.where(small, "#E45756", "#4C78A8"),
                customdata=np.stack([edges[:-1], edges[1:]], axis=1),
                name="ops",
                showlegend=False,
                hovertemplate="%{customdata[0]:.3g}-%{customdata[1]:.3g} µs: %{y} ops<extra></extra>",
            ),
            row=1,
            col=1,
        )
        if threshold:
            fig.add_vline(x=float(threshold), line_dash="dash", line_color="#E45756", row=1, col=1)
        fig.update_xaxes(type="log", title_text="duration, µs", row=1, col=1)
        fig.update_yaxes(title_text="ops", row=1, col=1)
    else:
        notes.append(
            "durations are not in this report"
            + (_older(report, "op_durations") or ": no device compute op in its steps")
        )
    if offenders:
        labels = [_short(o.name, 38) for o in offenders][::-1]
        fig.add_trace(
            go.Bar(
                x=[_ms(o.total_ms) for o in offenders][::-1],
                y=labels,
                orientation="h",
                marker_color="#E45756",
                showlegend=False,
                customdata=[[o.name, o.module, o.count] for o in offenders][::-1],
                hovertemplate="%{customdata[0]}<br>module %{customdata[1]}<br>%{customdata[2]} ops, "
                "%{x:.3f} ms<extra></extra>",
            ),
            row=1,
            col=2,
        )
        fig.update_xaxes(title_text="total ms", row=1, col=2)
    else:
        notes.append("no op is under the threshold")
    fig.update_layout(height=380)
    return _finish(fig, title, "; ".join(notes))


def collective_overlap(report: "Report") -> "go.Figure":
    """Per collective kind: time overlapped by compute, and time exposed."""
    go = _go()
    co = report.collectives
    kinds = [k for k in co.by_kind if _ms(k.total_ms) > 0]
    frac = co.overlap_fraction
    title = "Collectives: overlap with compute" + (f" ({100 * frac:.0f}% overall)" if frac is not None else "")
    if not kinds:
        return no_data(title, "no collectives in this capture (a program sharded over several devices has them)")
    names = [k.kind for k in kinds][::-1]
    exposed = [_ms(k.exposed_ms) for k in kinds][::-1]
    overlapped = [max(_ms(k.total_ms) - e, 0.0) for k, e in zip(kinds[::-1], exposed)]
    text = [f"{100 * k.overlap_fraction:.0f}% overlapped" if k.overlap_fraction is not None else "" for k in kinds][
        ::-1
    ]
    fig = go.Figure(
        [
            go.Bar(
                y=names,
                x=overlapped,
                orientation="h",
                name="overlapped by compute",
                marker_color=COLORS["overlapped"],
                hovertemplate="%{y}: %{x:.3f} ms overlapped<extra></extra>",
            ),
            go.Bar(
                y=names,
                x=exposed,
                orientation="h",
                name="exposed",
                marker_color=COLORS["exposed collectives"],
                text=text,
                textposition="outside",
                hovertemplate="%{y}: %{x:.3f} ms exposed<extra></extra>",
            ),
        ]
    )
    fig.update_layout(barmode="stack", xaxis_title="ms (mean per device)", height=max(260, 90 + 40 * len(names)))
    return _finish(fig, title, "")


def recompile_timeline(report: "Report", *, max_rows: int = 40) -> "go.Figure":
    """Each compile in time order, top to bottom: the step it stalled, the function, its cost and its cause.

    Beyond ``max_rows`` compiles only the costliest are kept (still in time order); the chart says so.
    """
    from jaxdiag.render import timeline

    go = _go()
    title = "Compiles on the timeline, with causes"
    compiles = list(report.recompiles)
    if not compiles:
        return no_data(title, "nothing compiled during the capture (a compile inside the profiled steps shows here)")
    note = ""
    if len(compiles) > max_rows:
        kept = sorted(range(len(compiles)), key=lambda i: -_ms(compiles[i].compile_ms))[:max_rows]
        note = f"the {max_rows} costliest of {len(compiles)} compiles"
        compiles = [compiles[i] for i in sorted(kept)]
    labels = timeline.unique_labels(
        [f"{'outside steps' if c.step is None else 'step ' + str(c.step)} · {c.function}" for c in compiles]
    )
    ms = [_ms(c.compile_ms) for c in compiles]
    has_log = any(c.logged for c in report.recompiles)
    unknown = "cause unknown (not in the compile log)" if has_log else "cause unknown (no compile log)"
    causes = [c.cause or unknown for c in compiles]
    fig = go.Figure(
        go.Bar(
            x=ms,
            y=labels,
            orientation="h",
            marker_color=[COLORS["compile"] if c.cause else "#BAB0AC" for c in compiles],
            text=[f"{_fmt_ms(m)} · {_short(c, 70)}" for m, c in zip(ms, causes)],
            textposition="outside",
            cliponaxis=False,
            customdata=causes,
            showlegend=False,
            hovertemplate="%{y}<br>%{x:.1f} ms<br>%{customdata}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title_text="compile ms", range=[0, max(ms) * 2.2 if max(ms) > 0 else 1])
    fig.update_layout(height=max(220, 110 + 30 * len(compiles)))
    return _finish(fig, title, note)


def throughput(report: "Report", *, max_points: int = 2000) -> "go.Figure":
    """Tokens/s per step (steps/s when tokens are unknown), steps that compiled marked, steady state as a line.

    Beyond ``max_points`` steps the steady steps are one line without markers (the
    browser draws a marker per point); the chart says so.
    """
    go = _go()
    tp = report.throughput
    has_tokens = any(r.tokens_per_s is not None for r in tp.per_step)
    key, unit = ("tokens_per_s", f"{tp.unit}/s") if has_tokens else ("steps_per_s", "steps/s")
    rows = [r for r in tp.per_step if getattr(r, key) is not None]
    title = f"Throughput over steps ({unit})"
    if not rows:
        return no_data(title, f"no per-step throughput: no steps were found; {_MARK_STEPS}")
    many = len(rows) > max_points
    fig = go.Figure(
        go.Scatter(
            x=[r.step for r in rows],
            y=[getattr(r, key) for r in rows],
            mode="lines",
            name="every step",
            line={"color": COLORS["steady"] if many else "#BAB0AC", "width": 1},
            showlegend=many,
            hoverinfo="x+y" if many else "skip",
        )
    )
    for label, compiled, style in (
        ("steady state", False, {"color": COLORS["steady"], "size": 8}),
        ("compiled in this step", True, {"color": COLORS["compile"], "size": 11, "symbol": "x"}),
    ):
        part = [r for r in rows if r.compiled == compiled]
        if part and not (many and not compiled):
            fig.add_trace(
                go.Scatter(
                    x=[r.step for r in part],
                    y=[getattr(r, key) for r in part],
                    mode="markers",
                    name=label,
                    marker=style,
                    customdata=[_ms(r.period_ms or r.wall_ms) for r in part],
                    hovertemplate=f"step %{{x}}: %{{y:,.1f}} {unit}<br>period %{{customdata:.3f}} ms<extra></extra>",
                )
            )
    steady = getattr(tp, f"steady_{key}")
    if steady is not None:
        fig.add_hline(
            y=float(steady),
            line_dash="dash",
            line_color=COLORS["steady"],
            annotation_text=f"steady state {steady:,.1f} {unit}",
            annotation_position="top left",
        )
    fig.update_layout(xaxis_title="step", yaxis_title=unit)
    return _finish(fig, title, f"{len(rows):,} steps: steady steps drawn as a line, no markers" if many else "")


def step_timeline(
    report: "Report",
    step: int | None = None,
    *,
    host: str | None = None,
    devices: Sequence[str] | None = None,
    max_rects: int | None = None,
) -> "go.Figure":
    """One step's events: host annotations (nested ones on rows below) above the device streams.

    Args:
      step: the step to draw (default ``default_step``); without steps, the whole capture.
      host: the host to draw (default: the one whose step took longest).
      devices: device planes to keep (``"/device:GPU:0"``; default: all).
      max_rects: above this many events, the events of a row closer together than the
        finest resolution that fits merge into one rectangle; the chart says so. (Default:
        ``timeline_events.MAX_RECTS``, the limit the report keeps its steps merged to;
        another limit needs the trace.)

    The steps the report keeps (``timeline_events.chosen_steps``) are drawn from the
    report; another step only from the trace, when the report was built in this
    process. A device filter keeps the rows of those devices as merged for all.
    """
    from jaxdiag.render import timeline
    from jaxdiag.reporting import timeline_events

    if step is None:
        step = default_step(report)
    title = "Step timeline" if step is None else f"Step {step} timeline"
    kept = report.section("timeline")
    limit = max_rects if max_rects is not None else timeline_events.MAX_RECTS
    found = timeline_events.find(kept, step, host)
    if report.frames is not None and (found is None or kept.get("max_rects") != limit):
        found = timeline_events.from_frames(report.frames, step, host, limit)
    if found is None:
        return no_data(title, _not_kept(report, step))
    if isinstance(found, str):
        return no_data(title, found)
    title = (f"{title} on {found.host}" if step is not None else f"Whole capture on {found.host}") + (
        ": host annotations above device streams"
    )
    rects = found.rects if devices is None else found.rects.keep_devices(list(devices))
    if not len(rects):
        return no_data(title, "no annotations or device events in this window")
    note = ""
    if found.resolution_ns is not None:
        events = int(rects.count.sum())
        merged_what = (
            "overlapping events of a row"
            if found.resolution_ns <= 1
            else (f"events of a row closer than {timeline.fmt_ns(found.resolution_ns)}")
        )
        note = (
            f"{events:,} events drawn as {len(rects):,} rectangles: {merged_what} merged "
            "(a trace viewer shows each one)"
        )
    return _finish(timeline.draw(rects, found.duration_ns / 1e6), title, note)


def _not_kept(report: "Report", step: int | None) -> str:
    """Why a report read from JSON cannot draw ``step``'s timeline."""
    windows = [
        (w.get("step"), w.get("host")) for w in report.section("timeline").get("windows") or [] if w.get("why") is None
    ]
    hosts = [str(h) for s, h in windows if s == step]
    if hosts:
        why = f"the report keeps step {step} on host {', '.join(hosts)} only"
    elif windows:
        why = f"the report keeps the events of steps {', '.join(str(s) for s, _ in windows)} only"
    else:
        return "the report keeps no events" + _older(report, "timeline")
    return f"{why}; build it from the trace with jaxdiag.report(path) to draw this one"


def _older(report: "Report", section: str) -> str:
    """``" (saved with schema 1.2, before reports kept <section>)"`` for a report older than the section."""
    from jaxdiag.reporting.sections import named

    found = named(section)
    if found is None:
        return ""
    since = found.since
    try:
        older = tuple(map(int, report.schema_version.split("."))) < tuple(map(int, since.split(".")))
    except ValueError:
        return ""
    return f" (saved with schema {report.schema_version}, before reports kept {section})" if older else ""


# --- shared helpers -----------------------------------------------------------------
#: What fills the charts drawn per step.
_MARK_STEPS = "mark each step with jax.profiler.StepTraceAnnotation or @jaxdiag.step"


def no_data(title: str, why: str) -> "go.Figure":
    """An empty figure that says there is nothing to draw, and why."""
    go = _go()
    fig = go.Figure()
    fig.add_annotation(
        text=f"no data: {why}",
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        showarrow=False,
        font={"size": 14, "color": "#57606a"},
    )
    fig.update_layout(height=200, xaxis_visible=False, yaxis_visible=False)
    return _finish(fig, title, "")


def _finish(fig: "go.Figure", title: str, note: str) -> "go.Figure":
    """Title, template and margins; ``note`` (what was dropped or merged) goes under the title.

    Every figure passes here, so here its names are made text (``shown_as_text``).
    """
    shown_as_text(fig)
    title, note = chart_text(title), chart_text(note)
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        template=_TEMPLATE,
        margin={"l": 60, "r": 30, "t": 90 if note else 60, "b": 50},
        legend={"orientation": "h", "y": -0.2},
    )
    if fig.layout.height is None:
        fig.update_layout(height=360)
    if note:
        fig.add_annotation(
            text=note,
            x=0,
            y=1.0,
            xref="paper",
            yref="paper",
            xanchor="left",
            yanchor="bottom",
            yshift=8,
            showarrow=False,
            font={"size": 12, "color": "#9a6700"},
        )
    return fig


def _mean_groups(values: list[float], k: int) -> list[float]:
    return [sum(values[i : i + k]) / len(values[i : i + k]) for i in range(0, len(values), k)]


def _ms(value: Any) -> float:
    """A number from a section, 0 for ``None``/NaN."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def _fmt_ms(ms: float) -> str:
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.3g} ms"


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _go() -> Any:
    import plotly.graph_objects as go

    return go
