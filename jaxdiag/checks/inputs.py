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
    p = Path(path)
    if not p.is_file():
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
        if options:
            names = ", ".join("--" + k.replace("_", "-") for k in options)
            raise ConfigError(f"{path} is a saved report; {names} only apply to a trace folder")
        return read_report(path)
    from jaxdiag.reporting.build import report

    return report(path, **options)


#: Top-level keys of a saved report and the JSON type each must have.
_SHAPES: dict[str, type] = {
    "source": dict, "steps": list, "recompiles": list, "host_waits": dict, "small_ops": dict,
    "collectives": dict, "throughput": dict, "findings": list,
}
_OPTIONAL_SHAPES: dict[str, type] = {"device_time": dict, "sharding": dict, "notes": list}


def read_report(path: str | Path) -> "Report":
    """The report saved at ``path``, its top-level shape checked so later figures can be read.

    Raises:
      ReportFormatError: one line naming the file and the problem (not text, not JSON,
        another schema, a section of the wrong kind).
    """
    from jaxdiag.files import read_json
    from jaxdiag.reporting.model import Report, ReportFormatError

    p = Path(path)
    data = read_json(p, "a saved jaxdiag report (JSON)", ReportFormatError)
    if isinstance(data, dict):
        wrong = [f"{key} ({_json_kind(data[key])}, not {_JSON_NAMES[kind]})"
                 for key, kind in (*_SHAPES.items(), *_OPTIONAL_SHAPES.items())
                 if key in data and not (isinstance(data[key], kind) or (key in _OPTIONAL_SHAPES and data[key] is None))]
        rows = [key for key in ("steps", "recompiles") if isinstance(data.get(key), list)
                and not all(isinstance(row, dict) for row in data[key])]
        if wrong or rows:
            listed = ", ".join([*wrong, *(f"{k} (a row that is not an object)" for k in rows)])
            raise ReportFormatError(f"{p}: not a jaxdiag report: malformed {listed}")
    try:
        return Report.from_dict(data)
    except ReportFormatError as exc:
        raise ReportFormatError(f"{p}: {exc}") from None


_JSON_NAMES = {dict: "an object", list: "a list"}


def _json_kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}
    return names.get(type(value), "a number")
