"""The ``timeline`` section: the events of a few chosen steps, as rows of rectangles.

A report keeps the events of the steps its timeline shows (a typical step and the
slowest one, see ``chosen_steps``), so that a saved report draws the same timeline
as the trace it came from. For each step this module picks the events of the host
where the step took longest (user annotations on the host, nested ones a row
lower, above every device stream), and merges neighbouring events of a row when a
big trace would otherwise ask the browser for hundreds of thousands of
rectangles. ``render.timeline`` draws them.

Choosing, merging and encoding a step's rectangles are one format a saved report must read back,
which is why the module runs past 400 lines.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.step_section import StepFigures
    import numpy as np

    from jaxdiag.analyses.base import AnalysisInputs

#: What an event is, in the order a section numbers them.
KINDS = ("annotation", "compute", "collective", "memcpy")
#: Nested host annotations deeper than this share the last row.
MAX_DEPTH = 6
#: Above this many events in a window, neighbouring events of a row merge (see ``coalesce``).
MAX_RECTS = 3000
HOST_GROUP = "host annotations"


@dataclasses.dataclass(frozen=True)
class Rects:
    """Rectangles to draw, sorted by row then start; times in ns from the window's start.

    Attributes:
      labels: the row labels, top to bottom; ``row`` indexes them.
      planes: each row's device plane (``""`` for host annotation rows).
      kind: what each event is (one of ``KINDS``).
      count: events merged into each rectangle (1 when not merged).
      busy: summed event time inside each rectangle.
      group: legend group (``HOST_GROUP``, or the device plane's label).
    """

    labels: tuple[str, ...]
    planes: tuple[str, ...]
    row: "np.ndarray"
    start: "np.ndarray"
    end: "np.ndarray"
    name: "np.ndarray"
    kind: "np.ndarray"
    group: "np.ndarray"
    count: "np.ndarray"
    busy: "np.ndarray"

    def __len__(self) -> int:
        return len(self.start)

    def keep_devices(self, devices: Sequence[str]) -> "Rects":
        """The host rows and the rows of these device planes, renumbered."""
        import numpy as np

        kept = [r for r, plane in enumerate(self.planes) if not plane or plane in devices]
        renumber = np.full(len(self.labels), -1, dtype=np.int64)
        renumber[kept] = np.arange(len(kept))
        m = renumber[self.row] >= 0
        return Rects(
            tuple(self.labels[r] for r in kept),
            tuple(self.planes[r] for r in kept),
            renumber[self.row][m],
            self.start[m],
            self.end[m],
            self.name[m],
            self.kind[m],
            self.group[m],
            self.count[m],
            self.busy[m],
        )


@dataclasses.dataclass(frozen=True)
class Window:
    """One step's (or the whole capture's) events on one host.

    Attributes:
      step: the step (``None``: the whole capture).
      host: the host drawn.
      duration_ns: the window's length.
      events: events in the window before merging.
      resolution_ns: events of a row closer than this were merged (``None``: nothing merged).
      rects: what to draw.
    """

    step: int | None
    host: str
    duration_ns: int
    events: int
    resolution_ns: int | None
    rects: Rects


def build(inputs: "AnalysisInputs", sections: Mapping[str, Any]) -> dict[str, Any]:
    """The ``timeline`` section: the windows of ``chosen_steps`` (each on the host where it took longest)."""
    windows = []
    for step in chosen_steps(sections.get("steps") or []):
        found = from_frames(inputs.frames, step, inputs.host)
        if isinstance(found, Window):
            windows.append(encode(found))
        else:  # the reason, for the figure to give as it would from the trace
            windows.append({"step": step, "host": inputs.host, "why": found})
    return {"max_rects": MAX_RECTS, "windows": windows}


def chosen_steps(steps: Sequence["StepFigures"]) -> list[int | None]:
    """The steps a report keeps events for; ``[None]`` (the whole capture) without steps.

    A typical step (``default_step``, the one drawn by default) and the slowest of
    the steps that did not compile: the outlier worth a look. A step that compiled
    is mostly the compiler's own work on the device (autotuning), often thousands
    of events; the compile timeline shows those steps.
    """
    typical = default_step(steps)
    if typical is None:
        return [None]
    steady = [s for s in steps if not s.compile_ms > 0] or list(steps)
    slowest = max(steady, key=lambda s: (_ms(s.wall_ms), -s.step))
    return list(dict.fromkeys([typical, slowest.step]))


def default_step(steps: Sequence["StepFigures"]) -> int | None:
    """A typical step to draw: the median-wall step among those that did not compile."""
    steady = [s for s in steps if not s.compile_ms > 0] or list(steps)
    if not steady:
        return None
    ranked = sorted(steady, key=lambda s: (_ms(s.wall_ms), s.step))
    return ranked[(len(ranked) - 1) // 2].step


def from_frames(frames: Any, step: int | None, host: str | None, max_rects: int = MAX_RECTS) -> "Window | str":
    """The window of ``step`` read from the trace, or why there is none."""
    found = window(frames, step, host)
    if found is None:
        return f"step {step} is not in the trace" + (f" for host {host}" if host else "")
    host, lo, hi = found
    rects = select(frames, host, lo, hi)
    if rects is None:
        return "no annotations or device events in this window"
    merged, resolution = coalesce(rects, max_rects)
    return Window(step, host, hi - lo, len(rects), resolution, merged)


def find(section: Mapping[str, Any] | None, step: int | None, host: str | None) -> Window | str | None:
    """The window a report keeps for ``step`` (on ``host``, when given), why it has none, or ``None``."""
    for w in (section or {}).get("windows") or []:
        if w.get("step") == step and (host is None or w.get("host") in (host, None)):
            return str(w["why"]) if w.get("why") is not None else decode(w)
    return None


def check(section: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` unless every kept window decodes into rectangles that can be drawn."""
    import numpy as np

    windows = section.get("windows") or []
    if not isinstance(windows, list):
        raise ValueError("windows must be an array")
    for n, w in enumerate(windows):
        if isinstance(w, dict) and w.get("why") is not None:
            continue
        try:
            if not isinstance(w, dict) or not isinstance(w.get("rows") or [], list):
                raise TypeError("not an object with rows")
            r = decode(w).rects
            sizes = {len(r.row), len(r.start), len(r.end), len(r.name), len(r.kind), len(r.count), len(r.busy)}
            if len(sizes) != 1:
                raise ValueError("its arrays differ in length")
            if len(r.row) and (r.row.min() < 0 or r.row.max() >= len(r.labels)):
                raise ValueError("a row index is out of range")
            if len(r.start) and (r.start.min() < 0 or np.any(r.end < r.start)):
                raise ValueError("a start or duration is negative")
        except (TypeError, ValueError, IndexError, KeyError, OverflowError, AttributeError) as exc:
            raise ValueError(f"window {n}: {exc}") from None


