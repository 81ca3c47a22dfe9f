"""``prepare``: what of an XSpace is read from its bytes before the XSpace reader parses the rest.

The host plane's long threads (``host_bytes``: runtime and Python threads decoded,
frames cut out) and the device planes' events (``device_bytes``) are read in
bulk; their events are cut out of the bytes the reader parses, and the reader's
rules then apply to the columns read here (``xspace``, ``host_plane``). A line
that cannot be read here stays in the bytes, for the reader. The result is
the reader's, row for row (``tests/trace/test_prepared.py``).
"""

from __future__ import annotations

import dataclasses

from jaxdiag.trace import wire
from jaxdiag.trace.device_bytes import DeviceEvents, prepare_device_plane
from jaxdiag.trace.host_bytes import ThreadEvents, prepare_lines
from jaxdiag.trace.host_plane import HOST_PLANE

__all__ = ["DeviceEvents", "PreparedSpace", "ThreadEvents", "prepare"]


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedSpace:
    """An XSpace some of whose events were read here.

    Attributes:
      data: the serialized XSpace for the reader (the input itself when nothing was read here).
      dropped: Python frames cut out, by the line's index in the host plane.
      threads: host threads read here (their events cut out), by line index in the host plane.
      device: device lines read here (their events cut out), by plane index in ``data`` and line index.
    """

    data: bytes
    dropped: dict[int, int] = dataclasses.field(default_factory=dict)
    threads: dict[int, ThreadEvents] = dataclasses.field(default_factory=dict)
    device: dict[int, dict[int, DeviceEvents]] = dataclasses.field(default_factory=dict)


def prepare(data: bytes, source: str = "", *, accelerated: bool | None) -> PreparedSpace:
    """Read what can be read in bulk of ``data``, one host's XSpace (or some of its planes).

    ``accelerated``: whether the host has device planes (else its runtime threads
    run XLA:CPU ops, which the reader reads); ``None``: whether ``data`` has them.

    Raises:
      TraceFormatError: as ``wire.plane_records`` (empty, truncated, not an XSpace).
    """
    from jaxdiag.trace.xspace import has_devices, reads_as_device  # xspace imports this module

    planes = wire.plane_records(data, source)
    if not planes:
        return PreparedSpace(data)
    if accelerated is None:
        accelerated = has_devices(p.name for p in planes)
    cut: dict[int, dict[int, bytes]] = {}
    layouts: dict[int, wire.PlaneLines] = {}
    space = PreparedSpace(data)
    for index, plane in enumerate(planes):
        is_host = plane.name == HOST_PLANE
        if not is_host and not reads_as_device(plane.name):
            continue
        layout = wire.plane_lines(data, plane)
        if layout is None:
            continue
        layouts[index] = layout
        if is_host:
            lines = prepare_lines(data, layout, range(len(layout.names)), accelerated=accelerated)
            cut[index] = lines.cut
            space.dropped.update(lines.dropped)
            space.threads.update(lines.threads)
        else:
            cut[index], space.device[index] = prepare_device_plane(data, layout)
    if not any(cut.values()):
        return PreparedSpace(data)
    view = memoryview(data)
    out: list[bytes | memoryview] = []
    for index, plane in enumerate(planes):
        replace = cut.get(index)
        if not replace:
            out.append(view[plane.start : plane.end])
            continue
        body = [replace.get(line, view[a:b]) if line >= 0 else view[a:b] for a, b, line in layouts[index].chunks]
        out += [wire.plane_header(sum(map(len, body))), *body]
    return dataclasses.replace(space, data=b"".join(out))
