"""Read one host's ``.xplane.pb`` into event columns, device facts and metadata.

Parsing uses ``jaxlib._profile_data`` (the XSpace reader behind
``jax.profiler.ProfileData``, reached through ``jaxdiag.jax_internals``), which
imports in milliseconds without jax.
``collect_host`` works on any objects shaped like its planes, lines and events,
so the Chrome-JSON fallback reader shares every rule here. ``device_plane``
reads device planes, and ``host_plane`` says how host events are categorised. ``read_planes``
and ``join_host`` let ``reading`` read a file's planes in two processes. Before
parsing, ``prepared.prepare`` reads what it can of the bytes in bulk (Python
frames cut out, runtime threads and device lines decoded); the rules here then
apply to its columns as to the reader's events.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.columns import HostColumns
from jaxdiag.trace.device_plane import device_row, read_device_plane, scalar_stats
from jaxdiag.trace.host_plane import HOST_PLANE, read_host_line, read_host_plane
from jaxdiag.trace.prepared import PreparedSpace, prepare
from jaxdiag.trace.wire import check_wire

__all__ = ["HOST_PLANE", "HostColumns", "check_wire", "collect_host", "join_host", "read_planes", "read_xspace"]

META_PLANES = ("/host:metadata", "Task Environment")
_DEVICE_PLANE = re.compile(r"^/device:([A-Z]+):(\d+)$")
#: ``/device:TPU:0 SparseCore 1``: a SparseCore of TPU core 0, not a device of its own.
_SPARSECORE_PLANE = re.compile(r"^/device:TPU:(\d+) SparseCore (\d+)$")


def read_xspace(data: bytes, host: str, *, source: str, include_python: bool = False) -> HostColumns:
    """Parse one serialized XSpace (one host) into columns.

    Args:
      data: the bytes of a ``.xplane.pb`` file.
      host: the host name to stamp on every row.
      source: the file name, for error messages.
      include_python: keep Python-tracer frames (category ``python``).

    Raises:
      TraceFormatError: empty, truncated or not an XSpace.
    """
    check_wire(data, source)
    space = _prepare(data, source, None, include_python)
    planes = _parse(space.data, source)
    if not planes:
        raise TraceFormatError(f"{source}: no profile planes; not a jax.profiler capture")
    try:
        return collect_host(planes, host, include_python=include_python, prepared=space)
    except _EVENT_ERRORS as exc:
        raise _unreadable(source, exc) from None


def read_planes(
    data: bytes,
    host: str,
    planes: Sequence[tuple[str, Sequence[tuple[str, str]] | None]],
    *,
    source: str,
    accelerated: bool,
    include_python: bool = False,
    keep: list[Any] | None = None,
    prepared: PreparedSpace | None = None,
) -> list[HostColumns]:
    """Parse some planes of one host's XSpace (see ``wire.sub_space``) into pieces for ``join_host``.

    Args:
      data: the serialized planes.
      host: the host name.
      planes: what ``data`` holds, plane by plane: its name, and ``None`` to read it
        whole (one piece), or the ``(name, label)`` of each of its lines there (one
        piece per line; ``label`` is the line's name in the whole plane, see
        ``unique_labels``). Only host planes of accelerated hosts are read by line.
      source: the file name, for error messages.
      accelerated: whether the whole file (not only these planes) has device planes.
      include_python: keep Python-tracer frames.
      keep: where to leave the parsed planes instead of freeing them, for a
        process about to exit (freeing a million events takes a few hundredths
        of a second).
      prepared: what ``prepared.prepare`` (or, for host threads cut out by
        ``reading``, ``host_bytes.prepare_lines``) already read of ``data``
        (default: prepared here).

    Raises:
      TraceFormatError: the parser rejects the bytes, they hold other planes or
        lines than ``planes`` says, or the events cannot be read.
    """
    space = prepared if prepared is not None else _prepare(data, source, accelerated, include_python)
    parsed = _parse(space.data, source)
    if keep is not None:
        keep.append(parsed)
    if [p.name for p in parsed] != [name for name, _ in planes]:
        raise TraceFormatError(f"{source}: the planes cut out of the file read differently")
    pieces = []
    try:
        for index, (plane, (_, lines)) in enumerate(zip(parsed, planes)):
            if lines is None:
                piece = HostColumns(host)
                _read_plane(piece, plane, accelerated, include_python, space, index)
                pieces.append(piece)
                continue
            parsed_lines = list(plane.lines)
            if not accelerated or plane.name != HOST_PLANE or [x.name for x in parsed_lines] != [n for n, _ in lines]:
                raise TraceFormatError(f"{source}: the lines cut out of {plane.name} read differently")
            for index, (line, (_, label)) in enumerate(zip(parsed_lines, lines)):
                piece = HostColumns(host)
                read_host_line(
                    piece,
                    line,
                    label,
                    cpu_only=False,
                    include_python=include_python,
                    no_hlo=set(),
                    dropped=space.dropped.get(index, 0),
                    read=space.threads.get(index),
                )
                pieces.append(piece)
    except _EVENT_ERRORS as exc:
        raise _unreadable(source, exc) from None
    return pieces


def join_host(host: str, pieces: Iterable[HostColumns], plane_names: Iterable[str], accelerated: bool) -> HostColumns:
    """One host's columns from its planes' pieces, in plane order (``plane_names`` are all its planes).

    The first piece becomes the result (the others are appended to it), so a
    single piece, however large, is not copied.
    """
    pieces = list(pieces)
    cols = pieces[0] if pieces else HostColumns(host)
    cols.extend(*pieces[1:])
    ignored = [n for n in plane_names if not _known_plane(n)]
    if ignored:
        cols.notes.append(f"{host}: planes not read: {', '.join(sorted(ignored))}")
    if not accelerated:
        ordinals = sorted({d for d, c in zip(cols.integers("device"), cols.strings("category")) if c == "device"})
        cols.devices += [device_row(host, HOST_PLANE, "cpu", o, {}) for o in ordinals]
    return cols


_EVENT_ERRORS = (UnicodeDecodeError, ValueError, OverflowError, TypeError)


def _prepare(data: bytes, source: str, accelerated: bool | None, include_python: bool) -> PreparedSpace:
    """What can be read in bulk read from the bytes (``prepared``), unless Python frames are kept."""
    return PreparedSpace(data) if include_python else prepare(data, source, accelerated=accelerated)


def _parse(data: bytes, source: str) -> list[Any]:
    # Imported here: a report forks its worker before this import, and each process pays half.
    from jaxdiag.jax_internals import parse_xspace

    return parse_xspace(data, source)


def _unreadable(source: str, exc: Exception) -> TraceFormatError:
    return TraceFormatError(f"{source}: unreadable event data ({type(exc).__name__}: {exc})")


def collect_host(
    planes: Iterable[Any], host: str, *, include_python: bool = False, prepared: PreparedSpace | None = None
) -> HostColumns:
    """Turn the planes of one host into ``HostColumns`` (see the module docstring for the rules).

    ``prepared``: what ``prepared.prepare`` read in bulk before parsing.
    """
    planes = list(planes)
    names = [p.name for p in planes]
    accelerated = has_devices(names)
    cols = HostColumns(host)
    for index, plane in enumerate(planes):
        _read_plane(cols, plane, accelerated, include_python, prepared, index)
    return join_host(host, [cols], names, accelerated)


def has_devices(plane_names: Iterable[str]) -> bool:
    """Whether a host's planes include accelerator planes (else XLA:CPU ops are its device work)."""
    return any(map(is_device_plane, plane_names))


