"""Every reader, given files of five hostile classes: size, nesting, special files, non-finite and
negative numbers, markup and escapes in names.

Readers: a saved report, a baseline, ``pyproject.toml`` (``--config``), a compile log, a capture
sidecar, an XSpace and a JSON trace, each through the commands that read it, starting from the
good files of ``test_fuzz_inputs``. The outcomes allowed are those of ``test_fuzz_inputs.run``:
exit 0 (or 1 for a check on figures it could read), or exit 2 with one line naming the file;
never a traceback. Special files are read by a child process with a timeout, so that a reader
that blocks fails instead of hanging. ``CASES`` counts the command runs per class (printed at
the end of the module with ``-s``).
"""

from __future__ import annotations

import collections
import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xspace_builders import H100_STATS, Kernel, gpu_xspace

from tests.cli import test_fuzz_inputs as base
from tests.cli.test_fuzz_inputs import files, folder, paths_of, swapped  # noqa: F401 - ``files`` is a fixture

CLASS = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
CASES: collections.Counter[str] = collections.Counter()

#: Numbers no profile holds, and edge values that it may.
ODD_NUMBERS = [math.nan, math.inf, -math.inf, -1, -1.5, -1e308, 1e308, 2**64 + 1, -(2**63), 0, -0.0, 5e-324]
#: Names that are rich markup, terminal escapes (a link, clear-screen, a colour), HTML, or ordinary brackets.
MARKUP = [
    "load [/data/shard-00001.tfrecord]",
    "[bold red]x[/]",
    "[/]",
    "[link=http://example.com]click[/link]",
    "\x1b]8;;http://example.com\x1b\\link\x1b]8;;\x1b\\",
    "\x1b[2J\x1b[H",
    "\x1b[31mred",
    "<script>alert(1)</script>",
    "&amp; \\ %s {0} $(x)",
    "\u202eevil",
]
NAMES = st.one_of(st.sampled_from(MARKUP), st.text(alphabet="[]/\\<>&;=\x1b\x07 a:b", min_size=1, max_size=12))


@pytest.fixture(scope="module", autouse=True)
def _say_cases():
    yield
    print("\nfuzz cases per class:", dict(sorted(CASES.items())))


def run(kind: str, args: list[Any], allowed: tuple[int, ...] = (0, 2)) -> None:
    CASES[kind] += 1
    base.run([str(a) for a in args], allowed=allowed)


def run_child(kind: str, args: list[Any], cwd: Path, allowed: tuple[int, ...] = (0, 2)) -> None:
    """``run`` in a child process with a timeout (a reader that blocks on a special file fails)."""
    CASES[kind] += 1
    code = "import sys; from jaxdiag.cli.app import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    lines = [line for line in done.stderr.splitlines() if not line.startswith("jaxdiag: warning:")]
    assert done.returncode in allowed and "Traceback" not in done.stderr, (args, done.returncode, done.stderr[-2000:])
    if done.returncode == 2:
        assert len(lines) == 1 and lines[0].startswith("jaxdiag: error: "), done.stderr


def leaf_paths(value: Any, want: Callable[[Any], bool]) -> list[int]:
    """Indices (for ``swapped``) of the parts of ``value`` that ``want`` accepts."""
    parts = paths_of(value)
    out = []
    for i, path in enumerate(parts):
        part = value
        for key in path:
            part = part[key]
        if want(part):
            out.append(i)
    return out


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


#: Stands for a nested value in a file until ``_encode`` writes the nesting out as text.
NESTED = "\u2063nested\u2063"


def nested_text(depth: int) -> str:
    """Objects and lists alternating ``depth`` deep, as JSON text (``json.dumps`` would recurse past its limit)."""
    opens = "".join('{"k": ' if i % 2 == 0 else "[" for i in range(depth))
    closes = "".join("}" if i % 2 == 0 else "]" for i in reversed(range(depth)))
    return opens + "1" + closes


def dumps(value: Any) -> bytes:
    """JSON text, NaN and Infinity written as Python writes them (files made by hand or by other tools)."""
    return json.dumps(value, allow_nan=True).encode()


