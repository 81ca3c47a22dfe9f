"""Start (or reuse) an XProf server on a loopback port, and the addresses of its timeline.

XProf's server writes caches beside the trace files it serves (``*.SSTABLE``,
``*.hlo_proto.pb``), which would change the user's trace folder or fail on a
read-only one. It therefore serves a private logdir of links to the run's host
files (``~/.cache/jaxdiag/xprof/<key>/plugins/profile/<run>/``), one per run,
so a second ``jaxdiag open`` of the same run finds the server and caches the
first one left. The server listens on 127.0.0.1 only (``serve`` below), with
its gRPC worker port also given to it on loopback.

Trace-viewer times are milliseconds on the host's profiler clock, the clock of
``TraceFrames`` (``start_ns / 1e6``): checked against the events XProf returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from jaxdiag.xprof_tools.convert import XprofError

#: How long to wait for a new server to answer before giving up (it loads XProf's native module).
START_TIMEOUT_S = 90.0
_STATE = "server.json"


@dataclasses.dataclass(frozen=True)
class Server:
    """A running XProf server: its address, process id and the logdir it serves."""

    url: str
    pid: int
    logdir: str
    reused: bool = False

    def trace_viewer(self, run: str, host: str) -> str:
        """XProf's own page for this host's timeline (the full interface)."""
        return f"{self.url}/trace_viewer?" + urllib.parse.urlencode({"run": run, "host": host})

    def timeline(self, run: str, host: str, start_ms: float | None = None, end_ms: float | None = None) -> str:
        """The trace viewer itself, showing only ``[start_ms, end_ms]`` of this host when given."""
        return timeline_address(self.url, run, host, start_ms, end_ms)


def timeline_address(url: str, run: str, host: str, start_ms: float | None = None, end_ms: float | None = None) -> str:
    """The trace viewer's address for ``host`` of ``run`` on the server at ``url``, for a time range."""
    data = {"run": run, "tag": "trace_viewer@", "host": host}
    if start_ms is not None and end_ms is not None:
        data.update(start_time_ms=f"{start_ms:.3f}", end_time_ms=f"{end_ms:.3f}")
    data_url = "/data?" + urllib.parse.urlencode(data)
    return f"{url}/trace_viewer_index.html?is_streaming=true&is_oss=true&trace_data_url=" + urllib.parse.quote(
        data_url, safe=""
    )


def _folder_of(run_dir: str | Path, cache_root: Path | None = None) -> Path:
    root = cache_root or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jaxdiag" / "xprof"
    return root / hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]


def known_server(run_dir: str | Path, cache_root: Path | None = None) -> Server | None:
    """The server a ``jaxdiag open`` started for this run, if its process still runs (no request made)."""
    state = _folder_of(run_dir, cache_root) / _STATE
    try:
        known = json.loads(state.read_text())
        server = Server(str(known["url"]), int(known["pid"]), str(state.parent), reused=True)
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


def ensure_server(logdir: Path, *, timeout_s: float = START_TIMEOUT_S) -> Server:
    """The server already serving ``logdir``, or a new one started on a free loopback port."""
    state = logdir / _STATE
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        known = json.loads(state.read_text())
        server = Server(str(known["url"]), int(known["pid"]), str(logdir), reused=True)
        if _alive(server.pid) and _answers(server.url, timeout_s=2.0):
            return server
    server = start(logdir, timeout_s=timeout_s)
    with contextlib.suppress(OSError):
        state.write_text(json.dumps({"url": server.url, "pid": server.pid}))
    return server


def start(logdir: Path, *, timeout_s: float = START_TIMEOUT_S) -> Server:
    """Start ``python -m jaxdiag.xprof_tools.server`` on ``logdir``; wait (bounded) until it answers.

    The server outlives this process (it is started in its own session), so that
    the printed address keeps working; its log is ``xprof.log`` in ``logdir``.
    """
    port, grpc_port = free_port(), free_port()
    log = open(logdir / "xprof.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jaxdiag.xprof_tools.server", str(logdir), str(port), str(grpc_port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
    finally:
        log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise XprofError(f"the XProf server stopped at start (exit {proc.returncode}); see {logdir / 'xprof.log'}")
        if _answers(url, timeout_s=1.0):
            return Server(url, proc.pid, str(logdir))
        time.sleep(0.25)
    proc.kill()
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
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def serve(logdir: str, port: int, grpc_port: int) -> None:
    """Run XProf's server on 127.0.0.1:``port`` (instead of every interface)."""
    from xprof import server as xprof_server

    xprof_server._get_wildcard_address = lambda _port: "127.0.0.1"  # loopback only
    xprof_server.start_server(
        logdir=logdir, port=port, grpc_port=grpc_port, worker_service_address=f"127.0.0.1:{grpc_port}"
    )


if __name__ == "__main__":  # pragma: no cover - run as the server's process
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
