"""The step timeline's data: a window's events as rows of rectangles, merged when there are too many.

``figures.step_timeline`` is the public builder. This module picks one host's events
in one time window (user annotations on the host, nested ones a row lower, above
every device stream), and merges neighbouring events of a row when a big trace
would otherwise ask the browser for hundreds of thousands of rectangles.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import plotly.graph_objects as go

#: Bar colours by what an event is.
ANNOTATION, COMPUTE, COLLECTIVE, MEMCPY = "#72B7B2", "#4C78A8", "#F58518", "#54A24B"
#: Nested host annotations deeper than this share the last row.
MAX_DEPTH = 6
#: Bars carry their names only up to this many: in a browser, text costs more to
#: lay out than the bars (3000 bars draw in 0.8 s, 1.4 s with text), and most of
#: it would be too wide to show anyway. Hover shows every name.
MAX_LABELLED = 600


@dataclasses.dataclass(frozen=True)
class Rects:
    """Rectangles to draw, sorted by row then start; times in ns from the window's start.

    Attributes:
      labels: the row labels, top to bottom; ``row`` indexes them.
      count: events merged into each rectangle (1 when not merged).
      busy: summed event time inside each rectangle.
      group: legend group ("host annotations", or the device plane).
    """

    labels: tuple[str, ...]
    row: "np.ndarray"
    start: "np.ndarray"
    end: "np.ndarray"
    name: "np.ndarray"
    color: "np.ndarray"
    group: "np.ndarray"
    count: "np.ndarray"
    busy: "np.ndarray"

    def __len__(self) -> int:
        return len(self.start)


def window(frames: Any, step: int | None, host: str | None) -> tuple[str, int, int] | None:
    """``(host, start_ns, end_ns)`` of ``step`` (on the host where it took longest), or of the whole capture."""
    from jaxdiag.trace import frames as F

    st = frames.steps
    if step is not None:
        rows = st.loc[st[F.STEP] == step] if len(st) else st
        if host is not None and len(rows):
            rows = rows.loc[rows[F.HOST] == host]
        if rows.empty:
            return None
        r = rows.loc[(rows["end_ns"] - rows[F.START_NS]).idxmax()]
        return str(r[F.HOST]), int(r[F.START_NS]), int(r["end_ns"])
    host = host or (frames.hosts[0] if frames.hosts else None)
    ev = frames.events.loc[frames.events[F.HOST] == host]
    if ev.empty:
        return None
    return str(host), int(ev[F.START_NS].min()), int((ev[F.START_NS] + ev[F.DUR_NS]).max())


def select(frames: Any, host: str, lo: int, hi: int, devices: Sequence[str] | None = None) -> Rects | None:
    """The annotation and device events of ``host`` overlapping ``[lo, hi)``, clipped to it; ``None`` if none."""
    import numpy as np

    from jaxdiag.analyses.device_work import classify_names, collective_kind
    from jaxdiag.trace import frames as F

    ev = frames.events
    start = ev[F.START_NS].to_numpy(np.int64)
    end = start + ev[F.DUR_NS].to_numpy(np.int64)
    keep = (start < hi) & (end > lo) & (ev[F.HOST] == host).to_numpy()
    keep &= ev[F.CATEGORY].isin(("annotation", "device")).to_numpy()
    if devices is not None:
        keep &= (ev[F.CATEGORY] != "device").to_numpy() | ev[F.PLANE].isin(list(devices)).to_numpy()
    sel = ev.loc[keep]
    if sel.empty:
        return None
    s = np.clip(start[keep], lo, hi) - lo
    e = np.clip(end[keep], lo, hi) - lo
    is_dev = (sel[F.CATEGORY] == "device").to_numpy()
    planes, lines = sel[F.PLANE].astype(str).to_numpy(), sel[F.LINE].astype(str).to_numpy()
    names = sel[F.NAME].astype(str).to_numpy()
    depth = np.zeros(len(sel), dtype=np.int64)
    host_lines = list(dict.fromkeys(lines[~is_dev]))
    for line in host_lines:
        idx = np.flatnonzero(~is_dev & (lines == line))
        idx = idx[np.lexsort((s[idx] - e[idx], s[idx]))]  # by start, the enclosing span first
        depth[idx] = np.minimum(_depths(s[idx], e[idx]), MAX_DEPTH)
    # Row keys sort host lines in trace order by depth, then devices by plane and line.
    line_rank = {line: n for n, line in enumerate(host_lines)}
    keys = [
        (1, p, ln, 0) if dev else (0, "", f"{line_rank[ln]:06d}", int(d))
        for dev, p, ln, d in zip(is_dev.tolist(), planes.tolist(), lines.tolist(), depth.tolist())
    ]
    order_keys = sorted(set(keys))
    row_of = {k: n for n, k in enumerate(order_keys)}
    row = np.fromiter((row_of[k] for k in keys), dtype=np.int64, count=len(keys))
    color = np.full(len(sel), ANNOTATION, dtype=object)
    if is_dev.any():
        coll = classify_names(sel[F.NAME], collective_kind) != ""
        memcpy = (sel[F.LINE_KIND] == "memcpy").to_numpy() | np.char.startswith(names.astype(str), "Mem")
        color = np.where(is_dev, np.where(coll, COLLECTIVE, np.where(memcpy, MEMCPY, COMPUTE)), color)
    group = np.where(is_dev, np.array([plane_label(p) for p in planes], dtype=object), "host annotations")
    labels = unique_labels([_row_label(k, host_lines) for k in order_keys])
    o = np.lexsort((s, row))
    return Rects(labels, row[o], s[o], e[o], names[o], color[o], group[o],
                 np.ones(len(sel), dtype=np.int64), (e - s)[o])


def coalesce(rects: Rects, max_rects: int) -> tuple[Rects, int | None]:
    """Merge each row's events closer than a resolution, doubled until at most ``max_rects`` remain.

    Returns the rectangles and the resolution used in ns (``None`` when nothing was merged).
    """
    import numpy as np

    n = len(rects)
    if n <= max_rects:
        return rects, None
    start, end, row = rects.start, rects.end, rects.row
    span = int(end.max()) + 1
    offset = row * (2 * span + 1)  # keeps one row's running end from reaching into the next row
    s, e = start + offset, end + offset
    run_end = np.maximum.accumulate(e)
    row_change = row[1:] != row[:-1]

    def starts_at(resolution: int) -> "np.ndarray":
        new = np.ones(n, dtype=bool)
        new[1:] = (s[1:] > run_end[:-1] + resolution) | row_change
        return new

    # The rectangle count falls as the resolution grows: find the finest that fits.
    lo, hi = 0, 1
    while hi < span and starts_at(hi).sum() > max_rects:
        lo, hi = hi, hi * 2
    while hi - lo > max(1, hi // 16):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if starts_at(mid).sum() <= max_rects else (mid, hi)
    resolution = hi
    idx = np.flatnonzero(starts_at(resolution))
    count = np.diff(np.append(idx, n))
    names = np.where(count == 1, rects.name[idx], np.char.add(count.astype(str), " events"))
    merged = Rects(rects.labels, row[idx], start[idx], np.maximum.reduceat(end, idx), names,
                   rects.color[idx], rects.group[idx], count, np.add.reduceat(end - start, idx))
    return merged, resolution


def draw(rects: Rects, window_ms: float) -> "go.Figure":
    """Horizontal bars, one trace per legend group (clicking one hides that device), rows top to bottom."""
    import html

    import numpy as np
    import plotly.graph_objects as go

    start_ms, dur_ms = rects.start / 1e6, (rects.end - rects.start) / 1e6
    hover = np.array([
        f"{html.escape(str(nm))}<br>start {s:.3f} ms, {d:.3f} ms" if c == 1 else
        f"{c} events merged<br>{b / 1e6:.3f} ms of events over {d:.3f} ms from {s:.3f} ms"
        for nm, s, d, c, b in zip(rects.name, start_ms, dur_ms, rects.count, rects.busy)
    ], dtype=object)
    labelled = len(rects) <= MAX_LABELLED
    fig = go.Figure()
    for group in dict.fromkeys(rects.group.tolist()):
        m = rects.group == group
        fig.add_trace(go.Bar(
            x=dur_ms[m], base=start_ms[m], y=[rects.labels[r] for r in rects.row[m]], orientation="h",
            marker={"color": rects.color[m].tolist(), "line": {"width": 0}}, name=group,
            hovertext=hover[m].tolist(), hoverinfo="text", width=0.8,
            text=[html.escape(str(n)) for n in rects.name[m]] if labelled else None,
            textposition="inside", insidetextanchor="start",
        ))
    fig.update_yaxes(categoryorder="array", categoryarray=list(rects.labels), autorange="reversed", type="category")
    fig.update_xaxes(title_text="ms from the start of the window", range=[0, window_ms])
    fig.update_layout(barmode="overlay", uniformtext={"minsize": 9, "mode": "hide"}, height=min(max(260, 130 + 24 * len(rects.labels)), 1400))
    return fig


def plane_label(plane: str) -> str:
    """``/device:GPU:0`` -> ``GPU:0``, ``/host:CPU`` -> ``host CPU``."""
    return plane.replace("/device:", "").replace("/host:", "host ")


def fmt_ns(ns: float) -> str:
    """A duration in ns as µs or ms."""
    return f"{ns / 1e6:.3g} ms" if ns >= 1e6 else f"{ns / 1e3:.3g} µs"


def _depths(starts: "np.ndarray", ends: "np.ndarray") -> "np.ndarray":
    """Nesting depth of each span (sorted by start, the enclosing span first)."""
    import numpy as np

    depth = np.zeros(len(starts), dtype=np.int64)
    open_ends: list[int] = []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        while open_ends and open_ends[-1] <= s:
            open_ends.pop()
        depth[i] = len(open_ends)
        open_ends.append(e)
    return depth


def unique_labels(labels: list[str]) -> tuple[str, ...]:
    """Row labels are plotly categories: two rows with one label would draw as one."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return tuple(out)


def _row_label(key: tuple[int, str, str, int], host_lines: Sequence[str]) -> str:
    kind, plane, line, depth = key
    if kind == 0:
        line = host_lines[int(line)]
    short = line.split("(")[0].strip() if line.startswith("Stream") else (line if len(line) <= 30 else line[:29] + "…")
    if kind == 0:
        return f"{short} ·{depth}" if depth else short
    return f"{plane_label(plane)} · {short}"
