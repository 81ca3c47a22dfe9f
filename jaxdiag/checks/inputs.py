"""Open what a check or diff is given: a saved report JSON, or a capture to report on.

CI can run ``jaxdiag report --json`` once and check or diff the saved report many
times; a trace folder is reported on the spot (``jaxdiag.report``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxdiag.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.reporting.model import Report


def is_report_file(path: str | Path) -> bool:
    """Whether ``path`` is a file holding a JSON object (a saved report), not a trace."""
    from jaxdiag.trace.discover import JSON_SUFFIX, XPLANE_SUFFIX

    p = Path(path)
    if not p.is_file() or p.name.endswith((XPLANE_SUFFIX, JSON_SUFFIX)):  # a trace, whatever it holds
        return False
    if p.suffix.lower() == ".json":
        return True
    try:
        with p.open("rb") as f:
            return f.read(64).lstrip()[:1] == b"{"
    except OSError:
        return False


def open_report(path: str | Path, **report_options: Any) -> "Report":
    """The report saved at ``path``, or a fresh one of the capture at ``path``.

    Args:
      path: a report JSON (``jaxdiag report --json``), a logdir, run folder or ``.xplane.pb``.
      **report_options: passed to ``jaxdiag.report`` for a capture (``tokens_per_step``, ...);
        options left ``None`` are dropped.

    Raises:
      ReportFormatError: a report file that cannot be read.
      TraceFormatError: a path that holds no readable trace.
      ConfigError: capture options given with a saved report, which they cannot change.
    """
    options = {k: v for k, v in report_options.items() if v is not None}
    if is_report_file(path):
        options.pop("settings", None)  # the command's settings from pyproject.toml: nothing to analyse
        if options:
            names = ", ".join("--" + k.replace("_", "-") for k in options)
            raise ConfigError(f"{path} is a saved report; {names} only apply to a trace folder")
        return read_report(path)
    from jaxdiag.reporting.build import report

    return report(path, **options)


_STEP: dict[str, Any] = {"step": int}
#: The containers of a saved report that readers walk: ``{}`` an object (its keys as given), ``[X]`` a list
#: of X, ``[]`` a list of anything, ``int`` a whole number (step numbers are keys). A key may be absent or
#: null below the top level.
_SHAPE: dict[str, Any] = {
    "source": {"devices": [{}], "files": [], "hosts": []},
    "steps": [_STEP],
    "findings": [{"evidence": {}}],
    "notes": [],
}
_REQUIRED = ("source", "steps", "recompiles", "host_waits", "small_ops", "collectives", "throughput", "findings")


def malformed_part(data: dict[str, Any]) -> str | None:
    """Where a saved report's containers are not what readers walk (``steps[3]: a string, not an object``)."""
    for key, shape in _SHAPE.items():
        if key not in data or (data[key] is None and key not in _REQUIRED):
            continue
        problem = _mismatch(data[key], shape, key)
        if problem is not None:
            return problem
    return None


def _mismatch(value: Any, shape: Any, where: str) -> str | None:
    if shape is int:
        return (
            None
            if isinstance(value, int) and not isinstance(value, bool)
            else f"{where}: {_json_kind(value)}, not a whole number"
        )
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where}: {_json_kind(value)}, not an object"
        for key, inner in shape.items():
            if value.get(key) is not None:
                problem = _mismatch(value[key], inner, f"{where}.{key}")
                if problem is not None:
                    return problem
        return None
    if not isinstance(value, list):
        return f"{where}: {_json_kind(value)}, not a list"
    if shape:
        for i, item in enumerate(value):
            problem = _mismatch(item, shape[0], f"{where}[{i}]")
            if problem is not None:
                return problem
    return None


def read_report(path: str | Path) -> "Report":
    """The report saved at ``path``, its top-level shape checked so later figures can be read.

    Raises:
      ReportFormatError: one line naming the file and the problem (not text, not JSON,
        another schema, a section of the wrong kind).
    """
    from jaxdiag.files import read_json
    from jaxdiag.reporting.model import SAVED_REPORT, SCHEMA_VERSION, Report, ReportFormatError

    p = Path(path)
    data = read_json(p, SAVED_REPORT, ReportFormatError)
    major = SCHEMA_VERSION.split(".")[0]
    if isinstance(data, dict) and str(data.get("schema_version", "")).split(".")[0] == major:
        problem = malformed_part(data)
        if problem is not None:
            raise ReportFormatError(f"{p}: not a jaxdiag report: {problem}")
    try:
        return Report.from_dict(data)
    except ReportFormatError as exc:
        raise ReportFormatError(f"{p}: {exc}") from None


def _json_kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}
    return names.get(type(value), "a number")
