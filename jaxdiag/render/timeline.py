"""Draw a step timeline window (``reporting.timeline_events``) as horizontal bars.

The events were chosen and merged when the report was built, so the same window
draws the same way from the trace and from a saved report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxdiag.reporting.timeline_events import Rects, fmt_ns, plane_label, unique_labels

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

__all__ = ["COLORS", "MAX_LABELLED", "draw", "fmt_ns", "plane_label", "unique_labels"]

#: Bar colours by what an event is (``timeline_events.KINDS``).
COLORS = {"annotation": "#72B7B2", "compute": "#4C78A8", "collective": "#F58518", "memcpy": "#54A24B"}
#: Bars carry their names only up to this many: in a browser, text costs more to
#: lay out than the bars (3000 bars draw in 0.8 s, 1.4 s with text), and most of
#: it would be too wide to show anyway. Hover shows every name.
MAX_LABELLED = 600


def draw(rects: Rects, window_ms: float) -> "go.Figure":
    """Horizontal bars, one trace per legend group (clicking one hides that device), rows top to bottom."""
    import html

    import numpy as np
    import plotly.graph_objects as go

    start_ms, dur_ms = rects.start / 1e6, (rects.end - rects.start) / 1e6
    hover = np.array(
        [
            f"{html.escape(str(nm))}<br>start {s:.3f} ms, {d:.3f} ms"
            if c == 1
            else f"{c} events merged<br>{b / 1e6:.3f} ms of events over {d:.3f} ms from {s:.3f} ms"
            for nm, s, d, c, b in zip(rects.name, start_ms, dur_ms, rects.count, rects.busy)
        ],
        dtype=object,
    )
    colors = np.array([COLORS.get(str(k), COLORS["compute"]) for k in rects.kind], dtype=object)
    labelled = len(rects) <= MAX_LABELLED
    fig = go.Figure()
    for group in dict.fromkeys(rects.group.tolist()):
        m = rects.group == group
        fig.add_trace(
            go.Bar(
                x=dur_ms[m],
                base=start_ms[m],
                y=[rects.labels[r] for r in rects.row[m]],
                orientation="h",
                marker={"color": colors[m].tolist(), "line": {"width": 0}},
                name=group,
                hovertext=hover[m].tolist(),
                hoverinfo="text",
                width=0.8,
                text=[str(n) for n in rects.name[m]] if labelled else None,  # escaped by figures._finish
                textposition="inside",
                insidetextanchor="start",
            )
        )
    fig.update_yaxes(categoryorder="array", categoryarray=list(rects.labels), autorange="reversed", type="category")
    fig.update_xaxes(title_text="ms from the start of the window", range=[0, window_ms])
    fig.update_layout(
        barmode="overlay",
        uniformtext={"minsize": 9, "mode": "hide"},
        height=min(max(260, 130 + 24 * len(rects.labels)), 1400),
    )
    return fig