# --- each reader: write a file from a JSON-like value, run the commands that read it -----------------------
def _json_readers(f: dict[str, Any], tmp: Path) -> dict[str, tuple[Any, Callable[[bytes], None]]]:
    good = f["root"] / "report.json"
    good_baseline = f["root"] / "baseline.json"

    def report_cmds(kind: str) -> Callable[[bytes], None]:
        def go(data: bytes) -> None:
            path = tmp / "report.json"
            path.write_bytes(data)
            run(kind, ["check", path, "--baseline", good_baseline], allowed=(0, 1, 2))
            run(kind, ["diff", good, path])
            run(kind, ["report", path, "--html", tmp / "r.html"])
            run(kind, ["sharding", path])

        return go

    def baseline_cmds(kind: str) -> Callable[[bytes], None]:
        def go(data: bytes) -> None:
            path = tmp / "baseline.json"
            path.write_bytes(data)
            run(kind, ["check", good, "--baseline", path], allowed=(0, 1, 2))

        return go

    def log_cmds(kind: str) -> Callable[[bytes], None]:
        def go(data: bytes) -> None:
            path = tmp / "compiles.jsonl"
            path.write_bytes(data)
            run(kind, ["compiles", path])
            run(kind, ["sharding", path])
            logdir = base._trace_run(tmp / "beside", "h.xplane.pb", f["xspace"])
            (logdir / "plugins" / "profile" / "run1" / "compiles-h-1.jsonl").write_bytes(data)
            run(kind, ["report", logdir])

        return go

    def sidecar_cmds(kind: str) -> Callable[[bytes], None]:
        def go(data: bytes) -> None:
            logdir = base._trace_run(tmp / "side", "h.xplane.pb", f["xspace"])
            (logdir / "plugins" / "profile" / "run1" / "jaxdiag-h-p0.json").write_bytes(data)
            run(kind, ["report", logdir])
            run(kind, ["compiles", logdir])

        return go

    def trace_cmds(kind: str) -> Callable[[bytes], None]:
        def go(data: bytes) -> None:
            logdir = base._trace_run(tmp / "jt", "h.trace.json.gz", gzip.compress(data))
            run(kind, ["report", logdir])

        return go

    trace = json.loads(gzip.decompress(f["trace"]))
    return {
        "report": (f["report"], report_cmds),
        "baseline": (f["baseline"], baseline_cmds),
        "sidecar": (f["sidecar"], sidecar_cmds),
        "json trace": (trace, trace_cmds),
        "compile log": (f["records"], log_cmds),  # a list of records, one per line
    }


def _encode(reader: str, value: Any, depth: int = 0) -> bytes:
    if reader == "compile log":
        data = b"".join(dumps(r) + b"\n" for r in value)
    else:
        data = dumps(value)
    return data.replace(json.dumps(NESTED).encode(), nested_text(depth).encode()) if depth else data


JSON_READERS = ["report", "baseline", "sidecar", "json trace", "compile log"]


# --- nesting -----------------------------------------------------------------------------------------------
@CLASS
@given(reader=st.sampled_from(JSON_READERS), which=st.integers(min_value=0), depth=st.sampled_from([8, 70, 900, 5000]))
def test_nesting(files, reader: str, which: int, depth: int) -> None:  # noqa: F811
    with folder() as tmp:
        value, cmds = _json_readers(files, tmp)[reader]
        cmds("nesting")(_encode(reader, swapped(value, which, NESTED), depth))


@CLASS
@given(depth=st.sampled_from([8, 70, 900, 5000]))
def test_nesting_toml(files, depth: int) -> None:  # noqa: F811
    with folder() as tmp:
        path = tmp / "pyproject.toml"
        path.write_text(files["toml"] + f"\n[tool.other]\nx = {'[' * depth}1{']' * depth}\n")
        run(
            "nesting",
            ["check", files["root"] / "report.json", "--baseline", files["root"] / "baseline.json", "--config", path],
            allowed=(0, 1, 2),
        )


def _nested_message(depth: int) -> bytes:
    """An unknown length-delimited field holding itself ``depth`` times (protobuf readers recurse into none)."""
    inner = b""
    for _ in range(depth):
        inner = b"\x7a" + _varint(len(inner)) + inner  # field 15, wire type 2
    return inner


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@CLASS
@given(depth=st.sampled_from([8, 70, 200, 3000]), at_end=st.booleans())
def test_nesting_xspace(files, depth: int, at_end: bool) -> None:  # noqa: F811
    extra = _nested_message(depth)
    data = files["xspace"] + extra if at_end else extra + files["xspace"]
    with folder() as tmp:
        logdir = base._trace_run(tmp, "h.xplane.pb", data)
        run("nesting", ["report", logdir])
        run("nesting", ["check", logdir], allowed=(0, 1, 2))


