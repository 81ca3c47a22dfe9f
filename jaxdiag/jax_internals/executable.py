"""The executable a compile made: where its frame holds it, its shardings, its program id."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable
from typing import Any


@functools.cache
def compiled_executable() -> tuple[str, str] | None:
    """``(name, file)`` of the function whose frame assigns ``xla_executable`` on a compile."""
    try:
        from jax._src.interpreters import pxla
    except Exception:
        return None
    if not hasattr(pxla, "_cached_compilation"):  # behind a C++ cache: no code object to hold
        return None
    return ("_cached_compilation", pxla.__file__.removesuffix("c"))


@functools.cache
def output_shardings() -> Callable[[Any], Any] | None:
    """``HloSharding.from_proto``, to read a compiled executable's output shardings."""
    try:
        from jaxlib import xla_client

        return xla_client.HloSharding.from_proto
    except Exception:
        return None


def executable_in(frames: Iterable[types.FrameType]) -> Any:
    """The executable just compiled, from the frame that assigned it (the event fires on exit)."""
    where = compiled_executable()
    if where is None:
        return None
    name, filename = where
    return next(
        (
            f.f_locals.get("xla_executable")
            for f in frames
            if f.f_code.co_name == name and f.f_code.co_filename == filename
        ),
        None,
    )


def read_output_shardings(executable: Any) -> list[str] | None:
    """The text of each output sharding of a compiled executable (``None``: unknown)."""
    protos = executable.get_output_shardings()
    from_proto = output_shardings()
    if not protos or from_proto is None:
        return None
    return [str(from_proto(p)) for p in protos]


def read_parameter_shardings(executable: Any) -> list[str] | None:
    """The text of each entry parameter's sharding of a compiled executable, by parameter number (``None``: unknown)."""
    get = getattr(executable, "get_parameter_shardings", None)
    protos = get() if get is not None else None
    from_proto = output_shardings()
    if not protos or from_proto is None:
        return None
    return [str(from_proto(p)) for p in protos]


#: ``HloModuleProto.id`` in XLA's ``hlo.proto``: the id the profiler puts on each of the
#: program's ops as the ``program_id`` stat.
_HLO_MODULE_ID_FIELD = 5


def program_id(executable: Any) -> int | None:
    """The id of a loaded executable's program, as the trace's ``program_id`` stat gives it (``None``: unknown).

    Read from the first HLO module's serialized proto by walking its top-level fields
    (no generated XLA classes are needed); any failure gives ``None``.
    """
    try:
        data = executable.hlo_modules()[0].as_serialized_hlo_module_proto()
        found = _varint_field(bytes(data), _HLO_MODULE_ID_FIELD)
        return None if found is None else found & (2**63 - 1)  # as the trace reader keeps it
    except Exception:
        return None


def _varint_field(data: bytes, number: int) -> int | None:
    """The value of top-level varint field ``number`` of a serialized protobuf message, if present."""
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
            if field == number:
                return value
        elif wire == 2:
            length = varint()  # read before ``at`` is: the read moves it
            at += length
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:  # groups are not used by this message: stop rather than guess
            return None
    return None