def encode(w: Window) -> dict[str, Any]:
    """A window as JSON: rows, a table of names, and one array per rectangle field.

    ``count`` and ``busy_ns`` are ``None`` when no events were merged (each is then 1
    and the rectangle's duration).
    """
    import numpy as np

    r = w.rects
    names, name_idx = np.unique(r.name.astype(str), return_inverse=True)
    kinds = {k: i for i, k in enumerate(KINDS)}
    merged = bool((r.count > 1).any())
    return {
        "step": w.step,
        "host": w.host,
        "duration_ns": int(w.duration_ns),
        "events": int(w.events),
        "resolution_ns": None if w.resolution_ns is None else int(w.resolution_ns),
        "rows": [{"label": label, "plane": plane} for label, plane in zip(r.labels, r.planes)],
        "names": names.tolist(),
        "row": r.row.tolist(),
        "start_ns": r.start.tolist(),
        "dur_ns": (r.end - r.start).tolist(),
        "name": name_idx.tolist(),
        "kind": [kinds[k] for k in r.kind.tolist()],
        "count": r.count.tolist() if merged else None,
        "busy_ns": r.busy.tolist() if merged else None,
    }


def decode(d: Mapping[str, Any]) -> Window:
    """The inverse of ``encode``."""
    import numpy as np

    rows = d.get("rows") or []
    row = np.asarray(d.get("row") or [], dtype=np.int64)
    start = np.asarray(d.get("start_ns") or [], dtype=np.int64)
    end = start + np.asarray(d.get("dur_ns") or [], dtype=np.int64)
    names = np.asarray(d.get("names") or [], dtype=object)
    planes = tuple(str(r.get("plane") or "") for r in rows)
    groups = np.asarray([plane_label(p) if p else HOST_GROUP for p in planes], dtype=object)
    count = np.asarray(d["count"], dtype=np.int64) if d.get("count") is not None else np.ones(len(start), np.int64)
    busy = np.asarray(d["busy_ns"], dtype=np.int64) if d.get("busy_ns") is not None else end - start
    rects = Rects(
        labels=tuple(str(r.get("label")) for r in rows),
        planes=planes,
        row=row,
        start=start,
        end=end,
        name=names[np.asarray(d.get("name") or [], dtype=np.int64)],
        kind=np.asarray(KINDS, dtype=object)[np.asarray(d.get("kind") or [], dtype=np.int64)],
        group=groups[row] if len(row) else np.asarray([], dtype=object),
        count=count,
        busy=busy,
    )
    step = d.get("step")
    return Window(
        None if step is None else int(step),
        str(d.get("host")),
        int(d.get("duration_ns") or 0),
        int(d.get("events") or len(start)),
        d.get("resolution_ns"),
        rects,
    )


