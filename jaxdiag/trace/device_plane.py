"""Read a device plane (``/device:GPU:0``, ``/device:TPU:3``, a TPU's SparseCore) into event columns.

Each line is a stream (GPU) or a kind of op (TPU); its kind (``LINE_KINDS`` in
``frames.py``) says what its events are. Events come from the reader contract
(``contract``), with ``DEVICE_STATS`` read. A device also gets a row of facts
(name, peak flop/s, memory).
"""

from __future__ import annotations

import collections

import math
import re
from array import array
from typing import TYPE_CHECKING, Any, Iterable

from jaxdiag.trace.gpu_specs import gpu_spec
from jaxdiag.trace.columns import HostColumns
from jaxdiag.trace.contract import stat_column
from jaxdiag.trace.host_plane import int_or, program_id_of, unique_labels

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.contract import LineColumns, PlaneColumns

#: The stats ``read_device_plane`` reads of a device event (``correlation_id``: of a GPU kernel, which names
#: the host call that launched it, see ``launch.link_kernels``).
DEVICE_STATS = frozenset(
    {"step_num", "group_id", "hlo_module", "hlo_op", "program_id", "display_name", "name", "tf_op", "correlation_id"}
)

_COLLECTIVE_OPS = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute|"
    r"collective-broadcast|send|recv)(-start|-done)?(\.\d+)?$"
)
#: TPU line kinds by line name (``xplane_schema`` in XLA's profiler names them); see ``tpu_line_kind``.
_TPU_LINES = {
    "XLA Ops": "xla_ops",
    "XLA Modules": "xla_modules",
    "Steps": "steps",
    "Async XLA Ops": "async_ops",
    "Sparse Core Ops": "sparsecore",
    "Sparse Core Modules": "xla_modules",
    "Sparse Core Steps": "markers",
    "XLA TraceMe": "markers",
    "Overlay": "markers",
    "Framework Name Scope": "markers",
    "Framework Ops": "markers",
    "Source code": "markers",
    "Tensor Core Sync Flag": "markers",
    "Sparse Core Syncs": "markers",
    "Launch Stats": "markers",
    "_counters_": "markers",
}
#: Ops XProf counts as host offload copies when their HLO text puts a buffer in host memory, ``S(5)``.
_OFFLOAD_OP = re.compile(r"^(copy|dynamic-slice|dynamic-update-slice)-(start|done)(\.\d+)?$")
_HOST_MEMORY = "S(5)"
_MODULE_RUN = re.compile(r"^(.*)\((\d+)\)$")
NAN = math.nan


def gpu_line_kind(line: str) -> str:
    """``compute``, ``memcpy``, ``collective`` or ``other`` for a GPU stream line name."""
    if not line.startswith("Stream #"):
        return "other"
    lower = line.lower()
    if "nccl" in lower or "rccl" in lower or "collective" in lower:
        return "collective"
    open_at = line.find("(")
    if open_at < 0:
        return "compute"  # ROCm names some streams with no activity list
    kinds = [k.strip() for k in line[open_at + 1 : line.rfind(")")].split(",")]
    if any(k in ("Compute", "Kernel") for k in kinds):
        return "compute"
    if kinds and all(k.startswith(("Memcpy", "Memset")) for k in kinds):
        return "memcpy"
    return "other"


def tpu_line_kind(line: str) -> str:
    """The kind of a TPU plane's line (see ``LINE_KINDS``); ``other`` for a name not known here.

    Only ``xla_ops`` and ``sparsecore`` lines hold ops that occupy a core;
    ``async_ops`` (an async op from its start to its done, XProf's "Host Offload
    Ops rows" too) overlap the ops that run meanwhile, and ``markers`` lines mark
    moments and scopes.
    """
    line = line.strip()
    return _TPU_LINES.get(line) or ("async_ops" if line.startswith("Host Offload Ops") else "other")