# --- non-finite and negative numbers -----------------------------------------------------------------------
@CLASS
@given(reader=st.sampled_from(JSON_READERS), which=st.integers(min_value=0), number=st.sampled_from(ODD_NUMBERS))
def test_numbers(files, reader: str, which: int, number: float) -> None:  # noqa: F811
    with folder() as tmp:
        value, cmds = _json_readers(files, tmp)[reader]
        numeric = leaf_paths(value, is_number)
        cmds("numbers")(_encode(reader, swapped(value, numeric[which % len(numeric)], number)))


@CLASS
@given(
    key=st.sampled_from(["small_op_us", "top_ops", "severity_critical_share", "replicated_param_bytes"]),
    number=st.sampled_from(["nan", "inf", "-inf", "-1", "-1.5", "-1e308", "1e308", "18446744073709551617", "-0.0"]),
)
def test_numbers_toml(files, key: str, number: str) -> None:  # noqa: F811
    with folder() as tmp:
        path = tmp / "pyproject.toml"
        path.write_text(files["toml"].replace("small_op_us = 5", f"{key} = {number}"))
        run(
            "numbers",
            ["check", files["root"] / "report.json", "--baseline", files["root"] / "baseline.json", "--config", path],
            allowed=(0, 1, 2),
        )


@CLASS
@given(
    dur=st.sampled_from([-1, -50_000, -(2**50), 0, 2**50]),
    start=st.sampled_from([0, 5, 2**40]),
    stat=st.sampled_from(["clock_rate", "core_count", "memory_bandwidth", "memory_size"]),
    stat_value=st.sampled_from([-1, -(2**62), 0, 2**63 - 1, -1.5, math.nan, math.inf]),
)
def test_numbers_xspace(dur: int, start: int, stat: str, stat_value: float) -> None:
    kernels = [Kernel(0, "fusion_1", start, dur), Kernel(0, "fusion_2", 200, 50)]
    data = gpu_xspace(kernels=kernels, steps=[(0, 0, 300)], device_stats={**H100_STATS, stat: stat_value})
    with folder() as tmp:
        logdir = base._trace_run(tmp, "h.xplane.pb", data)
        run("numbers", ["report", logdir])
        run("numbers", ["check", logdir], allowed=(0, 1, 2))


# --- markup and escapes in names ---------------------------------------------------------------------------
@CLASS
@given(reader=st.sampled_from(JSON_READERS), which=st.integers(min_value=0), name=NAMES)
def _markup_names(files, reader: str, which: int, name: str) -> None:  # noqa: F811
    with folder() as tmp:
        value, cmds = _json_readers(files, tmp)[reader]
        texts = leaf_paths(value, lambda x: isinstance(x, str))
        cmds("markup")(_encode(reader, swapped(value, texts[which % len(texts)], name)))


def test_markup_names(files) -> None:  # noqa: F811
    _markup_names(files)


@CLASS
@given(kernel=NAMES, annotation=NAMES, module=NAMES)
def _markup_names_xspace(kernel: str, annotation: str, module: str) -> None:
    data = gpu_xspace(
        kernels=[Kernel(0, kernel, 100, 50, module=module), Kernel(0, "fusion_2", 200, 50)],
        steps=[(0, 0, 300)],
        host_annotations=[(annotation, 10, 90)],
    )
    with folder() as tmp:
        logdir = base._trace_run(tmp, "h.xplane.pb", data)
        run("markup", ["report", logdir])
        run("markup", ["check", logdir], allowed=(0, 1, 2))


def test_markup_names_xspace() -> None:
    _markup_names_xspace()


@CLASS
@given(name=NAMES, value=NAMES)
def test_markup_names_toml(files, name: str, value: str) -> None:  # noqa: F811
    with folder() as tmp:
        path = tmp / "pyproject.toml"
        path.write_text(files["toml"] + f"\n[tool.jaxdiag.extra]\n{json.dumps(name)} = {json.dumps(value)}\n")
        run(
            "markup",
            ["check", files["root"] / "report.json", "--baseline", files["root"] / "baseline.json", "--config", path],
            allowed=(0, 1, 2),
        )


