"""Every command that reads a file, given that file cut short, with bytes flipped, or with a value swapped.

The only outcomes allowed: the command works (exit 0, or 1 for a check that fails on
figures it could read), or it refuses with exit 2 and one line on stderr naming the
file. A traceback, another exit status or a second line of error is a failure.
Files: a saved report, a baseline, a compile log (JSONL), ``pyproject.toml``, an
XSpace, a JSON trace and a capture sidecar, each starting from a real or
realistic one.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from report_builders import make_report
from xspace_builders import Kernel, gpu_xspace

from jaxdiag.checks.baseline import baseline_from_report
from jaxdiag.cli.app import main

FAST = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))

#: Any JSON value, to put in place of a part of a file.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**20) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def run(args: list[str], allowed: tuple[int, ...] = (0, 2)) -> None:
    """Run the CLI in-process; assert the outcome is one the module docstring allows."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    lines = [line for line in err.getvalue().splitlines() if not line.startswith("jaxdiag: warning:")]
    assert code in allowed, (code, err.getvalue()[-2000:])
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("jaxdiag: error: "), err.getvalue()[-2000:]
    assert "Traceback" not in err.getvalue()


def paths_of(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a part of a JSON value, the root included."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths_of(v, (*prefix, i))
    return out


def swapped(value: Any, which: int, new: Any) -> Any:
    """``value`` with the ``which``-th part (see ``paths_of``) replaced by ``new``."""
    path = paths_of(value)[which % len(paths_of(value))]
    if not path:
        return new
    value = json.loads(json.dumps(value))
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return value


def mutated(data: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    data = bytearray(data[: cut % (len(data) + 1)] if cut % 3 else data)
    for at, byte in flips:
        if data:
            data[at % len(data)] = byte
    return bytes(data)


# --- the files, made once ------------------------------------------------------------------------------
def _report_dict() -> dict[str, Any]:
    steps = [
        {
            "step": i,
            "wall_ms": 10.0 + i % 3,
            "device_busy_ms": 8.0,
            "host_wait_ms": 1.0,
            "compile_ms": 0.0,
            "collective_ms": 0.5,
            "exposed_collective_ms": 0.2,
            "tokens": 512.0,
        }
        for i in range(12)
    ]
    report = make_report(
        steps=steps,
        throughput={"steps_per_s": 90.0, "per_step": [{"step": i, "period_ms": 11.0} for i in range(12)]},
        small_ops={
            "threshold_us": 10.0,
            "count": 30,
            "device_time_share": 0.1,
            "top": [{"name": "fusion.4", "module": "jit_f", "count": 3, "total_ms": 1.0}],
            "per_step": [{"step": i, "count": 3, "time_ms": 0.1} for i in range(12)],
        },
        collectives={
            "overlap_fraction": 0.5,
            "exposed_ms": 2.0,
            "by_kind": [{"kind": "all-reduce", "count": 12, "total_ms": 6.0}],
        },
        device_time={
            "by_module": [
                {
                    "module": "jit_f",
                    "count": 5,
                    "total_ms": 90.0,
                    "per_step": [{"step": i, "ms": 7.5} for i in range(12)],
                }
            ],
            "top_ops": [{"name": "dot.2", "module": "jit_f", "count": 12, "total_ms": 50.0}],
        },
    )
    return json.loads(report.to_json())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fuzz_inputs")
    report = _report_dict()
    from jaxdiag.reporting.model import Report

    baseline = baseline_from_report(Report.from_dict(report)).to_dict()
    (root / "report.json").write_text(json.dumps(report))
    (root / "baseline.json").write_text(json.dumps(baseline))
    from tests import sharding_programs as programs

    records = [r for s in (programs.sharding_change(),) for r in s.records]
    xspace = gpu_xspace(
        devices=2,
        kernels=[Kernel(d, f"fusion_{i}", i * 100, 50) for d in range(2) for i in range(5)],
        nccl=[Kernel(1, "ncclDevKernel_AllReduce", 40, 30, op="all-reduce-start")],
        steps=[(0, 0, 300), (1, 300, 600)],
        host_annotations=[("load_batch", 10, 90)],
    )
    from tests.trace.test_load_fuzz import JSON as trace  # the JSON trace the reader's own fuzz starts from

    sidecar = {
        "schema": "jaxdiag.sidecar/1",
        "host": "h",
        "process_index": 0,
        "steps": {"0": {"tokens": 64}, "1": {"tokens": 64}},
        "compile_log": records,
    }
    toml = (
        '[project]\nname = "x"\n\n[tool.jaxdiag]\nsmall_op_us = 5\nreplicated_param_bytes = "64MiB"\n\n'
        '[tool.jaxdiag.check]\nstep_time_regression = "10%"\nmax_steady_recompiles = 0\n'
    )
    return {
        "root": root,
        "report": report,
        "baseline": baseline,
        "records": records,
        "xspace": xspace,
        "trace": trace,
        "sidecar": sidecar,
        "toml": toml,
    }


@contextlib.contextmanager
def folder() -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def json_bytes(value: Any) -> bytes:
    return json.dumps(value).encode()


REPORT_COMMANDS: list[Callable[[Path, Path], list[str]]] = [
    lambda f, tmp: ["check", str(f)],
    lambda f, tmp: ["baseline", str(f), "-o", str(tmp / "b.json")],
    lambda f, tmp: ["diff", str(f), str(f)],
    lambda f, tmp: ["sharding", str(f)],
    lambda f, tmp: ["report", str(f)],
]


def _report_file_cases(files: dict[str, Any], data: bytes, command: int) -> None:
    with folder() as tmp:
        path = tmp / "report.json"
        path.write_bytes(data)
        run(REPORT_COMMANDS[command](path, tmp), allowed=(0, 1, 2) if command == 0 else (0, 2))
        good = files["root"] / "report.json"
        run(["check", str(good), "--baseline", str(path)], allowed=(0, 1, 2))  # a report serves as a baseline
        run(["diff", str(good), str(path)])


@FAST
@given(which=st.integers(min_value=0), new=JSON_VALUES, command=st.integers(0, len(REPORT_COMMANDS) - 1))
def test_report_json_with_a_value_swapped(files, which: int, new: Any, command: int) -> None:
    _report_file_cases(files, json_bytes(swapped(files["report"], which, new)), command)


@FAST
@given(
    cut=st.integers(min_value=0),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
    command=st.integers(0, len(REPORT_COMMANDS) - 1),
)
def test_report_json_cut_or_flipped(files, cut: int, flips, command: int) -> None:
    _report_file_cases(files, mutated(json_bytes(files["report"]), cut, flips), command)


@FAST
@given(
    data=st.one_of(st.binary(max_size=64), st.builds(gzip.compress, st.binary(max_size=64))),
    command=st.integers(0, len(REPORT_COMMANDS) - 1),
)
def test_report_json_replaced_by_bytes(files, data: bytes, command: int) -> None:
    _report_file_cases(files, data, command)


@FAST
@given(
    which=st.integers(min_value=0),
    new=JSON_VALUES,
    cut=st.integers(min_value=0),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=2),
)
def test_baseline(files, which: int, new: Any, cut: int, flips) -> None:
    with folder() as tmp:
        path = tmp / "baseline.json"
        for data in (
            json_bytes(swapped(files["baseline"], which, new)),
            mutated(json_bytes(files["baseline"]), cut, flips),
        ):
            path.write_bytes(data)
            run(["check", str(files["root"] / "report.json"), "--baseline", str(path)], allowed=(0, 1, 2))


@FAST
@given(
    line=st.integers(min_value=0),
    which=st.integers(min_value=0),
    new=JSON_VALUES,
    cut=st.integers(min_value=0),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=3),
    command=st.sampled_from(["compiles", "sharding"]),
)
def test_compile_log(files, line: int, which: int, new: Any, cut: int, flips, command: str) -> None:
    records = list(files["records"])
    i = line % len(records)
    records[i] = swapped(records[i], which, new)
    with folder() as tmp:
        path = tmp / "compiles.jsonl"
        for text in (
            "".join(json.dumps(r) + "\n" for r in records).encode(),
            mutated("".join(json.dumps(r) + "\n" for r in files["records"]).encode(), cut, flips),
        ):
            path.write_bytes(text)
            run([command, str(path)])
            run([command, str(path), "--json"])


