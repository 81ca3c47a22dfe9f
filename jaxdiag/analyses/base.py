"""What every analysis shares: its inputs, its ``Finding``s, and its signature.

An analysis is ``analyze(inputs: AnalysisInputs) -> Result`` where ``Result`` is a
frozen dataclass with a ``findings`` tuple and ``section()``, its section of the report
as a typed value (a frozen dataclass whose fields are ``described``: the JSON and the
schema document are made from it, ``reporting.codec``). Analyses print nothing, plot
nothing and touch no files.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

from jaxdiag.config import DEFAULT_THRESHOLDS, Settings, Thresholds

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.step_section import StepFigures
    from jaxdiag.trace.frames import TraceFrames


class Severity(str, enum.Enum):
    """How much a finding matters: by share of wall time lost (see ``severity_for`` and ``graded``)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


def severity_for(time_lost_ms: float, total_ms: float, settings: Settings) -> Severity:
    """Critical from ``severity_critical_share`` of the run's wall time (10%), warning from 2%, else info."""
    if total_ms <= 0:
        return Severity.INFO
    share = time_lost_ms / total_ms
    if share >= settings.severity_critical_share:
        return Severity.CRITICAL
    if share >= settings.severity_warning_share:
        return Severity.WARNING
    return Severity.INFO


def steady_wall_ms(steps: Iterable["StepFigures"], steady_steps_per_s: float | None = None) -> float:
    """The analysed steps' wall time outside compile waits: what the window costs once nothing compiles.

    The total every finding is graded against (``graded``). A compile is paid once, a stall
    every step: against the whole window, two recompiles in a short capture would make a
    stall that costs a third of every steady step read as minor. Where the host ran ahead of
    the device, the steps' host windows are shorter than the device's steps: with
    ``steady_steps_per_s`` measured from device executions, the steps cost at least that
    pace. Falls back to the whole wall time when every step compiled.
    """
    rows = list(steps)
    wall = sum(_finite(s.wall_ms) for s in rows)
    steady = sum(max(0.0, _finite(s.wall_ms) - _finite(s.compile_cost_ms)) for s in rows)
    if steady_steps_per_s and steady_steps_per_s > 0:
        steady = max(steady, len(rows) * 1000.0 / steady_steps_per_s)
    return steady if steady > 0 else wall


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def graded(finding: "Finding", step_time_ms: float, settings: Settings) -> "Finding":
    """``finding`` with the report's severity, by the one rule every report applies.

    A finding that lost time is graded by the share of ``step_time_ms`` (the analysed
    steps' wall time outside compiles, ``steady_wall_ms``) it lost, with
    ``severity_for``: critical from 10%, warning from 2%, else info (settings
    ``severity_critical_share`` and ``severity_warning_share``); a recompile that cost
    more than the steady time itself is critical. Analyses grade against the figure
    they measure; the report grades all against the same total, so a finding that
    lost more is never less severe than one that lost less. A finding that lost no
    measured time (memory near capacity, functions compiled differently across
    hosts: a risk of a crash or a hang, not of time) keeps its analysis's severity.
    """
    if finding.time_lost_ms <= 0 or step_time_ms <= 0:
        return finding
    severity = severity_for(finding.time_lost_ms, step_time_ms, settings)
    return finding if severity is finding.severity else dataclasses.replace(finding, severity=severity)


_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


def report_order(finding: "Finding") -> tuple[int, float, str]:
    """How a report orders its findings: by severity, then by time lost, largest first.

    With every finding ``graded`` against one total, severity rises with time lost,
    so this is time-lost order; a risk that lost no time comes last among its severity.
    """
    return (_SEVERITY_RANK[finding.severity], -finding.time_lost_ms, finding.kind)


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One problem, with what it cost and what to change.

    Attributes:
      kind: stable identifier, e.g. ``"recompile"``, ``"host_wait"``, ``"small_ops"``,
        ``"exposed_collective"``, ``"loader"``.
      severity: how much it matters.
      time_lost_ms: wall time this problem cost over the captured steps.
      message: what happened, with numbers ("train_step recompiled at step 5 ...").
      suggestion: the concrete change to make.
      evidence: machine-readable facts behind the message (steps, names, values).
    """

    kind: str
    severity: Severity
    time_lost_ms: float
    message: str
    suggestion: str
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity.value,
            "time_lost_ms": round(float(self.time_lost_ms), 3),
            "message": self.message,
            "suggestion": self.suggestion,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Finding":
        return cls(
            kind=str(d["kind"]),
            severity=Severity(d["severity"]),
            time_lost_ms=float(d["time_lost_ms"]),
            message=str(d["message"]),
            suggestion=str(d.get("suggestion", "")),
            evidence=dict(d.get("evidence", {})),
        )


@dataclasses.dataclass(frozen=True)
class AnalysisInputs:
    """Everything an analysis may read.

    Attributes:
      frames: the loaded capture.
      thresholds: tunables (small-op threshold, ...).
      compile_log: compile records (as dicts, see ``recording.records``) found beside
        the trace or given by the user; empty when there are none.
      tokens_per_step: tokens (or samples) per step, by step number; a single
        number applies to every step; ``None`` when unknown.
      count_unit: what ``tokens_per_step`` counts, ``"tokens"`` or ``"samples"``,
        so that rates are labelled as the program counted.
      flops_per_step: model flops per step when known (for MFU).
      host: restrict to this host (``None`` = every host).
      steps: restrict to these step numbers (``None`` = every step).
      processes: what each process's capture sidecar says of it (``process_index``,
        ``process_count``, host, versions); empty without sidecars.
    """

    frames: "TraceFrames"
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    compile_log: Sequence[Mapping[str, Any]] = ()
    tokens_per_step: Mapping[int, float] | float | None = None
    flops_per_step: float | None = None
    host: str | None = None
    steps: Sequence[int] | None = None
    count_unit: str = "tokens"
    processes: Sequence[Mapping[str, Any]] = ()

    def tokens_for(self, step: int) -> float | None:
        """Tokens processed by ``step``, or ``None`` when unknown."""
        t = self.tokens_per_step
        if t is None:
            return None
        if isinstance(t, (int, float)):
            return float(t)
        value = t.get(step)
        return None if value is None else float(value)


class AnalysisResult(Protocol):
    """What every analysis returns (and ``section()``: see the module docstring)."""

    findings: tuple[Finding, ...]


def described(
    doc: str = "",
    default: Any = dataclasses.MISSING,
    *,
    since: str | None = None,
    factory: Any = dataclasses.MISSING,
    only_with: str | None = None,
    omit_null: bool = False,
) -> Any:
    """A typed section's field with what it holds, for ``docs/report-schema.md``.

    ``since``: the schema version that added it; ``only_with``: the field whose truth it is written
    with (left out of the JSON otherwise, and read back as its default); ``omit_null``: left out of
    the JSON when ``None``.
    """
    metadata = {
        "doc": doc,
        **({"since": since} if since else {}),
        **({"only_with": only_with} if only_with else {}),
        **({"omit_null": True} if omit_null else {}),
    }
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


class Analysis(Protocol):
    """The one signature every analysis module exports as ``analyze``."""

    def __call__(self, inputs: AnalysisInputs) -> AnalysisResult: ...
