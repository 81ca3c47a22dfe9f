"""The real XProf server on a free loopback port: it serves the run, at the address ``jaxdiag open`` prints.

It listens on 127.0.0.1 only (read from ``/proc/net/tcp{,6}`` for every process
of the command's tree), serves nothing but the run it was started for, and is
gone once the command ends, however it ends.
"""

from __future__ import annotations

import gzip
import ipaddress
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from jaxdiag.xprof_tools import server as S
from tests.process_state import running

#: Bound on every wait for the command or the server (it loads XProf's native module).
WAIT_S = 120.0


def _get(url: str, headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=60) as response:  # loopback only
        assert response.status == 200
        body = response.read()
    return gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body


def _status(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture()
def serving(cpu_trace_dir, tmp_path, monkeypatch):
    """A started server on the session's CPU capture; stopped after the test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    files = sorted(Path(cpu_trace_dir.run_dir).glob("*.xplane.pb"))
    before = sorted(p.name for p in Path(cpu_trace_dir.run_dir).iterdir())
    with S.start_server(S.serving_folder(cpu_trace_dir.run_dir, files)) as server:
        yield server, cpu_trace_dir, files, before
    assert not running(server.pid)


def test_server_serves_the_run_at_the_printed_address(serving):
    server, trace, files, before = serving
    assert server.url.startswith("http://127.0.0.1:")
    run = Path(trace.run_dir).name
    host = files[0].name[: -len(".xplane.pb")]
    assert json.loads(_get(f"{server.url}/runs")) == [run]
    assert b"<html" in _get(server.home()).lower()
    # The trace viewer's page, and the data it asks for over a step's range, from this run.
    address = server.timeline(run, host, 0.0, 1e9)
    assert b"<html" in _get(address).lower()
    data_url = urllib.parse.parse_qs(urllib.parse.urlparse(address).query)["trace_data_url"][0]
    events = json.loads(_get(server.url + data_url + "&resolution=0"))["traceEvents"]
    assert any(e.get("name", "").startswith("train") for e in events)  # the StepTraceAnnotations of the run
    # The user's trace folder is left as it was: XProf's caches go to the private folder.
    assert sorted(p.name for p in Path(trace.run_dir).iterdir()) == before
    # While it runs, the HTML report finds it; once stopped, it does not.
    assert S.known_server(trace.run_dir) == server
    server.stop()
    assert S.known_server(trace.run_dir) is None


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


def test_server_serves_only_its_run_to_this_machine(serving, tmp_path):
    """Another folder by ``session_path``/``run_path``/``run``, another origin or Host: refused, nothing written."""
    server, trace, files, _ = serving
    run = Path(trace.run_dir).name
    host = files[0].name[: -len(".xplane.pb")]
    victim = tmp_path / "victim" / "plugins" / "profile" / "other_run"
    victim.mkdir(parents=True)
    shutil.copy(files[0], victim / files[0].name)
    listed = sorted(p.name for p in victim.iterdir())
    up = os.path.relpath(victim, Path(server.logdir) / "plugins" / "profile")
    refused = [
        f"/runs?session_path={victim}",
        f"/runs?run_path={victim.parent}",
        f"/data?session_path={victim}&run=other_run&tag=overview_page&host={host}",
        f"/data/plugin/profile/data?session_path={victim}&run=other_run&tag=trace_viewer@&host={host}",
        f"/data?run_path={victim.parent}&run=other_run&tag=hlo_stats&host={host}",
        f"/run_tools?session_path={victim}&run=other_run",
        f"/hosts?run_path={victim.parent}&run=other_run&tag=trace_viewer",
        "/data?" + urllib.parse.urlencode({"run": up, "tag": "overview_page", "host": host}),
        "/data?" + urllib.parse.urlencode({"run": run, "tag": "overview_page", "host": f"../../../{up}/{host}"}),
        "/data?" + urllib.parse.urlencode({"run": run, "tag": "overview_page", "hosts": f"{host},../x"}),
        f"/capture_profile?service_addr=127.0.0.1:1&duration=10&run={run}",
        "/generate_cache",
        f"/data/plugin/profile/generate_cache?session_path={victim}",
    ]
    for path in refused:
        assert _status(server.url + path) == 403, path
    ok = f"{server.url}/data?" + urllib.parse.urlencode({"run": run, "tag": "overview_page", "host": host})
    assert _status(ok) == 200
    for headers in (
        {"Host": "evil.example:80"},
        {"Host": "attacker.test"},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"},
    ):
        assert _status(ok, headers) == 403, headers
    assert _status(ok, {"Origin": server.url}) == 200
    assert _status(ok, method="POST") == 403
    assert sorted(p.name for p in victim.iterdir()) == listed  # XProf wrote no cache there


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (``/proc/<pid>/stat``'s parent ids)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += [p for p, parent in parents.items() if parent == pid]
    return tree


def _listening() -> dict[int, str]:
    """Socket inode -> ``address:port`` of every listening TCP socket on this machine (IPv4 and IPv6)."""
    found = {}
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host-order 32-bit words
            ip = ipaddress.ip_address(words) if width == 8 else ipaddress.IPv6Address(words)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                ip = ip.ipv4_mapped
            found[int(fields[9])] = f"{ip}:{int(port, 16)}"
    return found


def _listening_of(pids: list[int]) -> list[str]:
    """Listening TCP addresses of the sockets these processes hold."""
    table = _listening()
    held = []
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in table:
                held.append(table[int(target[8:-1])])
    return held


def _lines_until(proc: subprocess.Popen, marker: str, stderr: Path) -> list[str]:
    """The command's stdout lines up to the one starting with ``marker`` (bounded wait); ``stderr``: its file."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    while True:
        line = lines.get(timeout=WAIT_S)
        assert line is not None, (seen, stderr.read_text())
        seen.append(line)
        if line.startswith(marker):
            return seen


@pytest.mark.parametrize(
    ("how", "sigint_ignored"),
    [
        (signal.SIGINT, False),
        # Started in the background by a shell without job control: SIGINT comes ignored, yet Ctrl-C must stop it.
        (signal.SIGINT, True),
        (signal.SIGTERM, False),
        (signal.SIGHUP, False),
        (signal.SIGKILL, False),
    ],
)
def test_open_listens_on_loopback_only_and_ends_with_the_command(cpu_trace_dir, tmp_path, how, sigint_ignored):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    # stderr to a file, never an unread pipe; faulthandler, so that a command that does not end
    # shows where each of its threads stands (SIGABRT below) rather than only that it timed out.
    stderr = tmp_path / "stderr.txt"
    command = [sys.executable, "-X", "faulthandler", "-m", "jaxdiag", "open", str(cpu_trace_dir.logdir), "--step", "2"]
    if sigint_ignored:  # as a background job's shell leaves it: ignored across exec
        command = [
            sys.executable,
            "-c",
            "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])",
            *command,
        ]
    with stderr.open("w") as sink:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=sink, text=True, env=env)
    try:
        lines = _lines_until(proc, "timeline: ", stderr)
        pids = _tree(proc.pid)
        server_pid = int(lines[2].split("pid ")[1].split(",")[0])
        assert server_pid in pids
        held = _listening_of(pids)
        assert held and all(a.startswith("127.0.0.1:") for a in held), held
        # Every address printed answers, from the started server.
        home, timeline = lines[2].rsplit(" ", 1)[1], lines[3].split(" ", 1)[1]
        assert len(held) == 1 and home == f"http://{held[0]}/"
        assert b"<html" in _get(home).lower() and b"<html" in _get(timeline).lower()
        data_url = urllib.parse.parse_qs(urllib.parse.urlparse(timeline).query)["trace_data_url"][0]
        assert json.loads(_get(home.rstrip("/") + data_url + "&resolution=0"))["traceEvents"]
        proc.send_signal(how)
        try:
            status = proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            proc.wait(timeout=WAIT_S)
            raise AssertionError(
                f"jaxdiag open did not end on {how!r}; its threads:\n{stderr.read_text()[-6000:]}"
            ) from None
        assert status == (-signal.SIGKILL if how == signal.SIGKILL else 0), stderr.read_text()

        # The server follows the command within a bounded wait, and its port closes (a process's
        # main thread can show as exited while its other threads still hold the socket: wait for both).
        def gone() -> bool:
            return not running(server_pid) and held[0] not in _listening().values()

        for _ in range(int(WAIT_S * 10)):
            if gone():
                break
            threading.Event().wait(0.1)
        assert gone()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)


