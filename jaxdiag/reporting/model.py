"""``Report``: the one model every renderer, check and notebook reads.

It round-trips through JSON (``to_dict``/``from_dict``, ``save``/``open``) under a
schema version, so CI checks, diffs and re-rendering never re-parse a trace. The
field names and units are documented in ``docs/report-schema.md``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from jaxdiag.analyses.base import Finding
from jaxdiag.errors import JaxdiagError
from jaxdiag.reporting import codec
from jaxdiag.reporting import sections as registry

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.analyses.collective_section import Collectives
    from jaxdiag.analyses.device_time_section import DeviceTimeSection
    from jaxdiag.analyses.host_wait_section import HostWaits
    from jaxdiag.analyses.recompile_section import RecompileRow
    from jaxdiag.analyses.sharding_section import ShardingSection
    from jaxdiag.analyses.small_op_section import SmallOps
    from jaxdiag.analyses.step_section import StepFigures
    from jaxdiag.analyses.throughput_section import Throughput

    from jaxdiag.trace.frames import TraceFrames

#: Major.minor: a new major breaks readers; a new minor only adds fields.
SCHEMA_VERSION = "1.6"


#: What ``Report.open`` expects, in its messages.
SAVED_REPORT = "a saved report (jaxdiag report --json)"


class ReportFormatError(JaxdiagError):
    """A saved report cannot be read (not JSON, wrong schema, missing keys)."""


#: Keys that are not sections.
_OTHER_KEYS = frozenset({"schema_version", "source", "findings", "notes"})


@dataclasses.dataclass(frozen=True)
class Report:
    """The diagnosis of one capture run.

    Attributes:
      source: where it came from: ``run_dir``, ``files``, ``hosts``, ``devices``,
        ``skipped``, ``step_source``, ``meta``.
      steps: a ``StepFigures`` per step (``step``, ``wall_ms``, ``device_busy_ms``, ...; typed, as ``host_waits``).
      recompiles: a ``RecompileRow`` per compile on the timeline (typed, as ``host_waits``).
      host_waits: a ``HostWaits`` (a typed section: renderers read its attributes; a dict given
        here is read into the type).
      small_ops, collectives, throughput: a ``SmallOps``, a ``Collectives`` and a ``Throughput`` (typed, as
        ``host_waits``).
      findings: every finding, ordered by time lost (largest first).
      notes: what the loader had to guess or skip.
      device_time: device time per module (with its per-step split) and the
        costliest ops (added in schema 1.1; ``{}`` in older reports).
      sharding: a ``ShardingSection``: per jitted function its mesh, input/output specs and the
        collectives the compiler inserted, and the timeline's collectives joined to them (typed, as
        ``host_waits``; added in schema 1.2, empty in older reports).
      sections: every other section of ``reporting.sections.SECTIONS`` (each also
        read as ``report.<name>``): ``timeline``, the events of the steps the timeline
        draws, and ``op_durations``, the op-duration histogram (both added in schema
        1.3); and sections of a newer minor version, kept as they were read.
      frames: the loaded trace, when the report was built in this process (not
        serialized; ``None`` after ``Report.open``).
    """

    source: dict[str, Any]
    steps: tuple[StepFigures, ...]
    recompiles: tuple[RecompileRow, ...]
    host_waits: HostWaits
    small_ops: SmallOps
    collectives: Collectives
    throughput: Throughput
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    device_time: DeviceTimeSection = dataclasses.field(default_factory=lambda: _typed("device_time", {}))
    sharding: ShardingSection = dataclasses.field(default_factory=lambda: _typed("sharding", {}))
    sections: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: str = SCHEMA_VERSION
    frames: "TraceFrames | None" = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # A typed section given as its JSON (a saved report, a test's literal) is read into its type.
        for name in REPORT_FIELDS:
            object.__setattr__(self, name, _typed(name, getattr(self, name)))
        if any(_typed(k, v) is not v for k, v in self.sections.items()):
            object.__setattr__(self, "sections", {k: _typed(k, v) for k, v in self.sections.items()})

    # --- sections -------------------------------------------------------------
    def section(self, name: str) -> Any:
        """The section ``name`` (see ``reporting.sections``); its empty value when the report has none."""
        if name in REPORT_FIELDS:
            return getattr(self, name)
        value = self.sections.get(name)
        if value is None:
            section = registry.named(name)
            if section is None:
                raise KeyError(f"no report section {name!r}")
            return _typed(name, section.empty())
        return value

    def __getattr__(self, name: str) -> Any:
        # Only reached when ``name`` is not a field: sections without a field of their own.
        if not name.startswith("_") and registry.named(name) is not None:
            return self.section(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- serialization ------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (see ``docs/report-schema.md``)."""
        out: dict[str, Any] = {"schema_version": self.schema_version, "source": self.source}
        out.update((s.name, self._json(s)) for s in registry.SECTIONS)
        out.update((k, v) for k, v in self.sections.items() if k not in out)
        out["findings"] = [f.to_dict() for f in self.findings]
        out["notes"] = list(self.notes)
        return out

    def _json(self, section: registry.Section) -> Any:
        value = self.section(section.name)
        return codec.to_json(value) if section.kind is not None else value

    def to_json(self) -> str:
        """The JSON text, indented by two, with each array of numbers on one line (the timeline's are long).

        ``clean`` makes every value one JSON holds, so ``json_text`` is the one writer.
        """
        from jaxdiag.reporting import json_text

        return json_text.dumps(clean(self.to_dict()))

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
        required = ("source", *(s.name for s in registry.SECTIONS if s.since == "1.0"), "findings")
        missing = [k for k in required if k not in d]
        if missing:
            raise ReportFormatError(f"report is missing {', '.join(missing)}")
        try:
            findings = tuple(Finding.from_dict(f) for f in d["findings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ReportFormatError(f"report has a malformed finding: {exc}") from None
        notes = d.get("notes") or []  # null: no notes, as for a section
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise ReportFormatError(f"report notes are {_json_type(notes)}, not a list of text")
        if not isinstance(d["source"], dict):
            raise ReportFormatError(f"report source is {_json_type(d['source'])}, not an object")
        fields = {name: d.get(name) or _empty(name) for name in REPORT_FIELDS}
        sections = {k: v for k, v in d.items() if k not in REPORT_FIELDS and k not in _OTHER_KEYS and v is not None}
        _check_sections({**sections, **fields})
        return cls(
            source=d["source"],
            findings=findings,
            notes=tuple(notes),
            sections=sections,
            schema_version=version,
            **fields,
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def open(cls, path: str | Path) -> "Report":
        """Read a report saved by ``save`` or ``jaxdiag report --json FILE``."""
        from jaxdiag.files import read_json

        p = Path(path)
        data = read_json(p, SAVED_REPORT, ReportFormatError)  # compressed, binary, cut: one line naming the file
        try:
            return cls.from_dict(data)
        except ReportFormatError as exc:
            raise ReportFormatError(f"{p}: {exc}") from None

    # --- tables for notebooks -------------------------------------------------
    def steps_frame(self) -> "pd.DataFrame":
        """Per-step figures as a DataFrame indexed by step."""
        import pandas as pd

        df = pd.DataFrame([codec.to_json(s) for s in self.steps])
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
        if not self.findings:
            return f"<jaxdiag.Report: {n} steps, no findings>"
        # Findings overlap (a compile's wait is also a host wait): their times are not summed.
        top = max(self.findings, key=lambda f: f.time_lost_ms)
        return (
            f"<jaxdiag.Report: {n} steps, {len(self.findings)} findings, "
            f"the costliest {top.kind} ({top.time_lost_ms:.1f} ms lost)>"
        )

    def _repr_html_(self) -> str:
        from jaxdiag.render.html import render_summary_html

        return render_summary_html(self)


#: Sections that are fields of ``Report`` (the others live in ``Report.sections``).
REPORT_FIELDS = tuple(f.name for f in dataclasses.fields(Report) if f.name not in _OTHER_KEYS | {"sections", "frames"})


def _check_sections(values: Mapping[str, Any]) -> None:
    """Raise ``ReportFormatError`` for a section of the wrong type, or one its ``check`` refuses."""
    for section in registry.SECTIONS:
        if section.name not in values:
            continue
        value, kind = values[section.name], type(section.empty())
        if not isinstance(value, kind):
            raise ReportFormatError(f"report section {section.name} is {_json_type(value)}, not {_json_type(kind())}")
        if isinstance(value, list) and not all(isinstance(item, dict) for item in value):
            raise ReportFormatError(f"report section {section.name} holds something other than objects")
        if section.check is not None:
            try:
                registry.resolve(section.check)(value)
            except ValueError as exc:
                raise ReportFormatError(f"report section {section.name} is malformed: {exc}") from None


def _json_type(value: Any) -> str:
    for kind, name in (
        (bool, "a boolean"),
        (dict, "an object"),
        (list, "an array"),
        (str, "a string"),
        ((int, float), "a number"),
    ):
        if isinstance(value, kind):
            return name
    return "null"


def _typed(name: str, value: Any) -> Any:
    """A typed section's JSON read into its type (``value`` itself for any other section, or one already typed)."""
    section = registry.named(name)
    if section is None or section.kind is None or dataclasses.is_dataclass(value):
        return value
    if isinstance(value, tuple) and all(dataclasses.is_dataclass(row) for row in value):  # an array section's rows
        return value
    try:
        return codec.from_json(section.type, value or section.empty(), name)
    except codec.Mismatch as exc:
        raise ReportFormatError(f"not a jaxdiag report: {exc}") from None


def _empty(name: str) -> Any:
    section = registry.named(name)
    return section.empty() if section is not None else {}


#: Types ``clean`` returns as they are, and those it looks at one by one only when a float.
_KEPT = frozenset({str, int, bool, type(None)})
_NUMBERS = frozenset({int, float, bool, type(None)})


def clean(value: Any) -> Any:
    """``value`` as values JSON holds: NaN/inf as ``None`` (JSON has no NaN), numpy scalars and arrays as
    Python numbers and lists, sets and tuples as lists, dataclasses as dicts, dict keys as text, and any
    other object as its ``str``."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # most of a report: nothing to do
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        kinds = set(map(type, value))
        if kinds <= _KEPT:  # a timeline's arrays: thousands of ints, nothing to replace
            return list(value)
        if kinds <= _NUMBERS:
            return [v if type(v) is not float or math.isfinite(v) else None for v in value]
        return [clean(v) for v in value]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [clean(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return clean(dataclasses.asdict(value))
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return clean(value.tolist())  # a numpy scalar or array
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)  # an IntEnum as its number
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    return value if isinstance(value, str) else str(value)


def steps_from(source: dict[str, Any]) -> str:
    """How the steps were found, for a report's header: ``executions of jit_train_step``, ``annotation``."""
    program = source.get("step_program")
    return f"executions of {program}" if program else str(source.get("step_source", "?"))
