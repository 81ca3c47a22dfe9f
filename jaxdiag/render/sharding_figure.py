"""The sharding figure: which collectives each function pays for, and why they are there.

From ``report.sharding`` only. With a timeline, bars are the collectives' time per
HLO op; without one (a report built from a compile log), their bytes per call.
Implicit resharding (collectives the user's specs did not ask for) is drawn in red.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jaxdiag.render.figures import _finish, _go, _short, no_data

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from jaxdiag.reporting.model import Report

TITLE = "Collectives by function: what the compiler moved between devices"
_ORIGIN_COLORS = {
    "resharding": "#E45756",
    "user": "#4C78A8",
    "reduction": "#54A24B",
    "constraint": "#F58518",
    "requested": "#B279A2",
}
_MAX_BARS = 30


def sharding_collectives(report: "Report") -> "go.Figure":
    """Bars per collective, coloured by origin, labelled ``function: kind of arrays over axes``."""
    section = getattr(report, "sharding", None) or {}
    rows = [r for r in section.get("timeline") or [] if (r.get("total_ms") or 0) > 0]
    value_key, axis_title = "total_ms", "time on the timeline (ms)"
    if not rows:
        rows = [
            dict(c, function=f.get("function"))
            for f in section.get("functions") or []
            for c in f.get("collectives") or []
        ]
        value_key, axis_title = "bytes_per_call", "bytes per call"
    rows = [r for r in rows if (r.get(value_key) or 0) > 0]
    if not rows:
        return no_data(TITLE, "no collectives (a single device, or no sharding facts in this report)")
    rows.sort(key=lambda r: -float(r.get(value_key) or 0))
    note = f"the {_MAX_BARS} largest of {len(rows)} shown" if len(rows) > _MAX_BARS else ""
    rows = rows[:_MAX_BARS][::-1]
    go = _go()
    fig = go.Figure()
    for origin in dict.fromkeys(str(r.get("origin") or "other") for r in rows):
        mine = [r for r in rows if str(r.get("origin") or "other") == origin]
        fig.add_bar(
            y=[_label(r) for r in mine],
            x=[float(r.get(value_key) or 0) for r in mine],
            orientation="h",
            name=origin,
            marker_color=_ORIGIN_COLORS.get(origin, "#BAB0AC"),
            customdata=[[r.get("bytes"), r.get("count"), r.get("module"), r.get("op")] for r in mine],
            hovertemplate="%{y}<br>%{x}<br>bytes %{customdata[0]}, count %{customdata[1]}"
            "<br>%{customdata[2]} / %{customdata[3]}<extra>%{fullData.name}</extra>",
        )
    fig.update_layout(barmode="stack", height=max(260, 28 * len(rows) + 140), xaxis_title=axis_title)
    return _finish(fig, TITLE, note)


def _label(row: dict[str, Any]) -> str:
    arrays = ", ".join(row.get("arrays") or []) or "?"
    axes = row.get("mesh_axes")
    over = f" over {', '.join(axes)}" if axes else ""
    return _short(f"{row.get('function') or row.get('module') or '?'}: {row.get('kind')} of {arrays}{over}", 70)
