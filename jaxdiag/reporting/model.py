"""``Report``: the one model every renderer, check and notebook reads.

It round-trips through JSON (``to_dict``/``from_dict``, ``save``/``open``) under a
schema version, so CI checks, diffs and re-rendering never re-parse a trace. The
field names and units are documented in ``docs/report-schema.md``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxdiag.analyses.base import Finding
from jaxdiag.errors import JaxdiagError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.trace.frames import TraceFrames

#: Major.minor: a new major breaks readers; a new minor only adds fields.
SCHEMA_VERSION = "1.3"


class ReportFormatError(JaxdiagError):
    """A saved report cannot be read (not JSON, wrong schema, missing keys)."""


_SECTIONS = ("steps", "recompiles", "host_waits", "small_ops", "collectives", "throughput")


@dataclasses.dataclass(frozen=True)
class Report:
    """The diagnosis of one capture run.

    Attributes:
      source: where it came from: ``run_dir``, ``files``, ``hosts``, ``devices``,
        ``skipped``, ``step_source``, ``meta``.
      steps: one dict per step (``step``, ``wall_ms``, ``device_busy_ms``, ...).
      recompiles: one dict per compile on the timeline (``function``, ``step``,
        ``compile_ms``, ``cause``).
      host_waits, small_ops, collectives, throughput: each analysis's section.
      findings: every finding, ordered by time lost (largest first).
      notes: what the loader had to guess or skip.
      device_time: device time per module (with its per-step split) and the
        costliest ops (added in schema 1.1; ``{}`` in older reports).
      sharding: per jitted function its mesh, input/output specs and the collectives
        the compiler inserted, and the timeline's collectives joined to them
        (added in schema 1.2; ``{}`` in older reports).
      stragglers: with several hosts, the host x step table, how the host clocks were
        aligned and the hosts the others waited for (added in schema 1.3; ``{}`` with
        one host and in older reports).
      divergence: with several processes' compile records, the functions that compiled
        differently on different processes (added in schema 1.3; ``{}`` otherwise).
      frames: the loaded trace, when the report was built in this process (not
        serialized; ``None`` after ``Report.open``).
    """

    source: dict[str, Any]
    steps: list[dict[str, Any]]
    recompiles: list[dict[str, Any]]
    host_waits: dict[str, Any]
    small_ops: dict[str, Any]
    collectives: dict[str, Any]
    throughput: dict[str, Any]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    device_time: dict[str, Any] = dataclasses.field(default_factory=dict)
    sharding: dict[str, Any] = dataclasses.field(default_factory=dict)
    stragglers: dict[str, Any] = dataclasses.field(default_factory=dict)
    divergence: dict[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: str = SCHEMA_VERSION
    frames: "TraceFrames | None" = dataclasses.field(default=None, compare=False, repr=False)

    # --- serialization ------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (see ``docs/report-schema.md``)."""
        return {
            "schema_version": self.schema_version,
            "source": self.source,
            "steps": self.steps,
            "recompiles": self.recompiles,
            "host_waits": self.host_waits,
            "small_ops": self.small_ops,
            "collectives": self.collectives,
            "throughput": self.throughput,
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
            "device_time": self.device_time,
            "sharding": self.sharding,
            "stragglers": self.stragglers,
            "divergence": self.divergence,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(_clean(self.to_dict()), indent=indent, default=_json_default, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Report":
        """Rebuild a report; raises ``ReportFormatError`` on a wrong schema or missing key."""
        if not isinstance(d, dict):
            raise ReportFormatError("a report must be a JSON object")
        version = str(d.get("schema_version", ""))
        if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise ReportFormatError(
                f"report schema version {version or 'missing'} is not supported "
                f"(this jaxdiag reads {SCHEMA_VERSION.split('.')[0]}.x); re-run `jaxdiag report`"
            )
        missing = [k for k in ("source", *_SECTIONS, "findings") if k not in d]
        if missing:
            raise ReportFormatError(f"report is missing {', '.join(missing)}")
        try:
            findings = tuple(Finding.from_dict(f) for f in d["findings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ReportFormatError(f"report has a malformed finding: {exc}") from None
        return cls(
            source=d["source"], steps=d["steps"], recompiles=d["recompiles"],
            host_waits=d["host_waits"], small_ops=d["small_ops"],
            collectives=d["collectives"], throughput=d["throughput"],
            findings=findings, notes=tuple(d.get("notes", ())), device_time=d.get("device_time") or {},
            sharding=d.get("sharding") or {},
            stragglers=d.get("stragglers") or {}, divergence=d.get("divergence") or {},
            schema_version=version,
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def open(cls, path: str | Path) -> "Report":
        """Read a report saved by ``save`` or ``jaxdiag report --json FILE``."""
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise ReportFormatError(f"{p}: cannot read report ({exc.strerror or exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ReportFormatError(f"{p}: not a JSON report ({exc.msg} at line {exc.lineno})") from None
        try:
            return cls.from_dict(data)
        except ReportFormatError as exc:
            raise ReportFormatError(f"{p}: {exc}") from None

    # --- tables for notebooks -------------------------------------------------
    def steps_frame(self) -> "pd.DataFrame":
        """Per-step figures as a DataFrame indexed by step."""
        import pandas as pd

        df = pd.DataFrame(self.steps)
        return df.set_index("step") if "step" in df else df

    def findings_frame(self) -> "pd.DataFrame":
        """Findings as a DataFrame, largest time lost first."""
        import pandas as pd

        cols = ["kind", "severity", "time_lost_ms", "message", "suggestion"]
        return pd.DataFrame([{c: f.to_dict()[c] for c in cols} for f in self.findings], columns=cols)

    def events_frame(self) -> "pd.DataFrame":
        """Every loaded event (only for reports built in this process)."""
        if self.frames is None:
            raise JaxdiagError("this report was read from JSON; its events are not available")
        return self.frames.events

    def dashboard(self, **selection: Any) -> Any:
        """The interactive Jupyter dashboard (figures, findings, step/host/device pickers)."""
        from jaxdiag.render.notebook import dashboard

        return dashboard(self, **selection)

    def __repr__(self) -> str:
        n = len(self.steps)
        lost = sum(f.time_lost_ms for f in self.findings)
        return f"<jaxdiag.Report: {n} steps, {len(self.findings)} findings, {lost:.1f} ms lost>"

    def _repr_html_(self) -> str:
        from jaxdiag.render.html import render_summary_html

        return render_summary_html(self)


def _clean(value: Any) -> Any:
    """Replace NaN/inf with ``None`` (JSON has no NaN) and numpy scalars with Python ones."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            return value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _json_default(value: Any) -> Any:
    """Make numpy scalars and other stragglers JSON-safe."""
    for attr in ("item", "tolist"):
        if hasattr(value, attr):
            return getattr(value, attr)()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)
