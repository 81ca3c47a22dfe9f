"""Damaged, hostile or impossible files given to each command: exit 0 or 2 with one line naming the file.

One test per class of failure: a deeply nested compile-log line, malformed JSON
traces, a saved report with ``notes: null`` or numbers no profile can hold,
baselines and sidecars with negative figures, a plain JSON trace under the
``.trace.json.gz`` name, a gzip bomb, and special files (a FIFO, ``/dev/zero``)
where a regular file belongs. Special files are given to a child process with a
timeout, so that a reader that blocks fails the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from report_builders import make_report
from xspace_builders import Kernel, gpu_xspace

from jaxdiag.checks.baseline import baseline_from_report
from jaxdiag.cli.app import main


def run(args: list[str]) -> tuple[int, str]:
    """The exit status and stderr of the CLI run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, err.getvalue()


def assert_refused(args: list[Any], file: Path, *words: str) -> str:
    """``args`` exit 2 with one error line that names ``file`` and holds ``words``."""
    code, err = run(args)
    lines = [line for line in err.splitlines() if not line.startswith("jaxdiag: warning:")]
    assert code == 2 and "Traceback" not in err, (code, err[-1500:])
    assert len(lines) == 1 and lines[0].startswith(f"jaxdiag: error: {file}"), err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def assert_read(args: list[Any], allowed: tuple[int, ...] = (0,)) -> str:
    code, err = run(args)
    assert code in allowed and "Traceback" not in err, (code, err[-1500:])
    return err


STEPS = [
    {"step": i, "wall_ms": 10.0 + i % 3, "device_busy_ms": 8.0, "host_wait_ms": 1.0, "tokens": 512.0} for i in range(8)
]


@pytest.fixture
def saved(tmp_path: Path) -> dict[str, Any]:
    """A saved report and its baseline, as dicts and files."""
    report = make_report(steps=STEPS, recompiles=[], findings=())
    (tmp_path / "report.json").write_text(report.to_json())
    baseline = baseline_from_report(report).to_dict()
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    return {"report": json.loads(report.to_json()), "baseline": baseline, "root": tmp_path}


def _capture(tmp_path: Path, name: str = "h.xplane.pb", data: bytes | None = None) -> Path:
    run_dir = tmp_path / "logdir" / "plugins" / "profile" / "run1"
    run_dir.mkdir(parents=True, exist_ok=True)
    if data is None:
        data = gpu_xspace(kernels=[Kernel(0, f"fusion_{i}", i * 100, 50) for i in range(5)], steps=[(0, 0, 300)])
    (run_dir / name).write_bytes(data)
    return run_dir


# --- F11: a compile-log line nested thousands deep ---------------------------------------------------------
def test_a_deeply_nested_compile_log_line_is_skipped_by_every_reader(tmp_path: Path) -> None:
    from tests import sharding_programs as programs

    records = [json.dumps(r) for r in programs.sharding_change().records]
    deep = '{"function": ' + "[" * 100_000 + "]" * 100_000 + "}"
    text = "\n".join([records[0], deep, *records[1:]]) + "\n"
    log = tmp_path / "compiles.jsonl"
    log.write_text(text)
    err = assert_read(["compiles", log])
    assert "line 2" not in err and f"{log}:2: nested too deeply" in err, err
    assert_read(["sharding", log])
    run_dir = _capture(tmp_path)
    (run_dir / "compiles-h-1.jsonl").write_text(text)  # found beside the trace
    assert_read(["report", tmp_path / "logdir"])
    assert_read(["report", tmp_path / "logdir", "--compile-log", log])
    assert_read(["compiles", tmp_path / "logdir"])


