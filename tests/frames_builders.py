"""Build ``TraceFrames`` by hand in a few lines, shaped like the loader's output.

Times are in microseconds here (converted to the frames' nanoseconds), so a test
reads like a timeline. Names and line names follow the real H100 and CPU
captures: ``Stream #14(Compute)`` GPU streams, ``python3`` main thread,
``PjitFunction(f)`` framework spans, ``backend_compile_and_load`` compile anchors.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from jaxdiag.trace import frames as F
from jaxdiag.trace.frames import TraceFrames

US = 1000


def device_event(
    start_us: float,
    dur_us: float,
    name: str = "fusion",
    *,
    host: str = "h0",
    device: int = 0,
    line: str = "Stream #14(Compute)",
    line_kind: str = "compute",
    module: str = "jit_step",
    hlo_op: str | None = None,
    framework_op: str = "",
    program_id: int = 1,
    plane: str | None = None,
) -> dict[str, Any]:
    """One device op (kernel, copy or collective) on a GPU stream."""
    return {
        F.HOST: host,
        F.PLANE: plane or f"/device:GPU:{device}",
        F.DEVICE: device,
        F.LINE: line,
        F.LINE_KIND: line_kind,
        F.NAME: name,
        F.START_NS: int(start_us * US),
        F.DUR_NS: int(dur_us * US),
        F.HLO_MODULE: module,
        F.HLO_OP: name if hlo_op is None else hlo_op,
        F.FRAMEWORK_OP: framework_op,
        F.PROGRAM_ID: program_id,
        F.CATEGORY: "device",
    }


def host_event(
    start_us: float,
    dur_us: float,
    name: str,
    *,
    category: str = "annotation",
    host: str = "h0",
    line: str = "python3",
    line_kind: str = "python",
) -> dict[str, Any]:
    """One host event: an annotation (``load_batch``, ``PjitFunction(f)``) or a runtime span."""
    return {
        F.HOST: host,
        F.PLANE: "/host:CPU",
        F.DEVICE: -1,
        F.LINE: line,
        F.LINE_KIND: line_kind,
        F.NAME: name,
        F.START_NS: int(start_us * US),
        F.DUR_NS: int(dur_us * US),
        F.HLO_MODULE: "",
        F.HLO_OP: "",
        F.FRAMEWORK_OP: "",
        F.PROGRAM_ID: -1,
        F.CATEGORY: category,
    }


def compile_events(
    start_us: float, dur_us: float, function: str, *, host: str = "h0", line: str = "python3", trace_us: float = 0.0
) -> list[dict[str, Any]]:
    """What a compile of ``function`` leaves on the calling thread, as on the H100 trace.

    ``PjitFunction(f)`` starts ``trace_us`` before the backend compile (tracing and
    lowering) and ends 10 us after it (the first run's dispatch).
    """
    return [
        host_event(start_us - trace_us, trace_us + dur_us + 10, f"PjitFunction({function})", host=host, line=line),
        host_event(start_us, dur_us, "backend_compile_and_load", category="runtime", host=host, line=line),
        host_event(
            start_us + 1,
            dur_us - 2,
            f"PjRtCApiClient::CompileAndLoad(jit_{function})",
            category="runtime",
            host=host,
            line=line,
        ),
    ]


def frames(
    events: Iterable[dict[str, Any]],
    steps: Sequence[tuple[float, float]] | None = None,
    *,
    step_table: Sequence[tuple[str, int, float, float]] | None = None,
    peak_flops: float = float("nan"),
    meta: dict[str, Any] | None = None,
) -> TraceFrames:
    """``TraceFrames`` from event dicts and step windows.

    Args:
      events: rows from ``device_event``/``host_event``.
      steps: ``(start_us, end_us)`` per step, numbered from 0, the same on every host.
      step_table: ``(host, step, start_us, end_us)`` rows instead, for per-host steps.
      peak_flops: each device's peak flop/s in the devices table.
      meta: ``frames.meta``.
    """
    ev = pd.DataFrame(list(events), columns=[c for c in F.EVENT_COLUMNS if c != F.STEP])
    hosts = tuple(dict.fromkeys(ev[F.HOST])) if len(ev) else ("h0",)
    rows = list(step_table or [])
    if steps is not None:
        rows += [(h, i, s, e) for h in hosts for i, (s, e) in enumerate(steps)]
    st = pd.DataFrame([(h, n, "train", int(s * US), int(e * US)) for h, n, s, e in rows], columns=list(F.STEP_COLUMNS))
    ev[F.STEP] = _assign_steps(ev, st)
    ev[F.RUN_ID] = ev[F.RUN_ID].fillna(-1)  # rows built without one: unknown, as the loader says
    ev = ev[list(F.EVENT_COLUMNS)]
    for col in (F.DEVICE, F.START_NS, F.DUR_NS, F.PROGRAM_ID, F.STEP, F.RUN_ID):
        ev[col] = ev[col].astype(np.int64)
    dev = ev.loc[ev[F.CATEGORY] == "device", [F.HOST, F.PLANE, F.DEVICE]].drop_duplicates()
    devices = pd.DataFrame(
        [
            {
                F.HOST: h,
                F.PLANE: p,
                F.DEVICE: d,
                "platform": "gpu",
                "device_name": "test",
                "vendor": "",
                "core_count": np.nan,
                "clock_hz": np.nan,
                "memory_bandwidth_bps": np.nan,
                "memory_bytes": np.nan,
                "peak_flops": peak_flops,
            }
            for h, p, d in dev.itertuples(index=False)
        ],
        columns=list(F.DEVICE_COLUMNS),
    )
    return TraceFrames(
        events=ev,
        devices=devices,
        steps=st,
        step_source="annotation" if rows else "none",
        run_dir="/test",
        files=(),
        hosts=hosts,
        meta=dict(meta or {}),
    )


def _assign_steps(ev: pd.DataFrame, st: pd.DataFrame) -> np.ndarray:
    out = np.full(len(ev), -1, dtype=np.int64)
    for h, s, lo, hi in st[[F.HOST, F.STEP, F.START_NS, "end_ns"]].itertuples(index=False):
        inside = (ev[F.HOST] == h).to_numpy() & (ev[F.START_NS] >= lo).to_numpy() & (ev[F.START_NS] < hi).to_numpy()
        out[inside] = s
    return out