# --- size --------------------------------------------------------------------------------------------------
@CLASS
@given(
    reader=st.sampled_from(JSON_READERS),
    which=st.integers(min_value=0),
    size=st.sampled_from([10**3, 10**6, 5 * 10**6]),
)
def test_size_large_values(files, reader: str, which: int, size: int) -> None:  # noqa: F811
    """A long string or a long list where any part of the file was."""
    with folder() as tmp:
        value, cmds = _json_readers(files, tmp)[reader]
        new = "x" * size if which % 2 else [0] * (size // 4)
        cmds("size")(_encode(reader, swapped(value, which, new)))


SPARSE = 300 * 2**20  # past every reader's cap; a sparse file takes no disk


def _sparse(path: Path, size: int = SPARSE, head: bytes = b"") -> Path:
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


@pytest.mark.parametrize("reader", ["report", "baseline", "config", "compile log", "sidecar", "xspace", "json trace"])
def test_size_past_every_cap(files, tmp_path: Path, reader: str) -> None:  # noqa: F811
    """300 MB files (sparse: a JSON or TOML head, then zero bytes) where each reader looks."""
    good, good_baseline = files["root"] / "report.json", files["root"] / "baseline.json"
    if reader in ("report", "baseline", "config"):
        f = _sparse(tmp_path / ("pyproject.toml" if reader == "config" else "big.json"), head=b'{"a": "')
        args = {
            "report": ["check", f],
            "baseline": ["check", good, "--baseline", f],
            "config": ["check", good, "--baseline", good_baseline, "--config", f],
        }[reader]
        run_child("size", args, tmp_path, allowed=(2,))
    elif reader == "compile log":
        f = tmp_path / "compiles.jsonl"
        with open(f, "wb") as fh:  # a good record, then one line of 20 MB, then a good record
            line = json.dumps(files["records"][0]).encode() + b"\n"
            fh.write(line + b'{"function": "' + b"x" * (20 * 2**20) + b'"}\n' + line)
        run_child("size", ["compiles", f], tmp_path, allowed=(0,))
    else:
        logdir = base._trace_run(tmp_path, "h.xplane.pb", files["xspace"])
        run_dir = logdir / "plugins" / "profile" / "run1"
        if reader == "sidecar":
            _sparse(run_dir / "jaxdiag-h-p0.json", head=b'{"schema": "')
            run_child("size", ["report", logdir], tmp_path)
            run_child("size", ["compiles", logdir], tmp_path)
        elif reader == "xspace":
            _sparse(run_dir / "h2.xplane.pb", size=64 * 2**20)
            run_child("size", ["report", logdir], tmp_path)
        else:
            (run_dir / "h.xplane.pb").unlink()
            with gzip.open(run_dir / "h.trace.json.gz", "wb", compresslevel=1) as fh:
                fh.write(b'{"traceEvents": [')
                for _ in range(SPARSE // 2**20):
                    fh.write(b" " * 2**20)
            run_child("size", ["report", logdir], tmp_path, allowed=(2,))


# --- special files -----------------------------------------------------------------------------------------
SPECIALS = ["fifo", "/dev/zero", "/dev/null", "folder"]


def _special(kind: str, path: Path) -> Path:
    """A special file of ``kind`` at ``path`` (a link to the device for ``/dev/...``)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(kind)
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="no FIFOs or devices here")
@pytest.mark.parametrize("kind", SPECIALS)
@pytest.mark.parametrize("reader", ["report", "baseline", "config", "compile log", "sidecar", "xspace", "json trace"])
def test_special_files(files, tmp_path: Path, reader: str, kind: str) -> None:  # noqa: F811
    good, good_baseline = files["root"] / "report.json", files["root"] / "baseline.json"
    if reader in ("report", "baseline", "config", "compile log"):
        f = _special(kind, tmp_path / ("pyproject.toml" if reader == "config" else "special.json"))
        for args in {
            "report": [["check", f], ["diff", good, f], ["report", f], ["sharding", f]],
            "baseline": [["check", good, "--baseline", f]],
            "config": [["check", good, "--baseline", good_baseline, "--config", f]],
            "compile log": [["compiles", f], ["sharding", f]],
        }[reader]:
            run_child("special files", args, tmp_path, allowed=(0, 1, 2) if args[0] == "check" else (0, 2))
        return
    logdir = base._trace_run(tmp_path, "h.xplane.pb", files["xspace"])
    run_dir = logdir / "plugins" / "profile" / "run1"
    name = {"sidecar": "jaxdiag-h-p0.json", "xspace": "h2.xplane.pb", "json trace": "h2.trace.json.gz"}[reader]
    _special(kind, run_dir / name)
    run_child("special files", ["report", logdir], tmp_path)
    run_child("special files", ["compiles", logdir], tmp_path)
