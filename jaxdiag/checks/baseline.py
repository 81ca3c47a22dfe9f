"""``Baseline``: the figures of a report that CI compares, saved as versioned JSON.

Every figure is taken over *steady* steps, the steps in which nothing compiled:
compiles are checked on their own, and a step that compiled says nothing about
how fast the program runs. Times are medians with their spread, so one noisy
step cannot move them; shares are totals over steady steps leaving out the one
step with the largest share, for the same reason. Each steady step's wall time,
period (start to the next step's start) and tokens are kept too (format 1.1), for
the mean, tail and throughput checks, which a median cannot stand in for.

The same extraction gives the figures of a new capture, so ``compare`` and
``diff`` only ever compare two ``Baseline``s taken the same way.

Extraction and the saved format stay together so that a baseline and a new capture are always taken
the same way, which is why the module runs past 400 lines.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from jaxdiag.errors import BaselineError

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.device_time_section import DeviceTimeSection
    from jaxdiag.analyses.recompile_section import RecompileRow
    from jaxdiag.analyses.small_op_section import SmallOpsStep
    from jaxdiag.analyses.step_section import StepFigures
    from jaxdiag.reporting.model import Report

#: Major.minor: a new major breaks readers; a new minor only adds figures.
BASELINE_VERSION = "1.1"
_VERSION_KEY = "baseline_version"


@dataclasses.dataclass(frozen=True, slots=True)
class Spread:
    """Median of per-step values and how far they scatter.

    Attributes:
      median: the median, ``None`` without values.
      iqr: interquartile range (75th minus 25th percentile).
      mad: median absolute deviation from the median.
      n: how many values.
    """

    median: float | None
    iqr: float | None
    mad: float | None
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        vals = sorted(float(v) for v in values)
        if not vals:
            return cls(None, None, None, 0)
        med = statistics.median(vals)
        iqr = 0.0
        if len(vals) >= 2:
            q = statistics.quantiles(vals, n=4, method="inclusive")
            iqr = q[2] - q[0]
        mad = statistics.median(abs(v - med) for v in vals)
        return cls(round(med, 6), round(iqr, 6), round(mad, 6), len(vals))


@dataclasses.dataclass(frozen=True, slots=True)
class Recompile:
    """A compile of a function that had compiled before: the warm-up is over, yet it compiled."""

    function: str
    step: int | None
    compile_ms: float
    cause: str | None

    def describe(self) -> str:
        where = f"step {self.step}" if self.step is not None else "outside the steps"
        return f"{self.function} at {where} ({self.compile_ms:.0f} ms): {self.cause or 'cause unknown'}"


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The figures that matter for one capture (see the module docstring for how each is taken).

    Attributes:
      source: where the figures came from: ``run_dir``, ``devices`` (device names),
        ``report_schema``, ``jaxdiag`` (version), ``created_unix``.
      steps: steps in the report.
      steady_steps: steps without a compile.
      step_time_ms: wall time of steady steps.
      tokens_per_s: tokens per second of steady steps that know their tokens.
      compiles: compiles on the timeline, warm-up included.
      steady_recompiles: compiles after a function's first one.
      host_wait_share: device idle waiting on the host, over steady wall time.
      exposed_collective_share: collective time no compute hid, over steady wall time.
      small_op_count: small ops per steady step (median).
      small_op_share: small ops' share of device busy time in steady steps.
      module_device_ms: device time per step by module, when the report has it.
      steady_wall_ms: each steady step's wall time, in step order.
      steady_period_ms: each steady step's period (to the next step's start), in step order.
      steady_tokens: each steady step's tokens (or samples), ``None`` where unknown.
      internal_recompiles: compiles of JAX's own helpers after warm-up, counted apart.
      throughput_unit: what ``steady_tokens`` counts: ``tokens`` or ``samples``.
      version: the baseline format version.
    """

    source: Mapping[str, Any]
    steps: int
    steady_steps: int
    step_time_ms: Spread
    tokens_per_s: Spread
    compiles: int
    steady_recompiles: tuple[Recompile, ...]
    host_wait_share: float | None
    exposed_collective_share: float | None
    small_op_count: float | None
    small_op_share: float | None
    module_device_ms: Mapping[str, float] = dataclasses.field(default_factory=dict)
    steady_wall_ms: tuple[float, ...] = ()
    steady_period_ms: tuple[float, ...] = ()
    steady_tokens: tuple[float | None, ...] = ()
    internal_recompiles: tuple[Recompile, ...] = ()
    throughput_unit: str = "tokens"
    version: str = BASELINE_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d[_VERSION_KEY] = d.pop("version")
        d["source"] = dict(self.source)
        d["module_device_ms"] = dict(self.module_device_ms)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "Baseline":
        """Rebuild a baseline; ``BaselineError`` on a wrong version, missing or mistyped figure."""
        if not isinstance(d, dict):
            raise BaselineError("a baseline must be a JSON object")
        version = str(d.get(_VERSION_KEY, ""))
        if not version:
            raise BaselineError(f"not a jaxdiag baseline (no {_VERSION_KEY!r}); make one with `jaxdiag baseline`")
        if version.split(".")[0] != BASELINE_VERSION.split(".")[0]:
            raise BaselineError(
                f"baseline version {version} is not supported (this jaxdiag reads "
                f"{BASELINE_VERSION.split('.')[0]}.x); make it again with `jaxdiag baseline`"
            )
        required = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        missing = [k for k in required if k not in d]
        if missing:
            raise BaselineError(f"baseline is missing {', '.join(missing)}; make it again with `jaxdiag baseline`")
        try:
            return cls(
                source=dict(d["source"]),
                steps=_int(d["steps"]),
                steady_steps=_int(d["steady_steps"]),
                step_time_ms=_spread(d["step_time_ms"]),
                tokens_per_s=_spread(d["tokens_per_s"]),
                compiles=_int(d["compiles"]),
                steady_recompiles=tuple(_recompile(r) for r in d["steady_recompiles"]),
                host_wait_share=_opt(d["host_wait_share"]),
                exposed_collective_share=_opt(d["exposed_collective_share"]),
                small_op_count=_opt(d["small_op_count"]),
                small_op_share=_opt(d["small_op_share"]),
                module_device_ms={str(k): _num(v) for k, v in dict(d.get("module_device_ms") or {}).items()},
                steady_wall_ms=tuple(_num(v) for v in d.get("steady_wall_ms") or ()),
                steady_period_ms=tuple(_num(v) for v in d.get("steady_period_ms") or ()),
                steady_tokens=tuple(_opt(v) for v in d.get("steady_tokens") or ()),
                internal_recompiles=tuple(_recompile(r) for r in d.get("internal_recompiles") or ()),
                throughput_unit=_unit(d.get("throughput_unit")),
                version=version,
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise BaselineError(f"baseline has a malformed figure ({type(exc).__name__}: {exc})") from None

    def save(self, path: str | Path) -> None:
        """Write the baseline as JSON; ``BaselineError`` when the file cannot be written."""
        p = Path(path)
        try:
            p.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n")
        except OSError as exc:
            raise BaselineError(f"{p}: cannot write baseline ({exc.strerror or exc})") from None


def load_baseline(path: str | Path) -> Baseline:
    """Read a baseline written by ``Baseline.save``, or take one from a saved report JSON.

    Raises:
      BaselineError: the file is missing, not JSON, of another version or lacks figures.
    """
    from jaxdiag.files import read_json

    p = Path(path)
    data = read_json(p, "a jaxdiag baseline (JSON)", BaselineError)
    if isinstance(data, dict) and _VERSION_KEY not in data and "schema_version" in data:
        from jaxdiag.checks.inputs import read_report
        from jaxdiag.reporting.model import ReportFormatError

        try:
            return baseline_from_report(read_report(p))
        except ReportFormatError as exc:
            raise BaselineError(str(exc)) from None
    try:
        return Baseline.from_dict(data)
    except BaselineError as exc:
        raise BaselineError(f"{p}: {exc}") from None


def baseline_from_report(report: "Report") -> Baseline:
    """Take the figures that matter from ``report`` (steady steps only, see the module docstring)."""
    steady = steady_steps(report)
    walls = [s.wall_ms for s in steady if _is_num(s.wall_ms)]
    rates = [
        float(s.tokens) / s.wall_ms * 1000.0
        for s in steady
        if s.tokens is not None and _is_num(s.tokens) and _is_num(s.wall_ms) and s.wall_ms > 0
    ]
    periods = _periods(report)
    timed = [s for s in steady if _is_num(s.wall_ms)]
    small = report.small_ops
    per_step_small: dict[Any, SmallOpsStep] = {r.step: r for r in small.per_step}
    steady_small = [per_step_small[s.step] for s in steady if s.step in per_step_small]
    if steady_small:
        small_count: float | None = float(statistics.median(r.count for r in steady_small))
        busy = {s.step: s.device_busy_ms for s in steady}
        small_share = _trimmed_share([(_or_zero(r.time_ms), busy.get(r.step)) for r in steady_small])
    else:
        n = len(report.steps)
        small_count = float(small.count) / n if n else None
        small_share = small.device_time_share if _is_num(small.device_time_share) else None
    src = report.source or {}
    devices = sorted({str(d.get("device_name") or d.get("plane")) for d in src.get("devices") or []})
    return Baseline(
        source={
            "run_dir": src.get("run_dir"),
            "devices": devices,
            "report_schema": report.schema_version,
            "jaxdiag": _version(),
            "created_unix": round(time.time(), 3),
        },
        steps=len(report.steps),
        steady_steps=len(steady),
        step_time_ms=Spread.of(walls),
        tokens_per_s=Spread.of(rates),
        compiles=len(report.recompiles),
        steady_recompiles=tuple(steady_recompiles(report)),
        host_wait_share=_trimmed_share([(s.host_wait_ms, s.wall_ms) for s in steady]),
        exposed_collective_share=_trimmed_share([(s.exposed_collective_ms, s.wall_ms) for s in steady]),
        small_op_count=None if small_count is None else round(small_count, 3),
        small_op_share=small_share,
        module_device_ms=module_device_ms(report),
        steady_wall_ms=tuple(round(s.wall_ms, 6) for s in timed),
        steady_period_ms=tuple(round(periods.get(s.step, s.wall_ms), 6) for s in timed),
        steady_tokens=tuple(float(s.tokens) if s.tokens is not None and _is_num(s.tokens) else None for s in timed),
        internal_recompiles=tuple(r for r, internal in _compiles_after_warmup(report) if internal),
        throughput_unit=report.throughput.unit,
    )


def steady_steps(report: "Report") -> list["StepFigures"]:
    """Steps in which nothing compiled (no compile time, no compile on the timeline)."""
    compiled = {r.step for r in report.recompiles if r.step is not None}
    return [s for s in report.steps if not (_is_num(s.compile_ms) and s.compile_ms > 0) and s.step not in compiled]


def steady_recompiles(report: "Report") -> list[Recompile]:
    """Compiles of the user's functions that had compiled before, in timeline order.

    A compile counts when the report marks it (``recompile``), when a ``recompile``
    finding names its function and step (the analysis also knows functions that ran
    before the capture), or when the same function compiled earlier in the capture.
    Compiles the report marks as JAX's own (``origin: "jax-internal"``) are left out:
    see ``internal_recompiles``.
    """
    return [r for r, internal in _compiles_after_warmup(report) if not internal]


def internal_recompiles(report: "Report") -> list[Recompile]:
    """Compiles of JAX's own helpers after warm-up (counted apart from the user's)."""
    return [r for r, internal in _compiles_after_warmup(report) if internal]


def is_internal(row: "RecompileRow") -> bool:
    """Whether a compile row of a report names one of JAX's own helpers."""
    return row.origin == "jax-internal"


def _compiles_after_warmup(report: "Report") -> list[tuple[Recompile, bool]]:
    flagged: dict[tuple[str, Any], int] = {}
    for f in report.findings:
        if f.kind == "recompile":
            ev = f.evidence or {}
            step = ev.get("step")
            key = (str(ev.get("function")), step if isinstance(step, int) and step != -1 else None)
            flagged[key] = flagged.get(key, 0) + 1
    seen: set[str] = set()
    out = []
    for r in report.recompiles:
        fn, step = r.function, r.step
        if r.recompile is not None:
            is_re = r.recompile
        else:  # a report before 1.1
            is_re = fn in seen or flagged.get((fn, step), 0) > 0
        if flagged.get((fn, step), 0) > 0:
            flagged[(fn, step)] -= 1
        seen.add(fn)
        if is_re:
            ms = r.compile_ms if _is_num(r.compile_ms) else 0.0
            out.append((Recompile(fn, step, round(ms, 3), r.cause), is_internal(r)))
    return out


def _periods(report: "Report") -> dict[Any, float]:
    """Step -> period in ms (start to the next step's start), from the report's throughput section."""
    return {r.step: r.period_ms for r in report.throughput.per_step if _is_num(r.period_ms) and r.period_ms > 0}


def module_device_ms(report: "Report") -> dict[str, float]:
    """Device time per step by module, from the report's ``device_time`` section when it has one.

    Reads ``device_time.by_module``: the median over steady steps when ``per_step`` is
    there, else ``total_ms`` over the report's step count. Reports without the section
    give ``{}``.
    """
    return module_table(report.device_time, [s.step for s in steady_steps(report)], len(report.steps))


def module_table(section: "DeviceTimeSection", steady: Sequence[Any], n_steps: int) -> dict[str, float]:
    """Per-step device ms by module from a ``device_time`` section (see ``module_device_ms``)."""
    out: dict[str, float] = {}
    wanted = set(steady)
    for row in section.by_module:
        per_step = [p for p in row.per_step if p.step in wanted and _is_num(p.ms)]
        if per_step:
            by_step = {p.step: p.ms for p in per_step}
            out[row.module] = round(statistics.median(by_step.get(s, 0.0) for s in wanted), 4)
        elif _is_num(row.total_ms) and n_steps:
            out[row.module] = round(row.total_ms / n_steps, 4)
    return out


def _trimmed_share(pairs: Sequence[tuple[Any, Any]]) -> float | None:
    """Sum of parts over sum of wholes, without the pair with the largest share when 3 or more."""
    rows = [(float(a), float(b)) for a, b in pairs if _is_num(a) and _is_num(b) and float(b) > 0]
    if not rows:
        return None
    if len(rows) >= 3:
        rows.remove(max(rows, key=lambda r: r[0] / r[1]))
    total = sum(b for _, b in rows)
    return round(sum(a for a, _ in rows) / total, 6) if total > 0 else None


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v not in (float("inf"), float("-inf"))


def _or_zero(v: Any) -> float:
    return float(v) if _is_num(v) else 0.0


def _num(v: Any) -> float:
    if not _is_num(v):
        raise ValueError(f"expected a number, got {v!r}")
    return float(v)


def _opt(v: Any) -> float | None:
    return None if v is None else _num(v)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected a whole number, got {v!r}")
    return v


def _recompile(r: Any) -> Recompile:
    return Recompile(
        str(r["function"]),
        None if r.get("step") is None else _int(r["step"]),
        _num(r["compile_ms"]),
        None if r.get("cause") is None else str(r["cause"]),
    )


def _unit(value: Any) -> str:
    return value if value in ("tokens", "samples") else "tokens"


def _spread(d: Any) -> Spread:
    if not isinstance(d, dict):
        raise TypeError(f"expected a spread object, got {d!r}")
    spread = Spread(_opt(d["median"]), _opt(d["iqr"]), _opt(d["mad"]), _int(d["n"]))
    if spread.n < 0 or (spread.n > 0) != (spread.median is not None):
        raise ValueError(f"a spread of {spread.n} value(s) with median {spread.median!r}")
    return spread


def _version() -> str:
    from jaxdiag.version import __version__

    return __version__
