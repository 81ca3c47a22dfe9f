"""The sharding figure: which collectives each function pays for, and why they are there.

From ``report.sharding`` only. With a timeline, bars are the collectives' time per
HLO op; without one (a report built from a compile log), their bytes per call.
Implicit resharding (collectives the user's specs did not ask for) is drawn in red.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

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


@dataclasses.dataclass(frozen=True)
class _Bar:
    """One collective drawn: a timeline op, or (without a timeline) a program's collective by bytes per call."""

    label: str
    value: float
    origin: str
    hover: tuple[int | None, int, str | None, str | None]  # bytes, count, module, op


def sharding_collectives(report: "Report") -> "go.Figure":
    """Bars per collective, coloured by origin, labelled ``function: kind of arrays over axes``."""
    section = report.sharding
    bars = [
        _Bar(
            _label(r.function or r.module, r.kind, r.arrays, r.mesh_axes),
            r.total_ms,
            r.origin or "other",
            (r.bytes, r.count, r.module, r.op),
        )
        for r in section.timeline
        if r.total_ms > 0
    ]
    axis_title = "time on the timeline (ms)"
    if not bars:
        bars = [
            _Bar(
                _label(f.function, c.kind, c.arrays, c.mesh_axes),
                c.bytes_per_call,
                c.origin or "other",
                (c.bytes, c.count, None, None),
            )
            for f in section.functions
            for c in f.collectives
            if c.bytes_per_call > 0
        ]
        axis_title = "bytes per call"
    if not bars:
        return no_data(TITLE, "no collectives (a single device, or no sharding facts in this report)")
    bars.sort(key=lambda b: -b.value)
    note = f"the {_MAX_BARS} largest of {len(bars)} shown" if len(bars) > _MAX_BARS else ""
    bars = bars[:_MAX_BARS][::-1]
    go = _go()
    fig = go.Figure()
    for origin in dict.fromkeys(b.origin for b in bars):
        mine = [b for b in bars if b.origin == origin]
        fig.add_bar(
            y=[b.label for b in mine],
            x=[float(b.value) for b in mine],
            orientation="h",
            name=origin,
            marker_color=_ORIGIN_COLORS.get(origin, "#BAB0AC"),
            customdata=[list(b.hover) for b in mine],
            hovertemplate="%{y}<br>%{x}<br>bytes %{customdata[0]}, count %{customdata[1]}"
            "<br>%{customdata[2]} / %{customdata[3]}<extra>%{fullData.name}</extra>",
        )
    fig.update_layout(barmode="stack", height=max(260, 28 * len(bars) + 140), xaxis_title=axis_title)
    return _finish(fig, TITLE, note)


def _label(owner: str, kind: str, arrays: Sequence[str], axes: Sequence[str] | None) -> str:
    over = f" over {', '.join(axes)}" if axes else ""
    return _short(f"{owner or '?'}: {kind} of {', '.join(arrays) or '?'}{over}", 70)
