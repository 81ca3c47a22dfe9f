"""Event stats read from the bytes: the ones asked for, as jaxlib's reader gives them.

``line_bytes.event_fields`` finds each event's stat records; here only those
whose metadata id names a stat asked for are walked, and their values are turned
into Python values as jaxlib's ``ProfileEvent.stats`` gives them: a uint64 as an
unsigned int, a reference as the referenced metadata's name (empty when
missing), a stat whose metadata is missing or that holds no value left out.
``contract.ColumnReader`` reads every line's stats with it.
"""

from __future__ import annotations

import functools
from typing import Any

from jaxdiag.trace import line_bytes
from jaxdiag.trace.schema import VARINT, XStat

METADATA_ID = XStat.METADATA_ID
#: XStat value fields: double, uint64, int64, str, bytes, reference to a stat metadata's name; with their wire types.
_DOUBLE, _UINT64, _INT64, _STR, _BYTES, _REF = (
    XStat.DOUBLE,
    XStat.UINT64,
    XStat.INT64,
    XStat.STR,
    XStat.BYTES,
    XStat.REF,
)
_VALUE_WIRE = XStat.VALUE_WIRE


@functools.cache
def _wire_of_value() -> Any:
    """The wire type of each XStat value field, by field number (-1: no value field)."""
    import numpy as np

    wires = np.full(_REF + 1, -1, dtype=np.int64)
    for field, wire_type in _VALUE_WIRE.items():
        wires[field] = wire_type
    return wires


def event_stats(
    padded: Any,
    rounds: list[Any],
    events: int,
    stat_names: dict[int, str],
    read: frozenset[str],
    bytes_as_str: bool = False,
) -> list[dict[str, Any]]:
    """Each event's stats named in ``read``, from the stat records ``line_bytes.event_fields`` found, in the
    order written (``bytes_as_str``: a bytes value decoded as UTF-8, as ``ProfileData`` gives it). An event
    with none of them gets ``NO_STATS``, shared: callers only read the dicts."""
    import numpy as np

    out: list[dict[str, Any]] = [NO_STATS] * events  # a dict of its own only for an event with a stat read
    wanted = np.array(sorted(k for k, name in stat_names.items() if name in read), dtype=np.int64)
    if not rounds or not len(wanted):
        return out
    owners = np.concatenate([r[0] for r in rounds])
    starts = np.concatenate([r[1] for r in rounds])
    sizes = np.concatenate([r[2] for r in rounds])
    # A stat is written with its metadata id first: one that names no stat read here is not walked.
    ids, width = line_bytes.varints(padded, starts + 1)
    named = (padded[starts] == METADATA_ID << 3) & (width > 0) & (width < sizes)
    keep = np.flatnonzero(~named | np.isin(ids, wanted))
    order = keep[np.argsort(owners[keep], kind="stable")]  # an event's stats in the order written
    owners, starts, sizes = owners[order], starts[order], sizes[order]
    count = len(owners)
    metadata = np.zeros(count, dtype=np.int64)
    kind = np.zeros(count, dtype=np.int64)  # the value field set last (a oneof keeps the last one)
    value = np.zeros(count, dtype=np.int64)
    at = np.zeros(count, dtype=np.int64)
    for got in line_bytes.walk(padded, starts, sizes):
        mine = (got.field == METADATA_ID) & (got.wire_type == VARINT)
        metadata[got.owners[mine]] = got.value[mine]
        mine = (got.field >= _DOUBLE) & (got.field <= _REF)  # a value field, written as its kind is
        mine[mine] = _wire_of_value()[got.field[mine]] == got.wire_type[mine]
        rows = got.owners[mine]
        kind[rows], value[rows], at[rows] = got.field[mine], got.value[mine], got.start[mine]
    rows = np.flatnonzero(np.isin(metadata, wanted) & (kind > 0))
    kinds, numbers, at = kind[rows], value[rows], at[rows]
    values: list[Any] = numbers.tolist()  # an int64's value; the others are set below, a kind at a time
    buffer = memoryview(padded)

    def put(field: int, convert: Any) -> None:
        mine = np.flatnonzero(kinds == field)
        for i, got in zip(mine.tolist(), convert(mine)):
            values[i] = got

    put(_UINT64, lambda mine: numbers[mine].view(np.uint64).tolist())
    put(_REF, lambda mine: [stat_names.get(n, "") for n in numbers[mine].tolist()])
    put(_DOUBLE, lambda mine: padded[at[mine, None] + np.arange(8)].view("<f8").ravel().tolist())
    put(_STR, lambda mine: [str(buffer[a : a + n], "utf-8") for a, n in zip(at[mine].tolist(), numbers[mine].tolist())])
    as_bytes = (lambda view: str(view, "utf-8")) if bytes_as_str else bytes
    put(_BYTES, lambda mine: [as_bytes(buffer[a : a + n]) for a, n in zip(at[mine].tolist(), numbers[mine].tolist())])
    names = {k: stat_names[k] for k in wanted.tolist()}
    for owner, stat, got_value in zip(owners[rows].tolist(), metadata[rows].tolist(), values):
        mine = out[owner]
        if mine is NO_STATS:
            mine = out[owner] = {}
        mine[names[stat]] = got_value
    return out


#: The stats of an event with none of those read: one dict for all of them, never written to.
NO_STATS: dict[str, Any] = {}