def _ms(value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    return v if v == v and abs(v) != float("inf") else 0.0


def window(frames: Any, step: int | None, host: str | None) -> tuple[str, int, int] | None:
    """``(host, start_ns, end_ns)`` of ``step`` (on the host where it took longest), or of the whole capture."""
    import numpy as np

    from jaxdiag.trace import frames as F

    st = frames.steps
    if step is not None:
        if not len(st):
            return None
        mine = (st[F.STEP] == step).to_numpy()
        if host is not None:
            mine &= (st[F.HOST] == host).to_numpy()
        rows = np.flatnonzero(mine)
        if not len(rows):
            return None
        starts, ends = st[F.START_NS].to_numpy()[rows], st["end_ns"].to_numpy()[rows]
        r = int(np.argmax(ends - starts))  # the first of the longest
        return str(st[F.HOST].to_numpy()[rows[r]]), int(starts[r]), int(ends[r])
    host = host or (frames.hosts[0] if frames.hosts else None)
    ev = frames.events.loc[frames.events[F.HOST] == host]
    if ev.empty:
        return None
    return str(host), int(ev[F.START_NS].min()), int((ev[F.START_NS] + ev[F.DUR_NS]).max())


def _drawn_rows(frames: Any, host: str) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
    """Positions, starts and ends of the annotation and device events of ``host`` (every window picks from these)."""
    import numpy as np

    from jaxdiag.analyses.device_work import isin
    from jaxdiag.trace import frames as F

    ev = frames.events
    keep = (ev[F.HOST] == host).to_numpy() & isin(ev[F.CATEGORY], ("annotation", "device"))
    rows = np.flatnonzero(keep)
    start = ev[F.START_NS].to_numpy(np.int64)[rows]
    return rows, start, start + ev[F.DUR_NS].to_numpy(np.int64)[rows]


def select(frames: Any, host: str, lo: int, hi: int, devices: Sequence[str] | None = None) -> Rects | None:
    """The annotation and device events of ``host`` overlapping ``[lo, hi)``, clipped to it; ``None`` if none."""
    import numpy as np

    from jaxdiag.analyses.device_work import classify_names, collective_kind
    from jaxdiag.analyses.shared import once
    from jaxdiag.trace import frames as F

    ev = frames.events
    rows, start, end = once(frames, ("timeline_rows", host), lambda: _drawn_rows(frames, host))
    keep = (start < hi) & (end > lo)
    if devices is not None:
        keep &= (ev[F.CATEGORY] != "device").to_numpy()[rows] | ev[F.PLANE].isin(list(devices)).to_numpy()[rows]
    sel = ev.take(rows[keep])
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
    kind = np.full(len(sel), "annotation", dtype=object)
    if is_dev.any():
        coll = classify_names(sel[F.NAME], collective_kind, key=collective_kind) != ""
        memcpy = (sel[F.LINE_KIND] == "memcpy").to_numpy() | np.char.startswith(names.astype(str), "Mem")
        kind = np.where(is_dev, np.where(coll, "collective", np.where(memcpy, "memcpy", "compute")), kind)
    distinct, plane_of = np.unique(planes, return_inverse=True)  # a few planes, many events
    group = np.where(is_dev, np.array([plane_label(p) for p in distinct.tolist()], dtype=object)[plane_of], HOST_GROUP)
    labels = unique_labels([_row_label(k, host_lines) for k in order_keys])
    row_planes = tuple(k[1] for k in order_keys)
    o = np.lexsort((s, row))
    return Rects(
        labels,
        row_planes,
        row[o],
        s[o],
        e[o],
        names[o],
        kind[o],
        group[o],
        np.ones(len(sel), dtype=np.int64),
        (e - s)[o],
    )


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
    merged = Rects(
        rects.labels,
        rects.planes,
        row[idx],
        start[idx],
        np.maximum.reduceat(end, idx),
        names,
        rects.kind[idx],
        rects.group[idx],
        count,
        np.add.reduceat(end - start, idx),
    )
    return merged, resolution


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