def is_host_offload(op: str, text: str) -> bool:
    """Whether a TPU op is a host offload copy: an async copy or slice whose HLO text names host memory."""
    return bool(_OFFLOAD_OP.match(op)) and _HOST_MEMORY in text


def is_collective(name: str, hlo_op: str) -> bool:
    """Whether a device event is a collective, by kernel name or HLO op name."""
    return name[:4].lower() in ("nccl", "rccl") or bool(_COLLECTIVE_OPS.match(hlo_op))


def read_device_plane(
    cols: HostColumns, plane: "PlaneColumns", platform: str, ordinal: int, sparsecore: bool = False
) -> None:
    """Append a device plane's events; a SparseCore plane's go to its TPU core's ordinal, with no device row."""
    if not sparsecore:
        cols.devices.append(device_row(cols.host, plane.name, platform, ordinal, scalar_stats(plane.stats.items())))
    modules: list[tuple[float, float, str, int]] = []
    op_ranges: list[tuple[int, int]] = []
    tpu = _Gathered()  # a TPU plane's events, gathered one at a time: ops get their modules by position
    for line_name, line in zip(unique_labels(line.name for line in plane.lines), plane.lines):
        kind = tpu_line_kind(line.name) if platform == "tpu" else gpu_line_kind(line.name)
        offload = False  # whether the open segment holds host offload copies (a "memcpy" run of an ops line)
        kernels = collectives = 0
        if platform != "tpu":  # a GPU line: the loop below, a column at a time
            segment = len(cols)
            kernels, collectives = _add_gpu_events(cols, ordinal, line)
            if kind == "compute" and kernels and collectives == kernels:
                kind = "collective"
            cols.close_segment(plane.name, line_name, kind, segment)
            continue
        first = segment = len(tpu)
        columns = [stat_column(line.stats, key, len(line.names)) for key in _TPU_STATS]
        for name, start, dur, step_num, group_id, hlo_module, hlo_op, program_id, display, label, tf_op in zip(
            line.names, line.starts, line.durs, *columns
        ):
            if kind == "steps":
                if not sparsecore:
                    # XProf keys device steps by group_id; the name is the step number on the captures seen.
                    given = step_num if step_num is not None else name if name.isdigit() else group_id
                    step = int_or(given, len(cols.device_steps))
                    cols.device_steps.append((ordinal, step, start, start + dur))
                tpu.add(ordinal, name, start, dur, category="annotation")
                continue
            module, op = _text(hlo_module), _text(hlo_op)
            program = program_id_of(program_id)
            if kind == "xla_modules":
                run = _MODULE_RUN.match(name)
                module, program = (run[1], program_id_of(run[2])) if run else (name, program)
                modules.append((start, start + dur, module, program))
            elif kind in ("xla_ops", "sparsecore", "async_ops"):  # TPU op names can be whole HLO instruction text
                text = name
                name = _short_hlo_name(_text(display) or name)
                op = op or name
                if kind != "async_ops" and is_host_offload(name, text) != offload:
                    tpu.close_segment(plane.name, line_name, "memcpy" if offload else kind, segment)
                    segment, offload = len(tpu), not offload
            framework = str(label or tf_op or "")
            if framework.startswith("XlaModule:"):
                framework = ""
            if not name.startswith(("Memcpy", "Memset")):
                kernels += 1
                collectives += is_collective(name, op)
            tpu.add(ordinal, name, start, dur, module, op, framework, program)
        if kind == "compute" and kernels and collectives == kernels:
            kind = "collective"
        if kind in ("xla_ops", "sparsecore"):
            op_ranges.append((first, len(tpu)))
        tpu.close_segment(plane.name, line_name, "memcpy" if offload else kind, segment)
    if modules and op_ranges:
        _assign_modules(tpu, modules, op_ranges)
    tpu.flush_into(cols)


