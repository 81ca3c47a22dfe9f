"""``Settings``: every threshold and heuristic in one frozen object; environment read in one place.

Each setting has a default, a unit and a meaning (field metadata), listed in one
table in ``docs/settings.md`` (a test keeps the two equal). Later sources win:
the defaults, the ``[tool.jaxdiag]`` table of the nearest ``pyproject.toml``
(``[tool.jaxdiag.check]`` for the checks), ``--set NAME=VALUE`` and a command's
own flags, or ``jaxdiag.report(..., settings=Settings(...))`` from Python.

Settings travel only as arguments: an analysis reads ``AnalysisInputs.thresholds``, the
trace's reading (step inference, compile spans) ``TraceFrames.settings``, given to ``load``.

Settings, their table and their parsing from TOML, flags and the environment are one vocabulary kept
in one place, which is why the module runs past 400 lines.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

from jaxdiag.errors import ConfigError, JaxdiagWarning

#: Environment variable naming the folder of the JSONL compile log.
ENV_LOG_DIR = "JAXDIAG_LOG_DIR"
#: Environment variable that turns on the (costly) cost and memory analysis.
ENV_ANALYSIS = "JAXDIAG_COMPILE_ANALYSIS"
#: The pyproject table of analysis settings; its ``check`` sub-table holds the check thresholds.
TABLE = ("tool", "jaxdiag")
_OFF = frozenset({"off", "none", "false", "no", "disabled"})


def _setting(default: Any, unit: str, doc: str, kind: str) -> Any:
    return dataclasses.field(default=default, metadata={"unit": unit, "doc": doc, "kind": kind})


@dataclasses.dataclass(frozen=True, slots=True)
class CheckThresholds:
    """What ``jaxdiag check`` allows; ``None`` turns a check off. See ``docs/settings.md``."""

    max_steady_recompiles: int | None = _setting(
        0, "count", "Recompiles of the user's functions allowed after their first compile.", "count"
    )
    max_internal_recompiles: int | None = _setting(
        None, "count", "Compiles of JAX's own helpers allowed after warm-up (off: counted and listed only).", "count"
    )
    step_time_regression: float | None = _setting(
        0.05, "share", "How much slower the median steady step may be than the baseline's.", "share"
    )
    mean_step_time_regression: float | None = _setting(
        0.05, "share", "How much slower the mean steady step may be, beyond noise (see noise_sigmas).", "share"
    )
    tail_step_time_regression: float | None = _setting(
        0.10, "share", "How much slower than the baseline's p90 step a step may be before it counts as slow.", "share"
    )
    steps_per_s_drop: float | None = _setting(
        0.03, "share", "How much lower steady steps/s (steps over their periods) may be, beyond noise.", "share"
    )
    tokens_per_s_drop: float | None = _setting(
        0.03, "share", "How much lower tokens (or samples)/s may be: the median step's and the run's.", "share"
    )
    host_wait_share: float | None = _setting(
        None, "share", "Most of steady step time the device may sit waiting on the host.", "share"
    )
    exposed_collective_share: float | None = _setting(
        None, "share", "Most of steady step time collectives may leave exposed.", "share"
    )
    small_op_share: float | None = _setting(None, "share", "Most of device busy time small ops may take.", "share")
    min_steady_steps: int = _setting(
        3, "steps", "Fewer steady steps than this and the timing checks are skipped.", "int"
    )
    noise_sigmas: float = _setting(
        2.0,
        "standard errors",
        "A mean or rate fails only when its change also exceeds this many standard errors.",
        "positive",
    )
    tail_alpha: float = _setting(
        0.01,
        "probability",
        "The p90 check fails when this few captures of an unchanged program would have as "
        "many slow steps (binomial test).",
        "share",
    )
    min_tail_steps: int = _setting(10, "steps", "Fewer steady steps than this and the p90 check is skipped.", "int")

    def replace(self, **changes: Any) -> "CheckThresholds":
        """A copy with ``changes`` parsed (``"5%"``, ``"off"``, ...) and checked."""
        return dataclasses.replace(self, **{name: parse_check(name, value) for name, value in changes.items()})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Every tunable number of the analyses, and the check thresholds (``check``). See ``docs/settings.md``."""

    small_op_us: float = _setting(10.0, "µs", "Device ops shorter than this count as small.", "positive")
    host_wait_min_us: float = _setting(
        50.0, "µs", "Device-idle gaps shorter than this are launch jitter, not host waits.", "positive"
    )
    min_finding_ms: float = _setting(0.5, "ms", "Findings that cost less than this over the run are dropped.", "number")
    severity_warning_share: float = _setting(
        0.02,
        "share",
        "A finding that costs at least this share of the analysed steps' wall time outside compiles (summed over the report's "
        "steps) is a warning.",
        "share",
    )
    severity_critical_share: float = _setting(
        0.10,
        "share",
        "A finding that costs at least this share of the analysed steps' wall time outside compiles (summed over the report's "
        "steps) is critical.",
        "share",
    )
    replicated_param_bytes: int = _setting(
        64 * 2**20,
        "bytes",
        "An input replicated on every device of a multi-device mesh is reported from this size of one copy.",
        "bytes",
    )
    log_match_tolerance_s: float = _setting(
        5.0, "s", "A compile-log record and a timeline compile further apart than this do not match.", "positive"
    )
    compile_join_us: float = _setting(2000.0, "µs", "Compile-thread work closer than this joins one compile.", "number")
    step_gap_us: float = _setting(
        1000.0,
        "µs",
        "Without step markers, a device idle this long between runs of the dominant module starts a new step.",
        "number",
    )
    top_ops: int = _setting(20, "ops", "Costliest ops kept in the report's device-time section.", "int")
    small_op_top: int = _setting(10, "ops", "Small ops listed in the report, costliest first.", "int")
    max_small_op_findings: int = _setting(3, "findings", "Small-op findings at most.", "int")
    max_reshard_findings: int = _setting(10, "findings", "Resharding findings at most.", "int")
    padding_buckets: int = _setting(
        4, "buckets", "At most this many padding sizes are proposed for a varying axis.", "int"
    )
    min_distinct_values: int = _setting(
        3, "values", "A static argument or axis that took this many values gets advice.", "int"
    )
    max_static_repr: int = _setting(
        120, "characters", "Static argument values are cut to this length in records.", "int"
    )
    max_records: int = _setting(10_000, "records", "Compile records kept in memory (oldest dropped first).", "int")
    check: CheckThresholds = dataclasses.field(
        default=CheckThresholds(), metadata={"unit": "", "doc": "The thresholds of `jaxdiag check`.", "kind": "table"}
    )

    def replace(self, **changes: Any) -> "Settings":
        """A copy with ``changes`` applied; names may be ``check.NAME``, values text (``"5%"``, ``"64MiB"``)."""
        top: dict[str, Any] = {}
        check: dict[str, Any] = {}
        for name, value in changes.items():
            if name.startswith("check."):
                check[name[len("check.") :]] = value
            elif name == "check" and isinstance(value, CheckThresholds):
                top["check"] = value
            elif name == "check" and isinstance(value, Mapping):
                check.update(value)
            else:
                top[name] = parse_setting(name, value)
        result = dataclasses.replace(self, **top)
        if check:
            result = dataclasses.replace(result, check=result.check.replace(**check))
        if result.severity_warning_share > result.severity_critical_share:
            raise ConfigError(
                f"severity_warning_share ({result.severity_warning_share:g}) must not exceed "
                f"severity_critical_share ({result.severity_critical_share:g})"
            )
        return result

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: Older name of ``Settings``, kept for code that imported it.
Thresholds = Settings
DEFAULT_SETTINGS = Settings()
DEFAULT_THRESHOLDS = DEFAULT_SETTINGS
DEFAULT_CHECK_THRESHOLDS = CheckThresholds()


