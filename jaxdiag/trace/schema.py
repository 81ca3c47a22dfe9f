"""The XSpace schema (``tsl/profiler/protobuf/xplane.proto``): every field number the readers use, in one place.

``wire`` walks a file's top level, ``_xline.c`` decodes events (a test holds its numbers to these)
from the bytes, and tests build and check XSpaces: all by the numbers here.
``message_classes`` turns the same table into protobuf message classes (upb),
for the planes' metadata and as the reference the byte readers are tested against.
"""

from __future__ import annotations

import functools
from typing import Any

#: Wire types.
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
#: A map entry's fields (``map<int64, XEventMetadata>`` is written as repeated entries).
MAP_KEY, MAP_VALUE = 1, 2


class XSpace:
    PLANES, ERRORS, WARNINGS, HOSTNAMES = 1, 2, 3, 4


class XPlane:
    ID, NAME, LINES, EVENT_METADATA, STAT_METADATA, STATS = 1, 2, 3, 4, 5, 6


class XLine:
    ID, NAME, TIMESTAMP_NS, EVENTS, DURATION_PS, DISPLAY_ID, DISPLAY_NAME = 1, 2, 3, 4, 9, 10, 11


class XEvent:
    METADATA_ID, OFFSET_PS, DURATION_PS, STATS, NUM_OCCURRENCES = 1, 2, 3, 4, 5


class XStat:
    """A stat: its metadata id, then one value (a oneof: the last one written counts)."""

    METADATA_ID, DOUBLE, UINT64, INT64, STR, BYTES, REF = 1, 2, 3, 4, 5, 6, 7
    #: Each value field's wire type.
    VALUE_WIRE = {
        DOUBLE: FIXED64,
        UINT64: VARINT,
        INT64: VARINT,
        STR: LENGTH_DELIMITED,
        BYTES: LENGTH_DELIMITED,
        REF: VARINT,
    }


class XEventMetadata:
    ID, NAME, METADATA, DISPLAY_NAME, STATS, CHILD_ID = 1, 2, 3, 4, 5, 6


class XStatMetadata:
    ID, NAME, DESCRIPTION = 1, 2, 3


