"""Read one host's ``.xplane.pb`` into event columns, device facts and metadata.

The bytes are read through the reader contract (``contract.reader()``: columns per plane and
line, only the stats the rules here read). ``device_plane`` reads device planes, and
``host_plane`` says how host events are categorised. ``collect_host`` works on the contract's
columns, so the Chrome-JSON reader, which builds the same columns, shares every rule here.
``read_units`` and ``join_host`` let ``reading`` read a file's planes, or its host plane's
threads, in several processes.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Collection, Iterable, Mapping

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.columns import HostColumns
from jaxdiag.trace.contract import PlaneColumns, reader
from jaxdiag.trace.device_plane import DEVICE_STATS, device_row, read_device_plane, scalar_stats
from jaxdiag.trace.launch import link_kernels
from jaxdiag.trace.host_plane import HOST_PLANE, host_line_stats, read_host_line, read_host_plane
from jaxdiag.trace import wire
from jaxdiag.trace.wire import check_wire

__all__ = ["HOST_PLANE", "HostColumns", "check_wire", "collect_host", "join_host", "read_units", "read_xspace"]

META_PLANES = ("/host:metadata", "Task Environment")
_DEVICE_PLANE = re.compile(r"^/device:([A-Z]+):(\d+)$")
#: ``/device:TPU:0 SparseCore 1``: a SparseCore of TPU core 0, not a device of its own.
_SPARSECORE_PLANE = re.compile(r"^/device:TPU:(\d+) SparseCore (\d+)$")


def read_xspace(data: Any, host: str, *, source: str, include_python: bool = False) -> HostColumns:
    """Parse one serialized XSpace (one host) into columns.

    Args:
      data: the bytes of a ``.xplane.pb`` file.
      host: the host name to stamp on every row.
      source: the file name, for error messages.
      include_python: keep Python-tracer frames (category ``python``).

    Raises:
      TraceFormatError: empty, truncated or not an XSpace.
    """
    records = wire.plane_records(data, source) or []  # checks the bytes too (``check_wire``)
    accelerated = has_devices(record.name for record in records)
    planes = reader().read(
        data, source, stats=_stats_for(accelerated), frames=include_python, select=lambda _, name: _has_events(name)
    )
    if not planes:
        raise TraceFormatError(f"{source}: no profile planes; not a jax.profiler capture")
    try:
        return collect_host(planes, host, include_python=include_python)
    except _EVENT_ERRORS as exc:
        raise _unreadable(source, exc) from None


def read_units(
    data: Any,
    host: str,
    units: Mapping[int, Collection[int] | None],
    labels: Mapping[int, list[str]],
    *,
    source: str,
    accelerated: bool,
    include_python: bool = False,
) -> list[HostColumns]:
    """Some planes of one host's XSpace, or some threads of its host plane, as pieces for ``join_host``.

    Args:
      data: the bytes of the whole file.
      host: the host name.
      units: the planes to read, by index: ``None`` to read one whole (one piece), or the indices of
        its lines to read (one piece per line; only the host plane of an accelerated host).
      labels: the names of every line of each plane read by line, made unique (``unique_labels``).
      source: the file name, for error messages.
      accelerated: whether the whole file (not only these planes) has device planes.
      include_python: keep Python-tracer frames.

    Raises:
      TraceFormatError: the reader rejects the bytes, or the events cannot be read.
    """

    def select(index: int, name: str) -> bool | Collection[int] | None:
        if index not in units:
            return None
        chosen = units[index]
        return _has_events(name) if chosen is None else chosen

    planes = reader().read(data, source, stats=_stats_for(accelerated), frames=include_python, select=select)
    pieces = []
    try:
        for plane in planes:
            if units[plane.index] is None:
                piece = HostColumns(host)
                _read_plane(piece, plane, accelerated, include_python)
                pieces.append(piece)
                continue
            if not accelerated or plane.name != HOST_PLANE:
                raise TraceFormatError(f"{source}: only an accelerated host's host plane is read by thread")
            for line in plane.lines:
                piece = HostColumns(host)
                label = labels[plane.index][line.index]
                read_host_line(piece, line, label, cpu_only=False, include_python=include_python, no_hlo=set())
                pieces.append(piece)
    except _EVENT_ERRORS as exc:
        raise _unreadable(source, exc) from None
    return pieces


def _has_events(plane: str) -> bool:
    """Whether the rules here read a plane's lines (else only its name and stats)."""
    return plane == HOST_PLANE or reads_as_device(plane)


def _stats_for(accelerated: bool) -> Callable[[str, str], frozenset[str]]:
    """The stats to read of each line's events (``accelerated``: the file has device planes)."""

    def stats(plane: str, line: str) -> frozenset[str]:
        return host_line_stats(line, accelerated) if plane == HOST_PLANE else DEVICE_STATS

    return stats


def join_host(host: str, pieces: Iterable[HostColumns], plane_names: Iterable[str], accelerated: bool) -> HostColumns:
    """One host's columns from its planes' pieces, in plane order (``plane_names`` are all its planes).

    The first piece becomes the result (the others are appended to it), so a
    single piece, however large, is not copied.
    """
    pieces = list(pieces)
    cols = pieces[0] if pieces else HostColumns(host)
    cols.extend(*pieces[1:])
    if accelerated:
        link_kernels(cols)
    ignored = [n for n in plane_names if not _known_plane(n)]
    if ignored:
        cols.notes.append(f"{host}: planes not read: {', '.join(sorted(ignored))}")
    if not accelerated:
        category = cols.coded("category")
        device = category.values.index("device") if "device" in category.values else -1
        ordinals = sorted(set(cols.numbers("device")[category.codes == device].tolist()))
        cols.devices += [device_row(host, HOST_PLANE, "cpu", o, {}) for o in ordinals]
    return cols


_EVENT_ERRORS = (UnicodeDecodeError, ValueError, OverflowError, TypeError)


def _unreadable(source: str, exc: Exception) -> TraceFormatError:
    return TraceFormatError(f"{source}: unreadable event data ({type(exc).__name__}: {exc})")


def collect_host(planes: Iterable[PlaneColumns], host: str, *, include_python: bool = False) -> HostColumns:
    """Turn the planes of one host into ``HostColumns`` (see the module docstring for the rules)."""
    planes = list(planes)
    names = [p.name for p in planes]
    accelerated = has_devices(names)
    cols = HostColumns(host)
    for plane in planes:
        _read_plane(cols, plane, accelerated, include_python)
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


def _read_plane(cols: HostColumns, plane: PlaneColumns, accelerated: bool, include_python: bool) -> None:
    """Append one plane."""
    match = _DEVICE_PLANE.match(plane.name)
    if match:
        read_device_plane(cols, plane, match[1].lower(), int(match[2]))
    elif sparse := _SPARSECORE_PLANE.match(plane.name):
        read_device_plane(cols, plane, "tpu", int(sparse[1]), sparsecore=True)
    elif plane.name == HOST_PLANE:
        read_host_plane(cols, plane, cpu_only=not accelerated, include_python=include_python)
    elif plane.name in META_PLANES:
        cols.meta.update(scalar_stats(plane.stats.items()))