def documented() -> list[tuple[str, Any, str, str]]:
    """``(name, default, unit, meaning)`` of every setting, check thresholds as ``check.NAME``."""
    rows = []
    for cls, prefix in ((Settings, ""), (CheckThresholds, "check.")):
        for f in dataclasses.fields(cls):
            if f.metadata.get("kind") == "table":
                continue
            rows.append((prefix + f.name, f.default, f.metadata["unit"], f.metadata["doc"]))
    return rows


def settings_table() -> str:
    """The markdown table of ``docs/settings.md``: name, default, unit and meaning of every setting."""
    lines = ["| setting | default | unit | meaning |", "|---|---|---|---|"]
    for name, default, unit, doc in documented():
        shown = "off" if default is None else (f"{default:,}" if isinstance(default, int) else f"{default:g}")
        lines.append(f"| `{name}` | {shown} | {unit} | {doc} |")
    return "\n".join(lines) + "\n"


# --- parsing ------------------------------------------------------------------
def parse_setting(name: str, value: Any) -> Any:
    """``value`` as the setting ``name`` takes it; ``ConfigError`` naming the setting otherwise."""
    return _parse(Settings, name, value, "setting")


def parse_check(name: str, value: Any) -> Any:
    """``value`` as the check threshold ``name`` takes it; ``ConfigError`` naming it otherwise."""
    return _parse(CheckThresholds, name, value, "check threshold")


