"""``TraceFrames``: the columnar form of one capture run, the input of every analysis.

The loader fills it; analyses only read it. Column names are constants here so
that a renamed column is one edit, and so that tests can build frames by hand.

Timestamps are integer nanoseconds on the host's profiler clock: events of one
host (its host plane and its device planes) share a clock; different hosts do not,
so analyses compare intervals within a host only.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from jaxdiag.config import DEFAULT_SETTINGS, Settings

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

# --- events -----------------------------------------------------------------
HOST = "host"  # host name (the xplane.pb file stem)
PLANE = "plane"  # XPlane name, e.g. "/device:GPU:0", "/host:CPU"
DEVICE = "device"  # device ordinal for device planes, -1 for host planes
LINE = "line"  # XLine name, e.g. "Stream #14(Compute)", "XLA Ops", "python3"
LINE_KIND = "line_kind"  # one of LINE_KINDS
NAME = "name"  # event name (kernel, HLO op, annotation, TraceMe)
START_NS = "start_ns"  # int64
DUR_NS = "dur_ns"  # int64
HLO_MODULE = "hlo_module"  # e.g. "jit_train_step", "" when unknown
HLO_OP = "hlo_op"  # e.g. "fusion.12", "" when unknown
FRAMEWORK_OP = "framework_op"  # tf_op / framework name scope, "" when unknown
PROGRAM_ID = "program_id"  # int64 (unsigned ids keep their low 63 bits), -1 when unknown
#: int64 id of one execution of a program (XLA:CPU's ``run_id`` op stat, a GPU kernel's where
#: present), -1 when unknown: the ops of one execution share it.
RUN_ID = "run_id"  # the execution an op belongs to: its XLA:CPU run_id mixed with its program id (host_plane.execution_id), -1 unknown
STEP = "step"  # step number the event starts in, -1 outside every step
CATEGORY = "category"  # one of CATEGORIES

EVENT_COLUMNS = (
    HOST,
    PLANE,
    DEVICE,
    LINE,
    LINE_KIND,
    NAME,
    START_NS,
    DUR_NS,
    HLO_MODULE,
    HLO_OP,
    FRAMEWORK_OP,
    PROGRAM_ID,
    STEP,
    CATEGORY,
    RUN_ID,
)

#: What a line carries. ``compute``/``memcpy``/``collective`` are GPU streams
#: (a mixed stream is ``compute``); ``xla_ops``/``xla_modules``/``steps`` are the
#: TPU lines of those names (a run of host offload copies on an ``XLA Ops`` line
#: is ``memcpy``); ``async_ops`` is a TPU line of async ops from start to done,
#: overlapping the ops that run meanwhile (``Async XLA Ops``); ``sparsecore`` holds
#: the ops of a TPU SparseCore (its plane is ``/device:TPU:N SparseCore M``, its
#: device the TPU core's); ``markers`` is a TPU line of scopes and moments, no ops
#: (``XLA TraceMe``, ``Framework Ops``, ...); ``xla_cpu`` is a host thread running
#: XLA:CPU work; ``host`` is any other host thread; ``python`` is the Python
#: tracer's line.
LINE_KINDS = (
    "compute",
    "memcpy",
    "collective",
    "xla_ops",
    "xla_modules",
    "steps",
    "async_ops",
    "sparsecore",
    "markers",
    "xla_cpu",
    "host",
    "python",
    "other",
)

#: ``device``: work executing on an accelerator, or XLA:CPU executing a program on
#: a CPU-only trace. ``annotation``: user ``TraceAnnotation``/``StepTraceAnnotation``
#: and framework TraceMe spans on the host. ``runtime``: JAX/PjRt/XLA runtime and
#: compiler events on the host. ``python``: Python-tracer frames (kept only when
#: asked for).
CATEGORIES = ("device", "annotation", "runtime", "python")

# --- devices ----------------------------------------------------------------
DEVICE_COLUMNS = (
    HOST,
    PLANE,
    DEVICE,
    "platform",  # "gpu", "tpu", "cpu"
    "device_name",  # e.g. "NVIDIA H100 80GB HBM3"
    "vendor",  # e.g. "Nvidia", "AMD", "Google"
    "core_count",  # SMs / CUs / TensorCores, or NaN
    "clock_hz",  # float or NaN
    "memory_bandwidth_bps",  # bytes per second, or NaN
    "memory_bytes",  # float or NaN
    "peak_flops",  # peak dense flops per second when known, else NaN
)

# --- steps ------------------------------------------------------------------
STEP_COLUMNS = (
    HOST,
    STEP,
    "step_name",  # annotation name ("train") or the module name for fallback steps
    START_NS,
    "end_ns",
)
#: How steps were found: from ``StepTraceAnnotation``s, from TPU "Steps" lines,
#: or by falling back to runs of the dominant jitted module.
STEP_SOURCES = ("annotation", "device_steps", "module", "none")


@dataclasses.dataclass(frozen=True)
class TraceFrames:
    """One capture run, as tables.

    Attributes:
      events: one row per event, columns ``EVENT_COLUMNS``.
      devices: one row per device plane, columns ``DEVICE_COLUMNS``.
      steps: one row per step per host, columns ``STEP_COLUMNS``.
      step_source: one of ``STEP_SOURCES``.
      run_dir: the ``plugins/profile/<run>`` folder (or the file's folder).
      files: the host files read.
      hosts: host names, in file order.
      skipped: ``(file, reason)`` for host files that could not be read.
      meta: facts from the capture (jax/jaxlib versions, profile start/stop, ...).
      notes: what the loader had to guess or drop, shown to the user as findings.
      settings: the settings the capture was read with (``load(settings=...)``): how far
        apart executions told apart by timing alone are (``step_gap_us``, which steps were
        inferred with) and compile-thread work is joined (``compile_join_us``). Every
        table derived from these frames reads them from here, so the frames and what
        is derived from them agree.
      executions: one row per execution of a program, columns ``trace.executions.EXECUTION_COLUMNS``:
        the loader finds them once, for the steps and the analyses; made from ``events`` and
        ``settings`` when not given.
      step_program: the program whose executions are the steps (``trace.executions.step_module``),
        ``""`` without device work: the loader finds it with the steps; made from ``events`` and
        ``executions`` when not given (for steps from executions, the steps' name).
    """

    events: "pd.DataFrame"
    devices: "pd.DataFrame"
    steps: "pd.DataFrame"
    step_source: str
    run_dir: str
    files: tuple[str, ...]
    hosts: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    settings: Settings = DEFAULT_SETTINGS
    executions: "pd.DataFrame | None" = None
    step_program: str | None = None

    def __post_init__(self) -> None:
        if self.executions is None:
            from jaxdiag.trace.executions import executions

            object.__setattr__(self, "executions", executions(self.events, self.settings.step_gap_us))
        if self.step_program is None:
            from jaxdiag.trace.executions import find_step_program

            if self.step_source == "module" and len(self.steps):
                program = str(self.steps["step_name"].iloc[0])
            else:
                program = find_step_program(self.events, self.executions)
            object.__setattr__(self, "step_program", program)
