"""Build a ``Report`` from a capture: load, find the compile log, run every analysis.

This is the one function the CLI, notebooks and CI checks call; it does no
printing and no rendering.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from jaxdiag.analyses.base import AnalysisInputs, Finding, Severity, graded, report_order, steady_wall_ms
from jaxdiag.config import DEFAULT_THRESHOLDS, Settings, Thresholds
from jaxdiag.processes import collector_paused
from jaxdiag.reporting import sections as registry
from jaxdiag.reporting.model import REPORT_FIELDS, Report
from jaxdiag.trace.versions import capture_versions, untested_jax

#: Compile logs written next to the trace (by ``jaxdiag.configure(log_dir=...)``
#: pointed at the run or the logdir) are joined to the timeline's compiles.
_COMPILE_LOG_GLOB = "compiles*.jsonl"


def report(
    path: str | Path,
    *,
    run: str | None = None,
    host: str | None = None,
    steps: Sequence[int] | None = None,
    tokens_per_step: Mapping[int, float] | float | None = None,
    flops_per_step: float | None = None,
    compile_log: str | Path | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    deep: bool = False,
    scheduler: Any = None,
    settings: Settings | None = None,
) -> Report:
    """Load the capture at ``path`` and diagnose it.

    Args:
      path: a logdir given to ``jax.profiler.start_trace``, a
        ``plugins/profile/<run>`` folder, or one ``.xplane.pb`` file.
      run: the run folder name to read (default: the newest).
      host: report on this host only (default: every host).
      steps: restrict the per-step figures to these step numbers.
      tokens_per_step: tokens (or samples) per step, one number or by step
        (default: what the capture sidecar recorded).
      flops_per_step: model flops per step, for MFU (default: from the sidecar).
      compile_log: a ``jaxdiag.jit`` compile log (file or folder); by default the
        capture sidecar's records and those of any ``compiles*.jsonl`` in the run folder
        or the logdir, each compile once.
      thresholds: analysis tunables (older name of ``settings``).
      deep: also run XProf's converters (``hlo_stats``, ``roofline_model``,
        ``memory_profile``, ``kernel_stats``) and join their FLOPs, bytes and
        memory peaks to the top-ops and memory sections (costs about as much
        as the report itself; see the README).
      scheduler: read the host files on a Dask ``distributed`` cluster: its
        scheduler address (``tcp://HOST:PORT``) or a ``Client`` (see ``trace.load``).
      settings: every threshold and heuristic (``jaxdiag.config.Settings``, see docs/settings.md).

    Raises:
      TraceFormatError: the path holds no readable trace.
      CompileLogError: an explicitly given compile log cannot be read.
    """
    settings = settings if settings is not None else thresholds
    with collector_paused():
        return _report(path, run, host, steps, tokens_per_step, flops_per_step, compile_log, settings, deep, scheduler)


def _report(
    path: str | Path,
    run: str | None,
    host: str | None,
    steps: Sequence[int] | None,
    tokens_per_step: Mapping[int, float] | float | None,
    flops_per_step: float | None,
    compile_log: str | Path | None,
    thresholds: Thresholds,
    deep: bool = False,
    scheduler: Any = None,
) -> Report:
    from jaxdiag.trace.load import start_load

    pending = start_load(path, run=run, host=host, scheduler=scheduler)
    # While a worker may be reading the trace (see ``trace.reading``), import the analyses
    # and read what the capture wrote beside it; a problem there is raised after any
    # problem with the trace itself, as when these steps followed the load.
    _import_analyses()
    problem: Exception | None = None
    try:
        facts, records, log_notes = _beside_trace(pending.run_dir, path, compile_log)
    except Exception as exc:  # noqa: BLE001 - raised below, once the trace has been read
        problem = exc
    frames = pending.result(thresholds)
    if problem is not None:
        raise problem
    count_unit = "tokens"
    if facts is not None:
        if tokens_per_step is None:
            tokens_per_step = facts.tokens_per_step()
            count_unit = facts.count_unit() or count_unit
        flops_per_step = flops_per_step if flops_per_step is not None else facts.flops_per_step()
    inputs = AnalysisInputs(
        frames=frames,
        thresholds=thresholds,
        compile_log=records,
        tokens_per_step=tokens_per_step,
        flops_per_step=flops_per_step,
        host=host,
        steps=list(steps) if steps is not None else None,
        count_unit=count_unit,
        processes=facts.processes if facts is not None else (),
    )
    return build_report(inputs, extra_notes=log_notes, deep=deep)


def build_report(inputs: AnalysisInputs, extra_notes: Sequence[str] = (), deep: bool = False) -> Report:
    """Fill every section of ``reporting.sections.SECTIONS`` from ``inputs`` and collect a ``Report``.

    Analyses run first, in registry order, sharing their intermediate results (see
    ``analyses.shared``); then the views, which read the sections before them. The
    values are what ``Report.open`` would read back from the saved report (NaN as
    ``None``, numpy numbers as Python ones), so a report renders the same before and
    after it is saved.
    """
    from jaxdiag.analyses.shared import scope
    from jaxdiag.reporting.model import clean

    frames = inputs.frames
    sections: dict[str, Any] = {}
    results: dict[str, Any] = {}
    deep_notes: list[str] = []
    with scope(frames):
        for section in registry.SECTIONS:
            if section.view is None:
                value, result = section.run(inputs, sections)
                sections[section.name] = value
                if result is not None:
                    results[section.name] = result
        if deep:
            from jaxdiag.xprof_tools.deep import deepen

            deepened, deep_notes = deepen(results, frames, inputs.host)
            for name, result in deepened.items():
                if result is not results[name]:
                    results[name] = result
                    section = registry.named(name)
                    assert section is not None  # deepen returns the results it was given, some replaced
                    sections[name] = section.value_of(result)
        for section in registry.SECTIONS:  # views read the analyses' sections
            if section.view is not None:
                sections[section.name] = clean(section.run(inputs, sections)[0])
    findings: list[Finding] = [f for r in results.values() for f in r.findings]
    capture = results.get("capture")  # what the trace cannot tell comes first
    capture_notes = tuple(n.text for n in capture.notes) if capture is not None else ()
    notes = capture_notes + tuple(frames.notes) + tuple(extra_notes) + tuple(deep_notes) + _version_notes(frames.meta)
    findings += [
        Finding(kind="loader", severity=Severity.INFO, time_lost_ms=0.0, message=n, suggestion="") for n in notes
    ]
    throughput = sections.get("throughput")
    basis = steady_wall_ms(sections.get("steps") or (), throughput.device_steady_rate() if throughput else None)
    findings = sorted((graded(f, basis, inputs.thresholds) for f in findings), key=report_order)
    from jaxdiag.analyses.finding_places import place_findings

    findings = list(place_findings(findings, frames, sections.get("top_ops"), inputs.host))
    fields = {name: sections.pop(name) for name in list(sections) if name in REPORT_FIELDS}
    return Report(
        source=clean(_source(frames)),
        findings=tuple(Finding.from_dict(clean(f.to_dict())) for f in findings),
        notes=notes,
        sections=sections,
        frames=frames,
        **fields,
    )


def _import_analyses() -> None:
    """Import pandas, every analysis and view, and what they import when they run, now (on two
    cores, beside the trace's worker): after the reading, the report is built by one process."""
    import importlib

    import pandas  # noqa: F401 - the frames and every analysis use it

    for section in registry.SECTIONS:
        if section.analysis is not None:
            importlib.import_module(section.analysis_module)
        if section.view is not None:
            importlib.import_module(section.view.partition(":")[0])
    for module in _IMPORTED_WHEN_RUN:
        importlib.import_module(module)


#: Modules the report imports where they are used, and always uses.
_IMPORTED_WHEN_RUN = (
    "jaxdiag.analyses.finding_places",
    "jaxdiag.analyses.sharding_timeline",
    "numpy.char",  # the timeline's names
    "pandas.core.methods.to_dict",  # ``DataFrame.to_dict``
)


def _source(frames: Any) -> dict[str, Any]:
    devices = []
    for row in frames.devices.to_dict("records"):
        devices.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})
    return {
        "run_dir": str(frames.run_dir),
        "files": [str(f) for f in frames.files],
        "hosts": list(frames.hosts),
        "devices": devices,
        "skipped": [{"file": str(f), "reason": r} for f, r in frames.skipped],
        "step_source": frames.step_source,
        "step_program": _step_program(frames),
        "meta": {k: v for k, v in frames.meta.items() if isinstance(v, (str, int, float, bool))},
        "versions": capture_versions(frames.meta),
    }


