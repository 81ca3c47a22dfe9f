"""Find the host files of one capture run from whatever path the user gives.

``jax.profiler.start_trace(logdir)`` writes ``<logdir>/plugins/profile/<run>/``
with one ``<host>.xplane.pb`` per host (and, on some versions, a
``<host>.trace.json.gz`` beside it). Each capture adds a run folder named by its
start time (``2026_11_22_18_03_05``), so the newest run is the greatest name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jaxdiag.errors import TraceFormatError

XPLANE_SUFFIX = ".xplane.pb"
JSON_SUFFIX = ".trace.json.gz"
_PROFILE_SUBDIR = Path("plugins") / "profile"
#: The sidecar ``jaxdiag.profile`` writes into a run folder (``capturing.sidecar.SIDECAR_GLOB``).
SIDECAR_GLOB = "jaxdiag-*.json"


@dataclasses.dataclass(frozen=True, slots=True)
class Discovered:
    """The files of one run.

    Attributes:
      run_dir: the ``plugins/profile/<run>`` folder (or the given file's folder).
      run: the run folder's name.
      files: one file per host, sorted by host name.
      kind: ``"xplane"`` or ``"json"`` (only when the run has no ``.xplane.pb``).
      runs: every run found beside this one, oldest first.
    """

    run_dir: Path
    run: str
    files: tuple[Path, ...]
    kind: str
    runs: tuple[str, ...] = ()


def host_name(path: Path) -> str:
    """The host a trace file belongs to: its name without the trace suffix."""
    name = path.name
    for suffix in (XPLANE_SUFFIX, JSON_SUFFIX):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def discover(path: str | Path, *, run: str | None = None, host: str | None = None) -> Discovered:
    """Find the trace files of one run under ``path``.

    Args:
      path: a logdir as given to ``jax.profiler.start_trace``, a ``plugins/profile``
        folder, a ``plugins/profile/<run>`` folder, or one trace file.
      run: the run folder to read; by default the newest (greatest name, then
        latest modification time) that holds trace files.
      host: keep only this host's file.

    Raises:
      TraceFormatError: the path is missing, is not a folder or trace file, is
        empty, holds no trace files, or ``run``/``host`` names nothing there.
    """
    p = Path(path).expanduser()
    try:
        return _discover(p, run, host)
    except OSError as exc:  # unreadable folder, broken link, permissions
        raise TraceFormatError(f"{exc.filename or p}: cannot read ({exc.strerror or exc})") from None


def _discover(p: Path, run: str | None, host: str | None) -> Discovered:
    if not p.exists():
        raise TraceFormatError(
            f"{p}: no such file or folder; give a logdir, a plugins/profile/<run> folder or a .xplane.pb file"
        )
    if p.is_file():
        if not p.name.endswith((XPLANE_SUFFIX, JSON_SUFFIX)):
            raise TraceFormatError(f"{p}: not a trace file; expected a *{XPLANE_SUFFIX} or *{JSON_SUFFIX} file")
        kind = "xplane" if p.name.endswith(XPLANE_SUFFIX) else "json"
        found = Discovered(p.parent, p.parent.name, (p,), kind)
        return _pick_host(found, host)
    if not p.is_dir():
        raise TraceFormatError(f"{p}: not a folder or a regular file")
    if not any(p.iterdir()):
        raise TraceFormatError(f"{p}: empty folder; no capture was written here")
    if _trace_files(p)[0]:
        return _pick_host(_run_from_dir(p, runs=()), host)
    profile_dir = next((d for d in (p / _PROFILE_SUBDIR, p / "profile") if d.is_dir()), p)
    runs = _runs(profile_dir)
    if not runs:
        _refuse_killed_capture(p, profile_dir)
        raise TraceFormatError(
            f"{p}: no trace files (*{XPLANE_SUFFIX} or *{JSON_SUFFIX}) here or in plugins/profile/<run>/"
        )
    names = tuple(r.name for r in runs)
    if run is not None:
        chosen = [r for r in runs if r.name == run]
        if not chosen:
            raise TraceFormatError(f"{profile_dir}: no run named {run!r}; available runs: {', '.join(names)}")
        return _pick_host(_run_from_dir(chosen[0], names), host)
    return _pick_host(_run_from_dir(runs[-1], names), host)


def _refuse_killed_capture(p: Path, profile_dir: Path) -> None:
    """Say so when a run folder holds only a capture's sidecar: the program was killed while capturing.

    ``jaxdiag.profile`` writes its sidecar when the capture starts, and the trace
    only when it stops; SIGKILL or a crash in between leaves the sidecar alone.
    """
    folders = [p] if p.name != _PROFILE_SUBDIR.name else []
    folders += sorted(d for d in profile_dir.iterdir() if d.is_dir()) if profile_dir.is_dir() else []
    for folder in folders:
        sidecars = sorted(folder.glob(SIDECAR_GLOB))
        if sidecars:
            raise TraceFormatError(
                f"{folder}: a capture started here ({sidecars[0].name}) but wrote no trace: the program "
                "ended before the capture stopped (killed with SIGKILL, or crashed); capture again"
            )


def _trace_files(folder: Path) -> tuple[list[Path], str]:
    """The xplane files of ``folder``, else its JSON traces, with their kind."""
    xplanes = sorted(f for f in folder.glob(f"*{XPLANE_SUFFIX}") if f.is_file())
    if xplanes:
        return xplanes, "xplane"
    return sorted(f for f in folder.glob(f"*{JSON_SUFFIX}") if f.is_file()), "json"


def _runs(profile_dir: Path) -> list[Path]:
    """Run folders holding trace files, oldest first (by name, then mtime)."""
    runs = [d for d in profile_dir.iterdir() if d.is_dir() and _trace_files(d)[0]]
    return sorted(runs, key=lambda d: (d.name, d.stat().st_mtime))


def _run_from_dir(run_dir: Path, runs: tuple[str, ...]) -> Discovered:
    files, kind = _trace_files(run_dir)
    return Discovered(run_dir, run_dir.name, tuple(files), kind, runs)


def _pick_host(found: Discovered, host: str | None) -> Discovered:
    if host is None:
        return found
    chosen = tuple(f for f in found.files if host_name(f) == host)
    if not chosen:
        hosts = ", ".join(host_name(f) for f in found.files)
        raise TraceFormatError(f"{found.run_dir}: no host named {host!r}; available hosts: {hosts}")
    return dataclasses.replace(found, files=chosen)