class _Gathered:
    """A TPU plane's events, gathered one at a time (``add``), with their
    segments, then handed to the host's columns at once (``flush_into``)."""

    def __init__(self) -> None:
        self.device: list[int] = []
        self.name: list[str] = []
        self.start: list[float] = []
        self.dur: list[float] = []
        self.module: list[str] = []
        self.op: list[str] = []
        self.framework: list[str] = []
        self.program: list[int] = []
        self.category: list[str] = []
        self.segments: list[tuple[str, str, str, int]] = []

    def __len__(self) -> int:
        return len(self.name)

    def add(
        self,
        device: int,
        name: str,
        start: float,
        dur: float,
        module: str = "",
        op: str = "",
        framework: str = "",
        program: int = -1,
        category: str = "device",
    ) -> None:
        self.device.append(device)
        self.name.append(name)
        self.start.append(start)
        self.dur.append(dur)
        self.module.append(module)
        self.op.append(op)
        self.framework.append(framework)
        self.program.append(program)
        self.category.append(category)

    def close_segment(self, plane: str, line: str, kind: str, first: int) -> None:
        """As ``HostColumns.close_segment``."""
        if len(self.name) > first:
            self.segments.append((plane, line, kind, len(self.name) - first))

    def flush_into(self, cols: HostColumns) -> None:
        cols.add_events(
            self.name,
            self.start,
            self.dur,
            self.category,
            devices=self.device,
            modules=self.module,
            ops=self.op,
            frameworks=self.framework,
            programs=self.program,
        )
        cols.segments += self.segments


def _add_gpu_events(cols: HostColumns, ordinal: int, line: "LineColumns") -> tuple[int, int]:
    """A GPU line's events, a column at a time; its kernels and collectives.

    A GPU line holds thousands of kernels of a few hundred names: each column is
    one pass, and whether a kernel is a collective is asked once per name and op.
    """
    import numpy as np

    stats, count = line.stats, len(line.names)
    ops = _texts(stat_column(stats, "hlo_op", count))
    known: dict[Any, int] = {}  # program id by stat value (a NaN is never found, and asked again)
    programs = np.array(
        [
            known[v] if v in known else known.setdefault(v, program_id_of(v))
            for v in stat_column(stats, "program_id", count)
        ],
        dtype=np.int64,
    )  # numbers in numpy once: the host's columns read them twice (``link_kernels``, the events table)
    labels = zip(stat_column(stats, "name", count), stat_column(stats, "tf_op", count))
    frameworks = [a if type(a) is str and a else b if type(b) is str and b else str(a or b or "") for a, b in labels]
    frameworks = ["" if f.startswith("XlaModule:") else f for f in frameworks]
    kernels, collectives = _kernels_and_collectives(line.names, ops)
    cols.add_events(
        line.names,
        line.starts,
        line.durs,
        "device",
        devices=array("q", [ordinal]) * len(line.names),
        modules=_texts(stat_column(stats, "hlo_module", count)),
        ops=ops,
        frameworks=frameworks,
        programs=programs,
        correlations=_correlations(stat_column(stats, "correlation_id", count)),
    )
    return kernels, collectives


def _kernels_and_collectives(names: list[str], ops: list[str]) -> tuple[int, int]:
    """How many of a line's events are kernels (not ``Memcpy``/``Memset``), and how many of those collectives
    (``is_collective``), each name and each op looked at once."""
    by_name = collections.Counter(names)
    kernels = {name for name in by_name if not name.startswith(("Memcpy", "Memset"))}
    named = {name for name in kernels if is_collective(name, "")}
    collective_ops = {op for op in set(ops) if is_collective("", op)}
    collectives = sum(by_name[name] for name in named)
    if collective_ops:  # kernels named otherwise that run a collective op
        others = kernels - named
        collectives += sum(1 for name, op in zip(names, ops) if op in collective_ops and name in others)
    return sum(by_name[name] for name in kernels), collectives


def _texts(column: list[Any]) -> list[str]:
    """``_text`` of each value (most are text already, or none)."""
    return ["" if v is None else v if type(v) is str else str(v) for v in column]