def _version_notes(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """A note when the trace's JAX lies outside the tested releases (``trace.versions``)."""
    untested = untested_jax(capture_versions(meta))
    return (untested,) if untested else ()


def _step_program(frames: Any) -> str:
    """The program whose executions are the steps, where no annotation marked them, else ``""``."""
    if frames.step_source != "module" or not len(frames.steps):
        return ""
    return str(frames.steps["step_name"].iloc[0])


def _beside_trace(
    run_dir: str, path: str | Path, compile_log: str | Path | None
) -> tuple[Any, list[dict[str, Any]], list[str]]:
    """The capture sidecar's facts (or ``None``), the compile records, and notes about both."""
    from jaxdiag.capturing.sidecar import record_key

    facts, notes = _sidecar_facts(run_dir)
    records, log_notes = _compile_log(run_dir, path, compile_log)
    if compile_log is None and facts is not None and facts.compile_log:
        # The sidecar's records and the log's, each compile once (the sidecar's copy kept:
        # it says which compiles were made before the window).
        known = {record_key(r) for r in facts.compile_log}
        extra = [r for r in records if record_key(r) not in known]
        records = sorted([*facts.compile_log, *extra], key=lambda r: r.get("time_unix") or 0.0)
    return facts, records, notes + log_notes


def _sidecar_facts(run_dir: str) -> tuple[Any, list[str]]:
    """What the capture wrote beside the trace (``RunFacts`` or ``None``), and notes.

    A corrupt sidecar is skipped with a note: the trace alone still makes a report.
    """
    from jaxdiag.capturing.sidecar import SidecarError, read_sidecars

    try:
        facts = read_sidecars(run_dir)
        return facts, [] if facts is None else [f"captured because: {r}" for r in facts.capture_reasons()]
    except SidecarError as exc:
        return None, [f"capture sidecar skipped: {exc}"]


def _compile_log(run_dir: str, path: str | Path, explicit: str | Path | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Compile records as dicts, and notes about what was found or skipped."""
    from jaxdiag.recording.log_reader import read_compile_log

    if explicit is not None:
        log = read_compile_log(explicit)
        return [r.to_dict() for r in log.records], _skipped_note(log)
    candidates: list[Path] = []
    for folder in _log_folders(Path(run_dir), Path(path)):
        candidates += sorted(folder.glob(_COMPILE_LOG_GLOB))
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    from jaxdiag.errors import CompileLogError

    for candidate in dict.fromkeys(candidates):
        try:
            log = read_compile_log(candidate)
        except CompileLogError as exc:
            notes.append(f"compile log skipped: {exc}")
            continue
        records += [r.to_dict() for r in log.records]
        notes += _skipped_note(log)
    return records, notes


def _log_folders(run_dir: Path, path: Path) -> list[Path]:
    """The run folder, and the logdir above ``plugins/profile/<run>``."""
    folders = [run_dir]
    if run_dir.parent.name == "profile" and run_dir.parent.parent.name == "plugins":
        folders.append(run_dir.parent.parent.parent)
    if path.is_dir():
        folders.append(path)
    return [f for f in dict.fromkeys(folders) if f.is_dir()]


def _skipped_note(log: Any) -> list[str]:
    if not log.skipped_lines:
        return []
    first = log.skipped_lines[0]
    return [
        f"compile log: skipped {len(log.skipped_lines)} unreadable line(s), first {first[0]}:{first[1]} ({first[2]})"
    ]
