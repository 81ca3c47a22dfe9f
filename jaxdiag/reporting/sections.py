"""Every section of a ``Report``, in one place: its name, the schema version that added it, and what fills it.

A new analysis is one module plus one line here::

    Section("top_ops", "1.4", dict, analysis="top_ops", kind="top_op_section:TopOpsSection"),

where ``jaxdiag/analyses/top_ops.py`` defines ``analyze(inputs)`` returning a frozen
result with ``findings`` and ``section()``, the section as a ``TopOpsSection`` (a frozen
dataclass of ``described`` fields, in a module of its own that imports nothing heavy, so
that a saved report renders without loading the analyses: its JSON, its reading back and
its row of the schema document are made from it, ``reporting.codec``), and ``"1.4"`` is the schema version that
adds it (``model.SCHEMA_VERSION`` is raised to match). Then a row for it in
``docs/report-schema.md``, in the order of this list, and ``1.4 added `top_ops```
in the ``schema_version`` row: ``tests/reporting/test_sections.py`` checks the
document against this list, and this list against ``analyses.ANALYSES``. The
report builds, saves, reads back and renders every section listed; a section with
no field of its own on ``Report`` is read as ``report.top_ops`` (or
``report.section("top_ops")``), and a report saved before it reads it as empty.

Renderers are named as ``"module:function"`` and imported only when used, so
importing the model imports no renderer:

- ``terminal``: ``fn(report, console)`` prints the section with rich;
- ``html``: ``fn(report) -> str``, the section's table for the HTML report;
- ``figures``: names of ``render.figures`` builders ``fn(report) -> Figure``.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.base import AnalysisInputs, AnalysisResult


@dataclasses.dataclass(frozen=True)
class Section:
    """One section of the report.

    Attributes:
      name: the key in the JSON report and the attribute on ``Report``.
      since: the schema version that added it (reports saved before read it as ``empty()``).
      empty: its JSON value when absent (``list`` or ``dict``).
      analysis: the module in ``jaxdiag.analyses`` (or a full dotted module name) whose ``analyze(inputs)`` fills it
        (``value_of`` its result is the section, its ``findings`` join the report's).
      view: ``"module:function"`` filling it instead, from the trace and the sections
        before it, ``fn(inputs, sections) -> value``: data kept for renderers only
        (events of a few steps, histogram bins), with no findings.
      kind: ``"module:Class"`` (a name in ``jaxdiag.analyses``, or a full dotted one) of the section's type,
        the value the report holds (for an array section, the type of its rows, held as a tuple); every
        analysis's section has one. ``None`` for a view, held as its JSON.
      check: ``"module:function"`` raising ``ValueError`` on a section a saved report
        cannot hold (read by ``Report.open``, so that a renderer never meets it), or ``None``.
    """

    name: str
    since: str
    empty: Callable[[], Any]
    analysis: str | None = None
    view: str | None = None
    kind: str | None = None
    check: str | None = None

    @property
    def analysis_module(self) -> str:
        """The analysis's module: a name in ``jaxdiag.analyses``, or a full dotted name."""
        assert self.analysis is not None
        return self.analysis if "." in self.analysis else f"jaxdiag.analyses.{self.analysis}"

    @property
    def type(self) -> Any:
        """The section's type (``kind``; ``tuple[kind, ...]`` for an array section), or ``None`` for one held as JSON."""
        if self.kind is None:
            return None
        kind = resolve(self.kind if "." in self.kind.partition(":")[0] else f"jaxdiag.analyses.{self.kind}")
        return tuple[kind, ...] if self.empty is list else kind  # type: ignore[valid-type]

    def value_of(self, result: Any) -> Any:
        """The section from its analysis's result: its typed value (``section()``)."""
        return result.section()

    def run(self, inputs: "AnalysisInputs", sections: Mapping[str, Any]) -> "tuple[Any, AnalysisResult | None]":
        """This section's value for ``inputs``, and the analysis result behind it (``None`` for a view)."""
        if self.analysis is not None:
            result: Any = importlib.import_module(self.analysis_module).analyze(inputs)
            return self.value_of(result), result
        if self.view is not None:
            return resolve(self.view)(inputs, sections), None
        return self.empty(), None


#: Every section, in the order the JSON report, the terminal and the HTML report show them.
SECTIONS: tuple[Section, ...] = (
    Section(
        "capture", "1.4", dict, analysis="completeness", kind="capture_section:CaptureSection"
    ),  # printed first, as notes (``build``)
    Section("steps", "1.0", list, analysis="step_breakdown", kind="step_section:StepFigures"),
    Section("between_steps", "1.4", dict, analysis="between_steps", kind="between_step_section:BetweenStepsSection"),
    Section(
        "timeline",
        "1.3",
        dict,
        view="jaxdiag.reporting.timeline_events:build",
        check="jaxdiag.reporting.timeline_events:check",
    ),
    Section("recompiles", "1.0", list, analysis="recompiles", kind="recompile_section:RecompileRow"),
    Section("host_waits", "1.0", dict, analysis="host_waits", kind="host_wait_section:HostWaits"),
    Section("throughput", "1.0", dict, analysis="throughput", kind="throughput_section:Throughput"),
    Section("small_ops", "1.0", dict, analysis="small_ops", kind="small_op_section:SmallOps"),
    Section(
        "op_durations",
        "1.3",
        dict,
        view="jaxdiag.reporting.op_durations:build",
        check="jaxdiag.reporting.op_durations:check",
    ),
    Section("collectives", "1.0", dict, analysis="collectives", kind="collective_section:Collectives"),
    Section("device_time", "1.1", dict, analysis="device_time", kind="device_time_section:DeviceTimeSection"),
    Section("sharding", "1.2", dict, analysis="sharding", kind="sharding_section:ShardingSection"),
    Section("top_ops", "1.3", dict, analysis="top_ops", kind="top_op_section:TopOpsSection"),
    Section("memory", "1.3", dict, analysis="memory", kind="memory_section:MemorySection"),
    Section("stragglers", "1.3", dict, analysis="stragglers", kind="straggler_section:StragglersSection"),
    Section("divergence", "1.3", dict, analysis="divergence", kind="divergence_section:DivergenceSection"),
)


def named(name: str) -> Section | None:
    """The section called ``name``, or ``None``."""
    return next((s for s in SECTIONS if s.name == name), None)


def resolve(ref: str) -> Any:
    """The object named by ``"module:attribute"``."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
