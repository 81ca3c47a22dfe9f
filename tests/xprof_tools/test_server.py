"""The real XProf server on a free loopback port: it serves the run, at the address ``jaxdiag open`` prints."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from jaxdiag.xprof_tools import server as S


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:  # loopback only
        assert response.status == 200
        body = response.read()
    return gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body


@pytest.fixture()
def serving(cpu_trace_dir, tmp_path, monkeypatch):
    """A started server on the session's CPU capture; killed after the test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    files = sorted(Path(cpu_trace_dir.run_dir).glob("*.xplane.pb"))
    before = sorted(p.name for p in Path(cpu_trace_dir.run_dir).iterdir())
    logdir = S.serving_folder(cpu_trace_dir.run_dir, files)
    server = S.ensure_server(logdir)
    try:
        yield server, cpu_trace_dir, files, before
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def test_server_serves_the_run_at_the_printed_address(serving):
    server, trace, files, before = serving
    assert server.url.startswith("http://127.0.0.1:") and not server.reused
    run = Path(trace.run_dir).name
    host = files[0].name[: -len(".xplane.pb")]
    assert json.loads(_get(f"{server.url}/runs")) == [run]
    # The trace viewer's page, and the data it asks for over a step's range, from this run.
    address = server.timeline(run, host, 0.0, 1e9)
    assert b"<html" in _get(address).lower()
    data_url = urllib.parse.parse_qs(urllib.parse.urlparse(address).query)["trace_data_url"][0]
    events = json.loads(_get(server.url + data_url + "&resolution=0"))["traceEvents"]
    assert any(e.get("name", "").startswith("train") for e in events)  # the StepTraceAnnotations of the run
    # The user's trace folder is left as it was: XProf's caches go to the private folder.
    assert sorted(p.name for p in Path(trace.run_dir).iterdir()) == before
    # A second open finds the same server.
    again = S.ensure_server(Path(server.logdir))
    assert again.reused and again.url == server.url
    assert S.known_server(trace.run_dir) == again


def test_html_report_shows_the_address_beside_each_finding(serving):
    import html

    from jaxdiag.render.html import render
    from jaxdiag.reporting.build import report

    server, trace, _, _ = serving
    r = report(trace.run_dir)
    page = render(r)
    shown = [f for f in r.findings if f.kind != "loader" or f.time_lost_ms > 0]
    for f in shown:
        where = f.evidence.get("where")
        if where:
            address = server.timeline(where["run"], where["host"], where["start_ms"], where["end_ms"])
            assert html.escape(address) in page


def test_timeline_address_carries_the_range():
    address = S.timeline_address("http://127.0.0.1:1", "run1", "host a", 1.5, 2.25)
    inner = urllib.parse.parse_qs(urllib.parse.urlparse(address).query)["trace_data_url"][0]
    params = urllib.parse.parse_qs(urllib.parse.urlparse(inner).query)
    assert params == {
        "run": ["run1"],
        "tag": ["trace_viewer@"],
        "host": ["host a"],
        "start_time_ms": ["1.500"],
        "end_time_ms": ["2.250"],
    }


def test_open_command_prints_the_place_without_starting(cpu_trace_dir):
    done = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "open", str(cpu_trace_dir.logdir), "--step", "2", "--no-start"],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "step 2" and "step 2" in lines[1] and "ms on the profiler clock" in lines[1]


def test_open_command_bad_input(cpu_trace_dir, tmp_path):
    for args in (
        ["--finding", "999", "--no-start"],
        ["--step", "999", "--no-start"],
        ["--step", "1", "--finding", "1"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "jaxdiag", "open", str(cpu_trace_dir.logdir), *args], capture_output=True, text=True
        )
        assert done.returncode == 2 and done.stderr.startswith("jaxdiag: error: "), (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\x00not a trace")
    done = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "open", str(bad), "--step", "0", "--no-start"], capture_output=True, text=True
    )
    assert done.returncode == 2 and str(bad) in done.stderr and len(done.stderr.strip().splitlines()) == 1