def is_device_plane(name: str) -> bool:
    """Whether a plane is an accelerator's (``/device:GPU:0``, ``/device:TPU:3``)."""
    return _DEVICE_PLANE.match(name) is not None


def reads_as_device(name: str) -> bool:
    """Whether ``device_plane.read_device_plane`` reads a plane of this name (an accelerator's or a TPU SparseCore's)."""
    return bool(_DEVICE_PLANE.match(name) or _SPARSECORE_PLANE.match(name))


def is_profiler_plane(plane_name: str) -> bool:
    """Whether ``jax.profiler`` (XLA's profiler) writes planes of this name: host, device and metadata planes."""
    return _known_plane(plane_name)


def _known_plane(plane_name: str) -> bool:
    return (
        bool(_DEVICE_PLANE.match(plane_name) or _SPARSECORE_PLANE.match(plane_name))
        or plane_name in (HOST_PLANE, *META_PLANES)
        or plane_name.startswith("/host:__")
    )


def _read_plane(
    cols: HostColumns,
    plane: Any,
    accelerated: bool,
    include_python: bool,
    prepared: PreparedSpace | None = None,
    index: int = -1,
) -> None:
    """Append one plane (``index``: its place in the parsed XSpace, which ``prepared`` keys its planes by)."""
    read = prepared.device.get(index) if prepared is not None else None
    match = _DEVICE_PLANE.match(plane.name)
    if match:
        read_device_plane(cols, plane, match[1].lower(), int(match[2]), read=read)
    elif sparse := _SPARSECORE_PLANE.match(plane.name):
        read_device_plane(cols, plane, "tpu", int(sparse[1]), sparsecore=True, read=read)
    elif plane.name == HOST_PLANE:
        read_host_plane(cols, plane, cpu_only=not accelerated, include_python=include_python, prepared=prepared)
    elif plane.name in META_PLANES:
        cols.meta.update(scalar_stats(plane.stats))