def parse_assignment(text: str) -> tuple[str, str]:
    """``"name=value"`` -> ``(name, value)``; ``ConfigError`` without an ``=`` or a name."""
    name, eq, value = text.partition("=")
    if not eq or not name.strip():
        raise ConfigError(f"--set {text!r}: expected NAME=VALUE, e.g. small_op_us=5")
    return name.strip(), value.strip()


def _parse(cls: type, name: str, value: Any, what: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    f = fields.get(name)
    if f is None or f.metadata.get("kind") == "table":
        known = ", ".join(n for n, g in fields.items() if g.metadata.get("kind") != "table")
        raise ConfigError(f"unknown {what} {name!r}; known: {known}")
    kind = f.metadata["kind"]
    optional = f.default is None or name in _OPTIONAL_CHECKS
    try:
        if optional and _is_off(value):
            return None
        return _KINDS[kind](value)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


_OPTIONAL_CHECKS = frozenset(
    {
        "max_steady_recompiles",
        "step_time_regression",
        "mean_step_time_regression",
        "tail_step_time_regression",
        "steps_per_s_drop",
        "tokens_per_s_drop",
    }
)


def parse_fraction(value: Any) -> float | None:
    """``"5%"`` -> 0.05, ``0.05`` -> 0.05, ``"off"``/``False``/``None`` -> ``None``.

    A bare number above 1 is refused: ``5`` could mean 5% or 500%.
    """
    if _is_off(value):
        return None
    return _share(value)


def _share(value: Any) -> float:
    text = str(value).strip()
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f'{value!r} is not a share; write it as "5%" or 0.05, or "off"') from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{value!r} must be a non-negative share")
    if number > 1 and not text.endswith("%"):
        raise ValueError(f'{value!r} is ambiguous; write "{text}%" or {number / 100:g}')
    return number


def _number(value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(str(value).strip())
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"expected a non-negative number, got {value!r}")
    return number


def _positive(value: Any) -> float:
    number = _number(value)
    if number <= 0:
        raise ValueError(f"expected a positive number, got {value!r}")
    return number


def _int(value: Any) -> int:
    try:
        number = -1 if isinstance(value, bool) else int(str(value).strip())
    except ValueError:
        number = -1
    if number < 0 or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"expected a non-negative whole number, got {value!r}")
    return number


_BYTES = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]i?b|b)?\s*$", re.IGNORECASE)
_BYTE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def _bytes(value: Any) -> int:
    match = None if isinstance(value, bool) else _BYTES.match(str(value))
    if match is None:
        raise ValueError(f'expected a size such as 67108864, "64MiB" or "1GB", got {value!r}')
    number = float(match.group(1)) * _BYTE_UNITS[(match.group(2) or "b").lower()]
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"expected a positive size, got {value!r}")
    return int(number)