# --- F12: malformed JSON traces ---------------------------------------------------------------------------
_META = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}}]
_EVENT = {"ph": "X", "pid": 1, "tid": 1, "name": "step", "ts": 1, "dur": 2}
MALFORMED_TRACES = {
    "truncated": (json.dumps({"traceEvents": _META + [_EVENT] * 50}).encode()[:400], "not a JSON trace"),
    "a list of numbers": (b"[1, 2, 3]", "no complete"),
    "a string": (b'"traceEvents"', "no 'traceEvents' list"),
    "traceEvents an object": (b'{"traceEvents": {"a": 1}}', "no 'traceEvents' list"),
    "events not objects": (b'{"traceEvents": [1, "x", null, []]}', "no complete"),
    "ts as text": (json.dumps({"traceEvents": [*_META, {**_EVENT, "ts": "1"}]}).encode(), "ts is str"),
    "pid a list": (json.dumps({"traceEvents": [*_META, {**_EVENT, "pid": [1]}]}).encode(), "pid or tid"),
    "tid an object": (json.dumps({"traceEvents": [*_META, {**_EVENT, "tid": {"a": 1}}]}).encode(), "pid or tid"),
    "metadata pid a list": (
        json.dumps({"traceEvents": [{**_META[0], "pid": [1]}, {**_EVENT, "pid": [1]}]}).encode(),
        "pid or tid",
    ),
    "NaN time": (b'{"traceEvents": [' + json.dumps(_META[0]).encode() + b', {"ph": "X", "pid": 1, "ts": NaN}]}', "nan"),
    "1e308 time": (json.dumps({"traceEvents": [*_META, {**_EVENT, "ts": 1e308}]}).encode(), "out of range"),
    "negative duration": (json.dumps({"traceEvents": [*_META, {**_EVENT, "dur": -5}]}).encode(), "negative duration"),
    "nested": (b'{"traceEvents": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED_TRACES))
def test_malformed_json_traces_are_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    content, words = MALFORMED_TRACES[kind]
    run_dir = _capture(tmp_path, "h.trace.json.gz", gzip.compress(content))
    assert_refused(["report", tmp_path / "logdir"], run_dir / "h.trace.json.gz", words)


def test_a_negative_duration_among_good_events_is_dropped_and_said(tmp_path: Path) -> None:
    events = [*_META, _EVENT, {**_EVENT, "ts": 10}, {**_EVENT, "ts": 20, "dur": -3}]
    _capture(tmp_path, "h.trace.json.gz", gzip.compress(json.dumps({"traceEvents": events}).encode()))
    code, _ = run(["report", tmp_path / "logdir", "--json", "-o", tmp_path / "r.json"])
    assert code == 0
    notes = json.loads((tmp_path / "r.json").read_text())["notes"]
    assert any("1 malformed JSON trace events skipped (first: a negative duration" in n for n in notes), notes


# --- F18: a plain JSON trace under the gzip name ----------------------------------------------------------
def test_a_plain_json_trace_named_trace_json_gz_is_read_as_a_trace(tmp_path: Path) -> None:
    doc = {"traceEvents": [*_META, _EVENT, {**_EVENT, "ts": 10}]}
    run_dir = _capture(tmp_path, "h.trace.json.gz", json.dumps(doc).encode())
    for target in (run_dir / "h.trace.json.gz", tmp_path / "logdir"):
        code, err = run(["report", target, "--json", "-o", tmp_path / "r.json"])
        assert code == 0 and "saved report" not in err, err
        assert json.loads((tmp_path / "r.json").read_text())["source"]["hosts"] == ["h"]


# --- F8: a gzip bomb --------------------------------------------------------------------------------------
def test_a_gzip_bomb_is_refused_before_it_fills_memory(tmp_path: Path) -> None:
    from jaxdiag.trace.json_trace import MAX_JSON_BYTES

    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        block = b" " * 2**20
        for _ in range(MAX_JSON_BYTES // len(block) + 8):
            f.write(block)
    assert len(packed.getvalue()) < MAX_JSON_BYTES // 500  # a few hundred kB that inflate past the limit
    run_dir = _capture(tmp_path, "h.trace.json.gz", packed.getvalue())
    assert_refused(["report", tmp_path / "logdir"], run_dir / "h.trace.json.gz", "decompresses to more than")


# --- F13: notes null, and fields of the wrong type ---------------------------------------------------------
COMMANDS_ON_A_REPORT = [
    ["check", "{f}"],
    ["check", "{good}", "--baseline", "{f}"],
    ["diff", "{good}", "{f}"],
    ["report", "{f}"],
    ["report", "{f}", "--html", "{tmp}/r.html"],
    ["sharding", "{f}"],
    ["baseline", "{f}", "-o", "{tmp}/b.json"],
]


def _args(command: list[str], f: Path, saved: dict[str, Any]) -> list[str]:
    root = saved["root"]
    return [a.format(f=f, good=root / "report.json", tmp=root) for a in command]


@pytest.mark.parametrize("command", COMMANDS_ON_A_REPORT, ids=lambda c: " ".join(c[:3]))
def test_a_saved_report_with_null_notes_is_read(saved: dict[str, Any], command: list[str]) -> None:
    report = copy.deepcopy(saved["report"])
    report["notes"] = None
    f = saved["root"] / "nulls.json"
    f.write_text(json.dumps(report))
    assert_read(_args(command, f, saved), allowed=(0, 1))


@pytest.mark.parametrize(
    ("where", "value", "words"),
    [
        (("notes",), 5, "notes: a number, not a list"),
        (("notes",), ["ok", {"a": 1}], "not a list of text"),
        (("source",), "x", "source: a string, not an object"),
        (("steps", 2, "wall_ms"), "12 ms", "steps[2].wall_ms: text"),
    ],
)
def test_a_saved_report_field_of_the_wrong_type_is_named(saved, where: tuple, value: Any, words: str) -> None:
    report = copy.deepcopy(saved["report"])
    parent = report
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    f = saved["root"] / "typed.json"
    f.write_text(json.dumps(report))
    for command in COMMANDS_ON_A_REPORT:
        assert_refused(_args(command, f, saved), f, words)


# --- F14 and F7/F17: numbers no profile can hold ----------------------------------------------------------
@pytest.mark.parametrize(
    ("where", "value", "words"),
    [
        (("steps", 3, "wall_ms"), 1e308, "steps[3].wall_ms: 1e+308 is out of range"),
        (("steps", 0, "host_wait_ms"), -1e308, "out of range"),
        (("steps", 1, "device_busy_ms"), -4.0, "steps[1].device_busy_ms: -4.0 is negative"),
        (("steps", 1, "tokens"), -512, "negative"),
        (("small_ops", "count"), 10**30, "out of range"),
    ],
)
def test_a_saved_report_with_an_impossible_number_is_refused(saved, where: tuple, value: Any, words: str) -> None:
    report = copy.deepcopy(saved["report"])
    parent = report
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    f = saved["root"] / "impossible.json"
    f.write_text(json.dumps(report))
    for command in COMMANDS_ON_A_REPORT:
        assert_refused(_args(command, f, saved), f, words)


def test_a_saved_report_with_nan_reads_it_as_unknown(saved) -> None:
    """``json.dumps(report.to_dict())`` writes NaN; jaxdiag itself writes null for it."""
    f = saved["root"] / "nan.json"
    f.write_text(json.dumps(saved["report"]).replace('"wall_ms": 10.0', '"wall_ms": NaN', 1))
    for command in COMMANDS_ON_A_REPORT:
        assert_read(_args(command, f, saved), allowed=(0, 1))
    f.write_text(json.dumps(saved["report"]).replace('"wall_ms": 10.0', '"wall_ms": 1e999', 1))  # a float inf
    assert_refused(["check", f], f, "wall_ms: inf is out of range")


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("median", -5.0, "step_time_ms.median: -5.0 is negative"),
        ("median", 1e308, "out of range"),
        ("iqr", -1.0, "negative"),
    ],
)
def test_a_baseline_with_an_impossible_figure_is_refused(saved, key: str, value: float, words: str) -> None:
    baseline = copy.deepcopy(saved["baseline"])
    baseline["step_time_ms"][key] = value
    f = saved["root"] / "nonsense.json"
    f.write_text(json.dumps(baseline))
    assert_refused(["check", saved["root"] / "report.json", "--baseline", f], f, words)


def test_a_sidecar_with_negative_tokens_is_flagged_or_refused(tmp_path: Path) -> None:
    run_dir = _capture(tmp_path)
    side = run_dir / "jaxdiag-h-p0.json"
    side.write_text(json.dumps({"schema": "jaxdiag.sidecar/1", "host": "h", "steps": {"0": {"tokens": -64}}}))
    # The report stands on the trace alone: it skips the sidecar and says why.
    code, _ = run(["report", tmp_path / "logdir", "--json", "-o", tmp_path / "r.json"])
    assert code == 0
    notes = json.loads((tmp_path / "r.json").read_text())["notes"]
    assert any(f"capture sidecar skipped: {side}: steps.0.tokens: -64 is negative" in n for n in notes), notes
    assert json.loads((tmp_path / "r.json").read_text())["steps"][0].get("tokens") is None
    # `compiles` reads the sidecar for its records: it refuses it.
    assert_refused(["compiles", tmp_path / "logdir"], side, "steps.0.tokens: -64 is negative")


# --- F10: special files -----------------------------------------------------------------------------------
def _child(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from jaxdiag.cli.app import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("option", ["--baseline", "--config", "report", "diff"])
def test_a_special_file_is_refused_without_waiting_for_it(saved, special: str, option: str) -> None:
    root = saved["root"]
    if special == "fifo":
        path = root / "pipe.json"
        os.mkfifo(path)
    else:
        path = Path(special)
        if not path.exists():
            pytest.skip("no /dev/zero here")
    good = root / "report.json"
    args = {
        "--baseline": ["check", good, "--baseline", path],
        "--config": ["check", good, "--baseline", root / "baseline.json", "--config", path],
        "report": ["report", path],
        "diff": ["diff", good, path],
    }[option]
    done = _child(args, root)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"jaxdiag: error: {path}"), done.stderr


# --- F15: the C++ parser's own log lines --------------------------------------------------------------------
@pytest.mark.parametrize("command", ["report", "sharding", "check"])
def test_a_corrupt_xspace_gives_our_one_line_and_not_the_parsers_log(tmp_path: Path, command: str) -> None:
    """A kernel name that is not UTF-8: the C++ protobuf parser logs two lines to file descriptor 2
    before it raises; only jaxdiag's line may be seen (a child process, to see descriptor 2)."""
    good = gpu_xspace(kernels=[Kernel(0, f"fusion_{i}", i * 100, 50) for i in range(5)], steps=[(0, 0, 300)])
    at = good.index(b"fusion_1")
    run_dir = _capture(tmp_path, data=good[:at] + b"\xff" + good[at + 1 :])
    done = _child([command, tmp_path / "logdir"], tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()  # one line: the parser's own log lines are not shown
    # (jaxlib 0.8's reader adds no reason of its own; later ones add "(Failed to parse XSpace from array)")
    assert line.startswith(
        f"jaxdiag: error: {run_dir / 'h.xplane.pb'}: corrupt XSpace, the protobuf parser rejected it"
    )


# --- F7: negative durations and device facts in an XSpace ---------------------------------------------------
def _report_json(tmp_path: Path) -> dict[str, Any]:
    code, err = run(["report", tmp_path / "logdir", "--json", "-o", tmp_path / "r.json"])
    assert code == 0, err
    return json.loads((tmp_path / "r.json").read_text())


def test_a_negative_event_duration_is_dropped_and_said(tmp_path: Path) -> None:
    kernels = [Kernel(0, "fusion_1", 100, -50_000), *(Kernel(0, f"fusion_{i}", i * 100, 50) for i in range(2, 5))]
    _capture(tmp_path, data=gpu_xspace(kernels=kernels, steps=[(0, 0, 600)]))
    report = _report_json(tmp_path)
    assert any("dropped 1 event(s) with a negative duration" in n for n in report["notes"]), report["notes"]
    assert all(v >= 0 for s in report["steps"] for k, v in s.items() if k.endswith("_ms") and v is not None)


def test_negative_device_facts_are_left_unknown_and_said(tmp_path: Path) -> None:
    from xspace_builders import H100_STATS

    stats = {**H100_STATS, "core_count": -132, "memory_bandwidth": -3352320000000}
    _capture(
        tmp_path, data=gpu_xspace(kernels=[Kernel(0, "fusion_1", 100, 50)], steps=[(0, 0, 300)], device_stats=stats)
    )
    report = _report_json(tmp_path)
    (device,) = report["source"]["devices"]
    assert device["core_count"] is None and device["memory_bandwidth_bps"] is None
    assert device["memory_bytes"] == H100_STATS["memory_size"]
    assert any("core_count is negative for 1 device(s)" in n for n in report["notes"]), report["notes"]