@FAST
@given(
    cut=st.integers(min_value=0),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
    key=st.sampled_from(
        [
            "small_op_us",
            "check.step_time_regression",
            "check.max_steady_recompiles",
            "top_ops",
            "check",
            "severity_critical_share",
            "replicated_param_bytes",
        ]
    ),
    new=st.one_of(st.text(max_size=6), st.integers(-5, 10**20), st.floats(), st.booleans()),
)
def test_pyproject_toml(files, cut: int, flips, key: str, new: Any) -> None:
    value = json.dumps(new) if not isinstance(new, float) or new == new and abs(new) != float("inf") else '"x"'
    table, _, name = key.rpartition(".")
    if table == "check":
        swapped_toml = files["toml"].replace('step_time_regression = "10%"', f"{name} = {value}")
    else:
        swapped_toml = files["toml"].replace("small_op_us = 5", f"{name} = {value}")
    with folder() as tmp:
        path = tmp / "pyproject.toml"
        for data in (swapped_toml.encode(), mutated(files["toml"].encode(), cut, flips)):
            path.write_bytes(data)
            run(
                [
                    "check",
                    str(files["root"] / "report.json"),
                    "--baseline",
                    str(files["root"] / "baseline.json"),
                    "--config",
                    str(path),
                ],
                allowed=(0, 1, 2),
            )


