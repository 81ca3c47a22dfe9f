"""Start an XProf server for one run, on loopback only, that lives as long as its ``jaxdiag open``.

XProf's server writes caches beside the trace files it serves (``*.SSTABLE``,
``*.op_stats_v2.pb``), which would change the user's trace folder or fail on a
read-only one. It therefore serves a private logdir of links to the run's host
files (``~/.cache/jaxdiag/xprof/<key>/plugins/profile/<run>/``), one per run,
so a later ``jaxdiag open`` of the same run finds the caches the first one left.

What the server opens and answers:

- one HTTP port, bound to 127.0.0.1. XProf's own launcher also starts a gRPC
  worker service that listens on every interface without authentication; it
  serves only distributed processing, which one run does not need, so it is
  never started (``serve`` builds the server from XProf's parts instead);
- only the run it was started for, to this machine's own pages (``guard``);
- only while the command runs: the server reads its standard input, a pipe
  from the command, and exits when that closes, so it ends with the command
  however the command ends (Ctrl-C, SIGTERM, SIGKILL, a crash); ``Server.stop``
  ends it at once.

Trace-viewer times are milliseconds on the host's profiler clock, the clock of
``TraceFrames`` (``start_ns / 1e6``): checked against the events XProf returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxdiag.xprof_tools.convert import XprofError

#: How long to wait for a new server to answer before giving up (it loads XProf's native module).
START_TIMEOUT_S = 90.0
#: How long ``stop`` waits for the server to exit before killing it.
STOP_TIMEOUT_S = 10.0
_STATE = "server.json"


@dataclasses.dataclass(frozen=True)
class Server:
    """A running XProf server: its address, process id and the logdir it serves."""

    url: str
    pid: int
    logdir: str
    process: subprocess.Popen[bytes] | None = dataclasses.field(default=None, compare=False, repr=False)

    def home(self) -> str:
        """XProf's own interface (every tool of the served run)."""
        return f"{self.url}/"

    def timeline(self, run: str, host: str, start_ms: float | None = None, end_ms: float | None = None) -> str:
        """The trace viewer itself, showing only ``[start_ms, end_ms]`` of this host when given."""
        return timeline_address(self.url, run, host, start_ms, end_ms)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """End the server and its process group (bounded wait, then SIGKILL); forget its address."""
        with contextlib.suppress(OSError):
            state = Path(self.logdir) / _STATE
            if json.loads(state.read_text()).get("pid") == self.pid:
                state.unlink()
        proc = self.process
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout_s)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def timeline_address(url: str, run: str, host: str, start_ms: float | None = None, end_ms: float | None = None) -> str:
    """The trace viewer's address for ``host`` of ``run`` on the server at ``url``, for a time range."""
    data = {"run": str(run), "tag": "trace_viewer@", "host": str(host)}
    if start_ms is not None and end_ms is not None:
        try:  # a saved report's numbers may be anything: no range then
            data.update(start_time_ms=f"{float(start_ms):.3f}", end_time_ms=f"{float(end_ms):.3f}")
        except (TypeError, ValueError):
            pass
    data_url = "/data?" + urllib.parse.urlencode(data)
    return f"{url}/trace_viewer_index.html?is_streaming=true&is_oss=true&trace_data_url=" + urllib.parse.quote(
        data_url, safe=""
    )


def _folder_of(run_dir: str | Path, cache_root: Path | None = None) -> Path:
    root = cache_root or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jaxdiag" / "xprof"
    return root / hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]


def known_server(run_dir: str | Path, cache_root: Path | None = None) -> Server | None:
    """The server a running ``jaxdiag open`` serves this run on, if its process still runs (no request made)."""
    state = _folder_of(run_dir, cache_root) / _STATE
    try:
        known = json.loads(state.read_text())
        server = Server(str(known["url"]), int(known["pid"]), str(state.parent))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return server if _alive(server.pid) else None


def serving_folder(run_dir: str | Path, files: Sequence[str | Path], cache_root: Path | None = None) -> Path:
    """The private logdir for one run, with links to its host files (made if missing)."""
    run_dir = Path(run_dir).resolve()
    logdir = _folder_of(run_dir, cache_root)
    run = logdir / "plugins" / "profile" / run_dir.name
    try:
        run.mkdir(parents=True, exist_ok=True)
        for f in files:
            source = Path(f).resolve()
            link = run / source.name
            if link.is_symlink() and link.resolve() == source:
                continue
            if link.exists() or link.is_symlink():
                link.unlink()
            os.symlink(source, link)
    except OSError as exc:
        raise XprofError(f"{run}: cannot prepare a folder for XProf ({exc.strerror or exc})") from None
    return logdir


def start_server(logdir: Path, *, timeout_s: float = START_TIMEOUT_S) -> Server:
    """Start ``python -m jaxdiag.xprof_tools.server`` on ``logdir``; wait (bounded) until it answers.

    The server runs in its own process group (``stop`` ends the group) and ends
    when this process closes the pipe on its standard input, or exits; its log
    is ``xprof.log`` in ``logdir``.
    """
    port = free_port()
    log = open(logdir / "xprof.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jaxdiag.xprof_tools.server", str(logdir), str(port)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
    finally:
        log.close()
    server = Server(f"http://127.0.0.1:{port}", proc.pid, str(logdir), proc)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise XprofError(f"the XProf server stopped at start (exit {proc.returncode}); see {logdir / 'xprof.log'}")
        if _answers(server.url, timeout_s=1.0):
            with contextlib.suppress(OSError):
                (logdir / _STATE).write_text(json.dumps({"url": server.url, "pid": server.pid}))
            return server
        time.sleep(0.25)
    server.stop()
    raise XprofError(f"the XProf server did not answer within {timeout_s:.0f} s; see {logdir / 'xprof.log'}")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def _answers(url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/runs", timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def serve(logdir: str, port: int) -> None:
    """Run XProf's web application on 127.0.0.1:``port`` behind ``Guard``, until standard input closes.

    This is what XProf's ``start_server`` does, less the gRPC worker service (see
    the module docstring) and the capture button, and with the address given.
    """
    from cheroot import wsgi
    from xprof import server as xprof_server

    from jaxdiag.xprof_tools.guard import Guard

    context: Any = xprof_server.TBContext(
        logdir, xprof_server.DataProvider(logdir), xprof_server.TBContext.Flags(False)
    )
    context.hide_capture_profile_button = True
    context.enable_tab_name_label = False
    context.src_prefix = None
    plugin = xprof_server.ProfilePluginLoader().load(context)
    runs = [p.name for p in (Path(logdir) / "plugins" / "profile").iterdir() if p.is_dir()]
    httpd = wsgi.Server(("127.0.0.1", port), Guard(xprof_server.make_wsgi_app(plugin), port, runs))

    def stop_when_stdin_closes() -> None:
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.read(4096):
                pass
        os._exit(0)

    threading.Thread(target=stop_when_stdin_closes, daemon=True).start()
    httpd.start()


if __name__ == "__main__":  # pragma: no cover - run as the server's process
    serve(sys.argv[1], int(sys.argv[2]))
