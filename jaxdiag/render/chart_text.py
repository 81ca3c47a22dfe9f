"""Names in a chart, made text for plotly: the charts' one escape.

Plotly draws a trace's text, category labels, legend names and titles as HTML
of its own (``<a href>`` makes a link, ``<b>`` bold), and decodes entities, so
a name escaped with ``html.escape`` draws as written. Every figure passes
``figures._finish``, which calls ``shown_as_text``.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go


def shown_as_text(fig: "go.Figure") -> None:
    """Escape the names a figure shows: plotly draws text as HTML of its own (``<a href>``, ``<b>``).

    The charts' one escape: each string a trace or a category axis shows (``x``,
    ``y``, ``text``, ``customdata``, legend names, category orders), so an op or
    host name draws as written and makes no link. Hover texts and templates that
    carry our own ``<br>`` escape their names where they are built (``text``,
    ``render.timeline``); they are left as they are here.
    """
    for trace in fig.data:
        for key in ("x", "y", "text", "customdata"):
            values = getattr(trace, key, None)
            if values is not None and not isinstance(values, str):
                escaped = texts(values)
                if escaped is not None:
                    trace[key] = escaped
            elif isinstance(values, str):
                trace[key] = text(values)
        if isinstance(getattr(trace, "name", None), str):
            trace.name = text(trace.name)
    for name in [n for n in fig.layout.to_plotly_json() if n.startswith(("xaxis", "yaxis"))]:
        axis = fig.layout[name]
        for key in ("categoryarray", "ticktext"):
            values = getattr(axis, key, None)
            if values is not None:
                escaped = texts(values)
                if escaped is not None:
                    axis[key] = escaped


def text(value: str) -> str:
    """``value`` escaped for plotly's HTML: drawn as written."""
    return html.escape(value, quote=False)


def texts(values: Any) -> Any:
    """``values`` with each string escaped (nested lists too); ``None`` when it holds no string (numbers stay arrays)."""
    import numpy as np

    if isinstance(values, np.ndarray):
        if values.dtype.kind not in "OUS":
            return None
        values = values.tolist()
    if not isinstance(values, (list, tuple)) or not any(isinstance(v, (str, list, tuple)) for v in values):
        return None
    return [text(v) if isinstance(v, str) else (texts(v) or v) if isinstance(v, (list, tuple)) else v for v in values]