def _correlations(column: list[Any]) -> Any:
    """Each kernel's ``correlation_id``, -1 where it has none (or not a number)."""
    import numpy as np

    values = [-1 if v is None else v for v in column]
    if not set(map(type, values)) <= {int}:
        values = [int_or(v, -1) for v in values]
    return np.array(values, dtype=np.int64)  # OverflowError past int64, as the reader's other numbers


#: The stats of a TPU line's events that ``read_device_plane`` reads, in the order it unpacks them.
_TPU_STATS = ("step_num", "group_id", "hlo_module", "hlo_op", "program_id", "display_name", "name", "tf_op")


def _text(value: Any) -> str:
    """A stat as text: ``""`` for none."""
    return "" if value is None else str(value)


def _assign_modules(
    tpu: _Gathered, modules: list[tuple[float, float, str, int]], op_ranges: list[tuple[int, int]]
) -> None:
    """Give TPU ops the module whose run (on the "XLA Modules" line) contains them."""
    import bisect

    modules.sort()
    starts = [m[0] for m in modules]
    for lo, hi in op_ranges:
        for i in range(lo, hi):
            if tpu.module[i]:
                continue
            at = bisect.bisect_right(starts, tpu.start[i]) - 1
            if at >= 0 and tpu.start[i] < modules[at][1]:
                tpu.module[i] = modules[at][2]
                if tpu.program[i] < 0:
                    tpu.program[i] = modules[at][3]


def _short_hlo_name(text: str) -> str:
    """``fusion.3`` from ``%fusion.3 = bf16[8]{0} fusion(...)`` (or ``ROOT %fusion.3 = ...``); others unchanged."""
    head = text.split(" = ", 1)[0] if " = " in text else text
    head = head.strip()
    if head.startswith("ROOT "):
        head = head[5:]
    return head.lstrip("%").strip()


def device_row(host: str, plane: str, platform: str, ordinal: int, stats: dict[str, Any]) -> dict[str, Any]:
    name = str(
        stats.get("gpu_device_name")
        or stats.get("device_type_string")
        or stats.get("device_name")
        or _unnamed_device(platform, stats)
    )
    peak = _float(stats.get("peak_teraflops_per_second")) * 1e12
    if math.isnan(peak) and platform == "gpu":
        datasheet = gpu_spec(name)[1]
        peak = NAN if datasheet is None else datasheet
    bandwidth = _float(stats.get("memory_bandwidth"))
    if math.isnan(bandwidth):
        bandwidth = _float(stats.get("peak_hbm_bw_gigabytes_per_second")) * 1e9
    return {
        "host": host,
        "plane": plane,
        "device": ordinal,
        "platform": platform,
        "device_name": name,
        "vendor": str(stats.get("device_vendor") or ("Google" if platform == "tpu" else "")),
        "core_count": _float(stats.get("core_count")),
        "clock_hz": _float(stats.get("clock_rate")) * 1e3,  # XLA reports kHz
        "memory_bandwidth_bps": bandwidth,
        "memory_bytes": _float(stats.get("memory_size")),
        "peak_flops": peak,
    }


def _unnamed_device(platform: str, stats: dict[str, Any]) -> str:
    """What a device plane with no name says of itself (ROCm writes no name): ``AMD GPU (gfx 9.4)``, or the platform."""
    vendor = str(stats.get("device_vendor") or "")
    if not vendor:
        return platform
    major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor")
    arch = f" (gfx {major}.{minor})" if vendor == "AMD" and isinstance(major, int) and isinstance(minor, int) else ""
    return f"{vendor} {platform.upper()}{arch}"


def scalar_stats(stats: Iterable[tuple[Any, Any]]) -> dict[str, Any]:
    """Named stats whose values are numbers or printable text (drops embedded protos)."""
    out: dict[str, Any] = {}
    for key, value in stats:
        if key is None or isinstance(value, bytes):
            continue
        if isinstance(value, str) and not value.isprintable():
            continue
        out[key] = value
    return out


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return NAN