#: Each message's fields: ``(name, number, type, repeated, message type)``; types as in ``descriptor.proto``.
_INT64, _UINT64, _DOUBLE, _STRING, _BYTES, _MESSAGE = 3, 4, 1, 9, 12, 11
_FIELDS: dict[str, list[tuple[str, int, int, bool, str]]] = {
    "XSpace": [
        ("planes", XSpace.PLANES, _MESSAGE, True, "XPlane"),
        ("errors", XSpace.ERRORS, _STRING, True, ""),
        ("warnings", XSpace.WARNINGS, _STRING, True, ""),
        ("hostnames", XSpace.HOSTNAMES, _STRING, True, ""),
    ],
    "XPlane": [
        ("id", XPlane.ID, _INT64, False, ""),
        ("name", XPlane.NAME, _STRING, False, ""),
        ("lines", XPlane.LINES, _MESSAGE, True, "XLine"),
        ("event_metadata", XPlane.EVENT_METADATA, _MESSAGE, True, "XPlane.EventMetadataEntry"),
        ("stat_metadata", XPlane.STAT_METADATA, _MESSAGE, True, "XPlane.StatMetadataEntry"),
        ("stats", XPlane.STATS, _MESSAGE, True, "XStat"),
    ],
    "XLine": [
        ("id", XLine.ID, _INT64, False, ""),
        ("display_id", XLine.DISPLAY_ID, _INT64, False, ""),
        ("name", XLine.NAME, _STRING, False, ""),
        ("display_name", XLine.DISPLAY_NAME, _STRING, False, ""),
        ("timestamp_ns", XLine.TIMESTAMP_NS, _INT64, False, ""),
        ("duration_ps", XLine.DURATION_PS, _INT64, False, ""),
        ("events", XLine.EVENTS, _MESSAGE, True, "XEvent"),
    ],
    "XEvent": [
        ("metadata_id", XEvent.METADATA_ID, _INT64, False, ""),
        ("offset_ps", XEvent.OFFSET_PS, _INT64, False, ""),
        ("num_occurrences", XEvent.NUM_OCCURRENCES, _INT64, False, ""),
        ("duration_ps", XEvent.DURATION_PS, _INT64, False, ""),
        ("stats", XEvent.STATS, _MESSAGE, True, "XStat"),
    ],
    "XStat": [
        ("metadata_id", XStat.METADATA_ID, _INT64, False, ""),
        ("double_value", XStat.DOUBLE, _DOUBLE, False, ""),
        ("uint64_value", XStat.UINT64, _UINT64, False, ""),
        ("int64_value", XStat.INT64, _INT64, False, ""),
        ("str_value", XStat.STR, _STRING, False, ""),
        ("bytes_value", XStat.BYTES, _BYTES, False, ""),
        ("ref_value", XStat.REF, _UINT64, False, ""),
    ],
    "XEventMetadata": [
        ("id", XEventMetadata.ID, _INT64, False, ""),
        ("name", XEventMetadata.NAME, _STRING, False, ""),
        ("display_name", XEventMetadata.DISPLAY_NAME, _STRING, False, ""),
        ("metadata", XEventMetadata.METADATA, _BYTES, False, ""),
        ("stats", XEventMetadata.STATS, _MESSAGE, True, "XStat"),
        ("child_id", XEventMetadata.CHILD_ID, _INT64, True, ""),
    ],
    "XStatMetadata": [
        ("id", XStatMetadata.ID, _INT64, False, ""),
        ("name", XStatMetadata.NAME, _STRING, False, ""),
        ("description", XStatMetadata.DESCRIPTION, _STRING, False, ""),
    ],
}
#: Fields of one oneof, by message: ``XEvent.data`` and ``XStat.value``.
_ONEOFS = {
    "XEvent": ("data", {"offset_ps", "num_occurrences"}),
    "XStat": ("value", {n for n, *_ in _FIELDS["XStat"][1:]}),
}
_PACKAGE = "jaxdiag_xplane"


@functools.cache
def has_upb() -> bool:
    """Whether protobuf is upb, which ``message_classes`` needs: known without building the classes
    (protobuf's descriptor modules take a tenth of what reading a large trace does)."""
    try:
        from google.protobuf.internal import api_implementation
    except ImportError:
        return False
    return api_implementation.Type() == "upb"


@functools.cache
def message_classes() -> dict[str, Any] | None:
    """Protobuf classes of the XSpace messages, by name (``XSpace``, ``XPlane``, ...), built from the table
    above; ``None`` where protobuf is not upb (an old protobuf, or its pure-Python implementation)."""
    if not has_upb():
        return None
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        get_class = message_factory.GetMessageClass
    except (ImportError, AttributeError):
        return None
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="jaxdiag_xplane.proto", package=_PACKAGE, syntax="proto3")

    def add(container: Any, name: str, fields: list[tuple[str, int, int, bool, str]]) -> Any:
        message = container.add(name=name)
        oneof = _ONEOFS.get(name)
        if oneof:
            message.oneof_decl.add(name=oneof[0])
        for field_name, number, kind, repeated, type_name in fields:
            added = message.field.add(name=field_name, number=number, type=kind)
            added.label = field.LABEL_REPEATED if repeated else field.LABEL_OPTIONAL
            if type_name:
                added.type_name = f".{_PACKAGE}.{type_name}"
            if oneof and field_name in oneof[1]:
                added.oneof_index = 0
        return message

    for name, fields in _FIELDS.items():
        message = add(proto.message_type, name, fields)
        if name == "XPlane":  # its two maps, as protobuf writes them: a nested entry type of key and value
            for entry, value in (("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")):
                nested = add(
                    message.nested_type,
                    entry,
                    [("key", MAP_KEY, _INT64, False, ""), ("value", MAP_VALUE, _MESSAGE, False, value)],
                )
                nested.options.map_entry = True
    try:
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        return {name: get_class(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")) for name in _FIELDS}
    except Exception:  # noqa: BLE001 - a protobuf that builds no classes this way: the readers do without
        return None