def test_open_resolves_relative_paths(cpu_trace_dir):
    run_dir = Path(cpu_trace_dir.run_dir)
    host_file = next(run_dir.glob("*.xplane.pb")).name
    for cwd, arg in ((run_dir, "."), (run_dir, host_file), (run_dir.parent, run_dir.name)):
        done = subprocess.run(
            [sys.executable, "-m", "jaxdiag", "open", arg, "--no-start"],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=WAIT_S,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == f"run {run_dir.name}", (arg, done.stdout)


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
        timeout=WAIT_S,
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
            [sys.executable, "-m", "jaxdiag", "open", str(cpu_trace_dir.logdir), *args],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )
        assert done.returncode == 2 and done.stderr.startswith("jaxdiag: error: "), (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1


def test_open_refuses_a_damaged_file_before_starting_a_server(cpu_trace_dir, tmp_path):
    """Truncated, random, empty or plane-less: one line naming the file, exit 2, no server started."""
    import random

    good = next(Path(cpu_trace_dir.run_dir).glob("*.xplane.pb")).read_bytes()
    rng = random.Random(23)
    cases = {
        "truncated": good[: len(good) // 2],
        "cut_by_one": good[:-1],
        "random": rng.randbytes(4096),
        "random_small": rng.randbytes(17),
        "empty": b"",
        "not_a_trace": b"\x00not a trace",
        "text": b"hello, this is a README\n" * 10,
    }
    cache = tmp_path / "cache"
    for name, data in cases.items():
        bad = tmp_path / name / f"{name}.xplane.pb"
        bad.parent.mkdir()
        bad.write_bytes(data)
        for args in ([str(bad)], [str(bad.parent)], [str(bad), "--step", "0", "--no-start"]):
            done = subprocess.run(
                [sys.executable, "-m", "jaxdiag", "open", *args],
                capture_output=True,
                text=True,
                env={**os.environ, "XDG_CACHE_HOME": str(cache)},
                timeout=WAIT_S,
            )
            assert done.returncode == 2, (name, args, done.stdout, done.stderr)
            assert str(bad) in done.stderr and len(done.stderr.strip().splitlines()) == 1, (name, done.stderr)
            assert "XProf" not in done.stdout
    assert not cache.exists()  # no server folder was prepared, so none was started
