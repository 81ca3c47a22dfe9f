"""Select what the analyses count: device ops, host events and step windows of a capture.

Every analysis asks the same questions of ``TraceFrames`` (which rows are device
work, which are copies, which are collectives, which are profiler noise, where
do the steps lie), so the answers live here, once.

What counts as device work, from the real H100 and CPU captures:

- rows with ``category == "device"``, except whole-module and step rows (TPU
  ``XLA Modules``/``Steps`` lines), which span many ops and would hide every gap;
- minus autotuning noise: the GPU autotuner runs ``RedzoneAllocatorKernel``,
  ``xla_fp_comparison``, ``DelayKernel`` and ``RepeatBufferKernel`` kernels, plus
  candidate kernels in one-fusion modules (``gemm_fusion_dot.136``, no program id)
  and their buffer copies, all while a compile holds the host. On the H100
  transformer trace that is 270 ms of kernel time (190 ms of wall time) inside
  its three compiles, against 17 ms of the program's own device time in all
  twelve steps: counted as work, it would hide the compiles' device idle time;
- ``op_kind`` splits the rest into ``compute`` (kernels, XLA:CPU thunks),
  ``memcpy`` (copies and memsets) and ``collective``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from jaxdiag.analyses.categories import (  # noqa: F401 - offered here too, where the analyses import them from
    category_codes,
    classify_names,
    isin,
    name_matches,
    row_groups,
    strings_at,
)
from jaxdiag.analyses.shared import once
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.trace.frames import TraceFrames

END_NS = "end_ns"
OP_KIND = "op_kind"  # "compute", "memcpy" or "collective"
COLLECTIVE = "collective"  # collective kind, "" for other ops

#: Kernels the XLA GPU autotuner and profiler run for themselves, never the program.
AUTOTUNE_KERNEL = re.compile(r"RedzoneAllocatorKernel|xla_fp_comparison|DelayKernel|RepeatBufferKernel")
#: Copies and memsets by name; ROCm runs its copies and fills as blit kernels (``__amd_rocclr_copyBuffer.kd``).
_MEMCPY = re.compile(
    r"^(?:Memcpy|Memset|memcpy|memset|cuMemcpy|cuMemset|hipMemcpy|hipMemset|"
    r"__amd_rocclr_(?:copy|fill)Buffer)"
)
#: Module names JAX gives the programs it runs (``jit_step``, ``pmap_f``, ``jit(f)``).
PROGRAM_MODULE = re.compile(r"^(?:jit|pjit|pmap|xmap|shard_map)[_(]")
#: Lines whose events are not ops occupying a core (TPU modules, steps, async spans, markers, SparseCore).
_NON_OP_LINES = frozenset({"xla_modules", "steps", "async_ops", "markers", "sparsecore"})

# Name fragments of collectives, after lower-casing and dropping "-" and "_":
# NCCL/RCCL kernels (ncclDevKernel_AllReduce_Sum_f32_RING_LL), HLO ops
# (all-reduce.3, all-gather-start, collective-permute-done) and XLA:CPU thunks.
_COLLECTIVE_KINDS = (
    ("allreduce", "all-reduce"),
    ("allgather", "all-gather"),
    ("reducescatter", "reduce-scatter"),
    ("alltoall", "all-to-all"),
    ("collectivepermute", "collective-permute"),
    ("collectivebroadcast", "collective-broadcast"),
    # XLA:CPU names a collective after the JAX primitive (``psum_invariant.7``, ``ppermute.2``).
    ("psumscatter", "reduce-scatter"),
    ("psum", "all-reduce"),
    ("pmax", "all-reduce"),
    ("pmin", "all-reduce"),
    ("ppermute", "collective-permute"),
    ("sendrecv", "collective-permute"),
    ("ncclkernelbroadcast", "broadcast"),
    ("nccldevkernelbroadcast", "broadcast"),
    ("ncclkernelsend", "send-recv"),
    ("ncclkernelrecv", "send-recv"),
    ("nccldevkernelsend", "send-recv"),
    ("nccldevkernelrecv", "send-recv"),
)


_HLO_SEND_RECV = re.compile(r"^(?:send|recv)(?:-start|-done)?(?:\.\d+)?$")
#: Text that every fragment of ``_COLLECTIVE_KINDS`` holds: a name without it is no collective's by fragment.
_ANY_FRAGMENT = re.compile("all|reduce|collective|psum|pmax|pmin|ppermute|sendrecv|nccl")


def collective_kind(name: str) -> str:
    """The collective ``name`` (kernel or HLO op) performs, or ``""`` for other ops."""
    key = name.lower().replace("-", "").replace("_", "")
    if _ANY_FRAGMENT.search(key):  # most names are no collective's: one search tells
        for fragment, kind in _COLLECTIVE_KINDS:
            if fragment in key:
                return kind
    return "send-recv" if _HLO_SEND_RECV.match(name) else ""


def host_events(frames: "TraceFrames", host: str | None = None) -> "pd.DataFrame":
    """Annotation and runtime rows of ``host`` (all hosts when ``None``), with ``end_ns``.

    Python-tracer frames are left out: no analysis reads them, and when kept they
    are most of a capture's rows.
    """
    return once(frames, ("host_events", host), lambda: _host_events(frames, host))


def _host_events(frames: "TraceFrames", host: str | None) -> "pd.DataFrame":
    ev = frames.events
    keep = ~isin(ev[F.CATEGORY], ("device", "python"))
    if host is not None:
        keep &= (ev[F.HOST] == host).to_numpy()
    out = _rows(ev, keep)
    return out.assign(**{END_NS: out[F.START_NS] + out[F.DUR_NS]})


def _rows(frame: "pd.DataFrame", keep: np.ndarray) -> "pd.DataFrame":
    """The rows ``keep`` (a mask, or positions in order) selects; a slice, not a copy, when they are one
    block (a host's rows are, in the events table's order), which pandas shares with the table until
    either is written."""
    rows = np.flatnonzero(keep) if keep.dtype == bool else keep
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return frame.iloc[int(rows[0]) : int(rows[-1]) + 1]
    return frame.take(rows)


def device_ops(
    frames: "TraceFrames",
    host: str | None = None,
    compile_windows: dict[str, np.ndarray] | None = None,
) -> "pd.DataFrame":
    """Device op rows with ``end_ns``, ``op_kind`` and ``collective``, noise removed.

    Args:
      frames: the capture.
      host: only this host's devices (``None``: every host).
      compile_windows: per host, the intervals when a compile held the host (see
        ``compile_spans.compile_windows``); device rows inside them that belong to
        no program (autotuning candidates and their copies) are dropped.
    """
    if host is None:  # every host but one is that host: share the answer with per-host callers
        host = once(frames, ("sole_host",), lambda: _sole_host(frames))
    key = ("device_ops", host, _windows_key(compile_windows))
    return once(frames, key, lambda: _device_ops(frames, host, compile_windows))


def _sole_host(frames: "TraceFrames") -> str | None:
    """The one host every event belongs to, else ``None``."""
    hosts = frames.events[F.HOST].unique()
    return str(hosts[0]) if len(hosts) == 1 else None


def _windows_key(windows: dict[str, np.ndarray] | None) -> tuple[tuple[str, bytes], ...]:
    """The compile windows as a hashable key; no windows and empty windows drop the same rows."""
    if not windows:
        return ()
    return tuple((h, np.asarray(w, dtype=np.int64).tobytes()) for h, w in sorted(windows.items()) if np.size(w))


def _device_ops(
    frames: "TraceFrames", host: str | None, compile_windows: dict[str, np.ndarray] | None
) -> "pd.DataFrame":
    if not compile_windows or not _windows_key(compile_windows):  # no window drops a row
        return _classified_ops(frames, host)
    ops = device_ops(frames, host)  # classified once, whichever windows drop rows from it
    return _rows(ops, ~_autotune_in_compile(ops, compile_windows))


def _classified_ops(frames: "TraceFrames", host: str | None) -> "pd.DataFrame":
    """Device op rows of ``host`` without autotuning kernels, with ``end_ns``, ``op_kind`` and ``collective``."""
    ev = frames.events
    rows = np.flatnonzero(device_rows(frames, host))
    kept = rows[~name_matches(ev[F.NAME], AUTOTUNE_KERNEL, rows=rows)]
    ops = _rows(ev, kept)  # one copy of the rows kept, or none
    memcpy = name_matches(ops[F.NAME], _MEMCPY) | (ops[F.LINE_KIND] == "memcpy").to_numpy()
    coll = classify_names(ops[F.NAME], collective_kind, key=collective_kind)
    by_op = classify_names(ops[F.HLO_OP], collective_kind, key=collective_kind)
    coll = np.where(coll == "", by_op, coll)
    # A collective line with an unrecognised kernel name is still communication.
    on_coll_line = (ops[F.LINE_KIND] == "collective").to_numpy() & (coll == "") & ~memcpy
    coll = np.where(on_coll_line, "collective", coll)
    # Strings as objects: pandas reads an object array of strings as text faster than a numpy one.
    kind = _OP_KINDS.take(np.where(coll != "", 2, np.where(memcpy, 1, 0)))
    return ops.assign(**{END_NS: ops[F.START_NS] + ops[F.DUR_NS], OP_KIND: kind, COLLECTIVE: coll})


_OP_KINDS = np.array(["compute", "memcpy", "collective"], dtype=object)


def is_compute(frames: "TraceFrames", ops: "pd.DataFrame") -> np.ndarray:
    """Which rows of ``ops`` (``device_ops``' frame) are compute ops, shared within a report (read-only)."""
    held = once(frames, ("is_compute", id(ops)), lambda: (ops, kind_is(ops, "compute")))
    return held[1] if held[0] is ops else kind_is(ops, "compute")


def kind_is(ops: "pd.DataFrame", kind: str) -> np.ndarray:
    """``(ops[OP_KIND] == kind).to_numpy()``, compared as objects: a few times faster than on pandas text."""
    return np.asarray(ops[OP_KIND].to_numpy(object) == kind, dtype=bool)


def device_rows(frames: "TraceFrames", host: str | None = None) -> np.ndarray:
    """Which events are device ops of ``host`` (every host when ``None``), before noise is removed.

    ``device_ops`` drops autotuning kernels (by name) and candidates run inside compiles from these.
    Shared within a report, so read-only.
    """
    return once(frames, ("device_rows", host), lambda: _device_rows(frames, host))


def _device_rows(frames: "TraceFrames", host: str | None) -> np.ndarray:
    ev = frames.events
    keep = (ev[F.CATEGORY] == "device").to_numpy() & ~isin(ev[F.LINE_KIND], _NON_OP_LINES)
    if host is not None:
        keep &= (ev[F.HOST] == host).to_numpy()
    return keep


def _autotune_in_compile(ops: "pd.DataFrame", windows: dict[str, np.ndarray]) -> np.ndarray:
    """Rows inside a compile window that no JAX program launched."""
    module = ops[F.HLO_MODULE]
    program = name_matches(module, PROGRAM_MODULE, at_start=True)
    named = classify_names(module, bool, key=bool, dtype=bool)
    has_pid = (ops[F.PROGRAM_ID].fillna(-1).to_numpy() >= 0) & named
    candidate = ~program & ~has_pid
    inside = np.zeros(len(ops), dtype=bool)
    hosts = ops[F.HOST].to_numpy()
    starts = ops[F.START_NS].to_numpy(dtype=np.int64)
    for host, spans in windows.items():
        if spans.size == 0:
            continue
        rows = np.flatnonzero((hosts == host) & candidate)
        i = np.searchsorted(spans[:, 0], starts[rows], side="right") - 1
        ok = i >= 0
        inside[rows[ok]] = starts[rows[ok]] < spans[i[ok], 1]
    return inside


def intervals_of(df: "pd.DataFrame") -> np.ndarray:
    """The ``[start, end)`` rows of an events frame, as an interval set."""
    s = df[F.START_NS].to_numpy(dtype=np.int64)
    return np.stack([s, s + df[F.DUR_NS].to_numpy(dtype=np.int64)], axis=1) if len(df) else np.zeros((0, 2), np.int64)


def places(ops: "pd.DataFrame") -> np.ndarray:
    """One number per plane and device ordinal, for each row of an events frame (negative: no plane)."""
    import pandas as pd

    plane = pd.factorize(ops[F.PLANE])[0].astype(np.int64)
    ordinal = ops[F.DEVICE].to_numpy(np.int64) + 1  # -1: none
    return plane * (int(ordinal.max(initial=0)) + 1) + ordinal


def step_windows(frames: "TraceFrames", host: str | None = None, steps: Sequence[int] | None = None) -> "pd.DataFrame":
    """Step rows (``host``, ``step``, ``start_ns``, ``end_ns``), sorted, optionally filtered.

    A host with no step rows at all gets one window, step -1, over all its events,
    so that a capture without step markers is still analysed as a whole (unless
    ``steps`` asks for particular steps, which such a capture cannot have).
    """
    if host is None and len(frames.hosts) == 1:  # the same windows as the one host's: share them
        host = frames.hosts[0]
    key = ("step_windows", host, None if steps is None else tuple(steps))
    return once(frames, key, lambda: _step_windows(frames, host, steps))


def _step_windows(frames: "TraceFrames", host: str | None, steps: Sequence[int] | None) -> "pd.DataFrame":
    import pandas as pd

    cols = [F.HOST, F.STEP, F.START_NS, "end_ns"]
    st = frames.steps
    fast = _step_rows(st, hosts_of(frames, host), steps)
    if fast is not None:
        return st.take(fast)[cols].reset_index(drop=True)
    parts = []
    for h in hosts_of(frames, host):
        rows = st.loc[st[F.HOST] == h, cols] if len(st) else st.reindex(columns=cols).iloc[:0]
        if rows.empty and steps is None:
            rows = _whole_capture(frames, h)
        elif steps is not None:
            rows = rows.loc[rows[F.STEP].isin(list(steps))]
        parts.append(rows)
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values([F.HOST, F.START_NS], kind="stable").reset_index(drop=True)


def _step_rows(steps_table: "pd.DataFrame", hosts: Iterable[str], steps: Sequence[int] | None) -> np.ndarray | None:
    """Positions of ``_step_windows``' rows in the steps table, in its order, when every host has steps.

    The same rows as selecting each host's, joining and sorting them, without a
    frame for each: ``None`` when a host has none (it gets a whole-capture window).
    """
    hosts = list(hosts)
    if not len(steps_table) or len(set(hosts)) != len(hosts):
        return None
    table_hosts = steps_table[F.HOST].to_numpy(object)
    keep = np.zeros(len(steps_table), dtype=bool)
    for h in hosts:
        mine = table_hosts == h
        if steps is None and not mine.any():
            return None
        keep |= mine
    if steps is not None:
        keep &= steps_table[F.STEP].isin(list(steps)).to_numpy()
    rows = np.flatnonzero(keep)
    if not len(rows) or not all(type(h) is str for h in table_hosts[rows]):
        return None
    starts = steps_table[F.START_NS].to_numpy()[rows]
    _labels, host_order = np.unique(table_hosts[rows], return_inverse=True)
    return rows[np.lexsort((starts, host_order.reshape(-1)))]


def _whole_capture(frames: "TraceFrames", host: str) -> "pd.DataFrame":
    import pandas as pd

    ev = frames.events
    ev = ev.loc[ev[F.HOST] == host]
    if ev.empty:
        return pd.DataFrame(columns=[F.HOST, F.STEP, F.START_NS, "end_ns"])
    lo = int(ev[F.START_NS].min())
    hi = int((ev[F.START_NS] + ev[F.DUR_NS]).max())
    return pd.DataFrame({F.HOST: [host], F.STEP: [-1], F.START_NS: [lo], "end_ns": [hi]})


def step_of(starts: np.ndarray, windows: "pd.DataFrame") -> np.ndarray:
    """The step whose window holds each time in ``starts`` (one host's windows), else -1."""
    return StepWindows.of(windows).step_of(starts)


@dataclasses.dataclass(frozen=True)
class StepWindows:
    """One host's step windows as arrays, by start: read from the frame once, for many lookups."""

    starts: np.ndarray
    ends: np.ndarray
    steps: np.ndarray

    @classmethod
    def of(cls, windows: "pd.DataFrame") -> "StepWindows":
        starts = windows[F.START_NS].to_numpy(dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        ends = windows["end_ns"].to_numpy(dtype=np.int64)
        return cls(starts[order], ends[order], windows[F.STEP].to_numpy(dtype=np.int64)[order])

    def step_of(self, times: np.ndarray) -> np.ndarray:
        """The step whose window holds each of ``times``, else -1."""
        times = np.asarray(times, dtype=np.int64)
        if not len(self.starts):
            return np.full(times.shape, -1, dtype=np.int64)
        i = np.searchsorted(self.starts, times, side="right") - 1
        ok = (i >= 0) & (times < self.ends[np.maximum(i, 0)])
        return np.where(ok, self.steps[np.maximum(i, 0)], -1)


def hosts_of(frames: "TraceFrames", host: str | None) -> Iterable[str]:
    """The hosts an analysis covers."""
    if host is not None:
        return [host]
    return list(frames.hosts) or sorted(set(frames.events[F.HOST].unique()))


def steps_and_device_share(
    frames: "TraceFrames", ops: "pd.DataFrame", host: str | None, steps: Sequence[int] | None
) -> tuple[np.ndarray, np.ndarray]:
    """Each op's step (-1 outside the analysed steps), and one over the devices of its host.

    Summing op time times that share gives device time per device: a bill of work, in
    which overlapping ops add up (busy time is ``step_breakdown``'s). Shared within a
    report for the same ``ops`` (the analyses pass ``device_ops``' frame), so read-only.
    """
    key = ("steps_and_device_share", id(ops), host, None if steps is None else tuple(steps))
    held = once(frames, key, lambda: (ops, _steps_and_device_share(frames, ops, host, steps)))
    return held[1] if held[0] is ops else _steps_and_device_share(frames, ops, host, steps)


def _steps_and_device_share(
    frames: "TraceFrames", ops: "pd.DataFrame", host: str | None, steps: Sequence[int] | None
) -> tuple[np.ndarray, np.ndarray]:
    windows = step_windows(frames, host, steps)
    step = np.full(len(ops), -1, dtype=np.int64)
    starts = ops[F.START_NS].to_numpy(dtype=np.int64)
    devices = ops[F.DEVICE].to_numpy()
    n_devices = np.full(len(ops), np.nan)
    for name, rows in row_groups(ops[F.HOST]):
        step[rows] = step_of(starts[rows], windows.loc[windows[F.HOST] == name])
        n_devices[rows] = len(np.unique(devices[rows]))
    return step, 1.0 / np.maximum(n_devices, 1.0)


def executions_of(frames: "TraceFrames") -> "pd.DataFrame":
    """Every execution of the capture (``TraceFrames.executions``, read-only)."""
    assert frames.executions is not None  # made with the frames
    return frames.executions