_KINDS: dict[str, Callable[[Any], Any]] = {
    "share": _share,
    "number": _number,
    "positive": _positive,
    "int": _int,
    "count": _int,
    "bytes": _bytes,
}


def _is_off(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, str) and value.strip().lower() in _OFF)


# --- pyproject.toml -------------------------------------------------------------
def find_pyproject(start: str | Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` (default: the working folder) or above it."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def read_table(path: str | Path, keys: tuple[str, ...] = TABLE) -> dict[str, Any]:
    """The table at ``keys`` of the TOML file ``path`` (empty when it has none).

    Raises:
      ConfigError: the file cannot be read, is not UTF-8 text or not valid TOML.
    """
    from jaxdiag.files import read_text

    p = Path(path)
    loads = _toml_loads()
    if loads is None:
        warnings.warn(
            f"{p}: skipped [{'.'.join(keys)}]: reading TOML on Python < 3.11 needs `pip install tomli`",
            JaxdiagWarning,
            stacklevel=2,
        )
        return {}
    try:
        data = loads(read_text(p, "a pyproject.toml", ConfigError))
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"{p}: not valid TOML ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{p}: not valid TOML (nested too deeply)") from None
    table: Any = data
    for key in keys:
        table = table.get(key, {}) if isinstance(table, dict) else {}
    if not isinstance(table, dict):
        raise ConfigError(f"{p}: [{'.'.join(keys)}] must be a table")
    return table


def load_settings(
    changes: Mapping[str, Any] | None = None,
    *,
    pyproject: str | Path | None = None,
    search_from: str | Path | None = None,
    base: Settings = DEFAULT_SETTINGS,
    source: str = "--set",
) -> tuple[Settings, Path | None]:
    """Settings from ``base``, ``[tool.jaxdiag]`` (and ``.check``) of pyproject.toml, then ``changes``.

    Args:
      changes: setting name (``check.NAME`` for a check) -> value, applied last; ``None`` values ignored.
      pyproject: read this file instead of searching for one.
      search_from: where to start searching for ``pyproject.toml``.
      base: the settings the table and ``changes`` apply to.
      source: how ``changes`` were given, for messages.

    Returns:
      The settings, and the ``pyproject.toml`` whose table was read (``None`` when none had one).
    """
    path = Path(pyproject) if pyproject is not None else find_pyproject(search_from)
    settings, used = base, None
    if path is not None:
        table = read_table(path)
        if table:
            used = path
            check = table.get("check", {})
            if not isinstance(check, dict):
                raise ConfigError(f"{path} [tool.jaxdiag.check] must be a table")
            try:
                settings = settings.replace(**{k: v for k, v in table.items() if k != "check"})
            except ConfigError as exc:
                raise ConfigError(f"{path} [tool.jaxdiag]: {exc}") from None
            try:
                settings = settings.replace(check=check) if check else settings
            except ConfigError as exc:
                raise ConfigError(f"{path} [tool.jaxdiag.check]: {exc}") from None
    given = {k: v for k, v in (changes or {}).items() if v is not None}
    if given:
        try:
            settings = settings.replace(**given)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    return settings, used


def _toml_loads() -> Any:
    try:
        import tomllib

        return tomllib.loads
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli  # type: ignore[import-not-found]

            return tomli.loads
        except ModuleNotFoundError:
            return None


def log_dir_from_env() -> str | None:
    """The compile-log folder named by ``JAXDIAG_LOG_DIR``, or ``None``."""
    value = os.environ.get(ENV_LOG_DIR, "").strip()
    return value or None


def analysis_from_env() -> bool:
    """Whether ``JAXDIAG_COMPILE_ANALYSIS`` asks for cost and memory analysis."""
    return os.environ.get(ENV_ANALYSIS, "").strip().lower() in {"1", "true", "yes", "on"}