def _trace_run(tmp: Path, name: str, data: bytes) -> Path:
    run_dir = tmp / "plugins" / "profile" / "run1"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / name).write_bytes(data)
    return tmp


@SLOW
@given(
    cut=st.integers(min_value=0),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=6),
    command=st.sampled_from(["report", "sharding", "check"]),
)
def test_xspace(files, cut: int, flips, command: str) -> None:
    with folder() as tmp:
        logdir = _trace_run(tmp, "h.xplane.pb", mutated(files["xspace"], cut, flips))
        run([command, str(logdir)], allowed=(0, 1, 2) if command == "check" else (0, 2))


@SLOW
@given(
    cut=st.integers(min_value=0), flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=6)
)
def test_json_trace(files, cut: int, flips) -> None:
    with folder() as tmp:
        logdir = _trace_run(tmp, "h.trace.json.gz", mutated(files["trace"], cut, flips))
        run(["report", str(logdir)])


@SLOW
@given(
    which=st.integers(min_value=0),
    new=JSON_VALUES,
    cut=st.integers(min_value=0),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=3),
    command=st.sampled_from(["report", "compiles"]),
)
def test_capture_sidecar(files, which: int, new: Any, cut: int, flips, command: str) -> None:
    with folder() as tmp:
        logdir = _trace_run(tmp, "h.xplane.pb", files["xspace"])
        side = logdir / "plugins" / "profile" / "run1" / "jaxdiag-h-p0.json"
        for data in (
            json_bytes(swapped(files["sidecar"], which, new)),
            mutated(json_bytes(files["sidecar"]), cut, flips),
        ):
            side.write_bytes(data)
            run([command, str(logdir)])


def test_the_files_themselves_are_read(files) -> None:
    """The starting points are good files: each command works on them as given."""
    root = files["root"]
    run(["check", str(root / "report.json"), "--baseline", str(root / "baseline.json")], allowed=(0, 1))
    run(["diff", str(root / "report.json"), str(root / "report.json")], allowed=(0,))
    with folder() as tmp:
        (tmp / "compiles.jsonl").write_text("".join(json.dumps(r) + "\n" for r in files["records"]))
        run(["compiles", str(tmp / "compiles.jsonl")], allowed=(0,))
        run(["sharding", str(tmp / "compiles.jsonl")], allowed=(0,))
        logdir = _trace_run(tmp, "h.xplane.pb", files["xspace"])
        (logdir / "plugins" / "profile" / "run1" / "jaxdiag-h-p0.json").write_text(json.dumps(files["sidecar"]))
        run(["report", str(logdir)], allowed=(0,))
        run(["compiles", str(logdir)], allowed=(0,))
