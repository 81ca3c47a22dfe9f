"""A typed report section and its JSON, both ways, and its row of ``docs/report-schema.md``, all from its type.

A typed section is a frozen dataclass of the analyses (``analyses.host_wait_section.HostWaits``): its
fields, in order, are the JSON object's keys; a tuple is an array; ``X | None`` may be ``null``.
Each field says what it holds in its metadata (``analyses.base.described``), which is where the
schema document's text comes from, so the type, the JSON and the document cannot drift apart. A
field ``described(only_with="logged")`` is written only when ``logged`` is true, one
``described(omit_null=True)`` only when it is not ``None``. A union of several types (a spec entry,
``str | tuple[str, ...] | None``) reads a value as the first that fits. An array section
(``recompiles``) is a tuple of its rows' type.

Reading back checks every value against its field's type and names the first that does not fit
(``host_waits.by_cause[2].ms: a string, not a number``); a float's ``null`` reads as NaN, which
is what a report writes for it. A key the type lacks (a newer minor version's field) is dropped;
a key an older report lacks takes the field's default.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any

_NONE = type(None)


class Mismatch(ValueError):
    """A JSON value that does not fit its field's type; the message names where."""


def to_json(value: Any) -> Any:
    """A typed value as JSON values (dicts, lists, numbers, strings, ``None``), in field order."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in _fields(type(value)) if _written(value, f)}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def _written(value: Any, f: dataclasses.Field[Any]) -> bool:
    """Whether a field goes into the JSON: unless the field ``only_with`` names is false, or it is ``omit_null`` and null."""
    if "only_with" in f.metadata and not getattr(value, f.metadata["only_with"]):
        return False
    return not (f.metadata.get("omit_null") and getattr(value, f.name) is None)


def from_json(kind: Any, value: Any, where: str) -> Any:
    """``value`` read as ``kind`` (a dataclass, tuple, dict, ``X | None`` or a plain type).

    Raises:
      Mismatch: a value that does not fit, naming where it is (``where`` is the path so far).
    """
    origin = typing.get_origin(kind)
    if kind is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and _NONE in options:
            return None
        inner = [o for o in options if o is not _NONE]
        for option in inner[:-1]:  # several types (a spec entry): the first that fits
            try:
                return from_json(option, value, where)
            except Mismatch:
                continue
        return from_json(inner[-1], value, where)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise Mismatch(f"{where}: {_json_kind(value)}, not an object")
        hints = _hints(kind)
        out = {}
        for f in _fields(kind):
            if f.name in value:
                out[f.name] = from_json(hints[f.name], value[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise Mismatch(f"{where}: no {f.name}")
        return kind(**out)
    if origin in (tuple, list):
        if not isinstance(value, list):
            raise Mismatch(f"{where}: {_json_kind(value)}, not an array")
        (inner, *_) = typing.get_args(kind)
        items = [from_json(inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise Mismatch(f"{where}: {_json_kind(value)}, not an object")
        _, inner = typing.get_args(kind)
        return {str(k): from_json(inner, v, f"{where}.{k}") for k, v in value.items()}
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value  # a whole number stays one, so a report saved again is the same text
        if value is None:  # JSON has no NaN: a report writes null for it
            return math.nan
        raise Mismatch(f"{where}: {_json_kind(value)}, not a number")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise Mismatch(f"{where}: {_json_kind(value)}, not a whole number")
    if kind is str or kind is bool:
        if type(value) is kind:
            return value
        raise Mismatch(f"{where}: {_json_kind(value)}, not {'a string' if kind is str else 'a boolean'}")
    raise TypeError(f"{where}: no JSON reading for {kind!r}")  # a section type the codec does not cover


def describe(kind: Any) -> str:
    """The schema document's text for a typed section: each field, what it holds, and what is inside."""
    return ", ".join(_describe_field(f, _hints(kind)[f.name]) for f in _fields(kind))


def _describe_field(f: dataclasses.Field[Any], hint: Any) -> str:
    since = f.metadata.get("since")
    doc = f.metadata.get("doc", "")
    if "only_with" in f.metadata:
        doc = f"only with `{f.metadata['only_with']}`" + (f": {doc}" if doc else "")
    if f.metadata.get("omit_null"):
        doc = "only when not `null`" + (f": {doc}" if doc else "")
    inner = _element(hint)
    shape = ""
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        keys = ", ".join(g.name for g in _fields(inner))
        shape = f"`[{{{keys}}}]`" if inner is not hint and _is_sequence(hint) else f"`{{{keys}}}`"
        nested = [(g, _hints(inner)[g.name]) for g in _fields(inner) if g.metadata.get("doc")]
        if nested:
            shape += ": " + ", ".join(_describe_field(g, h) for g, h in nested)
    parts = [p for p in ((f"{since}: " if since else "") + doc, shape) if p]
    return f"`{f.name}`" + (f" ({'; '.join(parts)})" if parts else "")


def schema_row(name: str, kind: Any) -> str:
    """The row of ``docs/report-schema.md`` for the section ``name`` of type ``kind`` (a tuple: an array section,
    led by its rows' type's first docstring line, ``one object per ...``)."""
    if not _is_sequence(kind):
        body = _body(kind)
        return f"| `{name}` | object | {body + ' ' if body else ''}{describe(kind)}. |"
    row = typing.get_args(kind)[0]
    lead = (row.__doc__ or "").strip().splitlines()[0].rstrip(".")
    return f"| `{name}` | array | {lead[:1].lower() + lead[1:]}: {describe(row)}. |"


def _body(kind: Any) -> str:
    """A type's docstring past its summary line, as one line of markdown (what the whole section holds)."""
    paragraphs = (kind.__doc__ or "").strip().split("\n\n")[1:]
    return " ".join(" ".join(p.split()) for p in paragraphs).replace("``", "`")


def _element(hint: Any) -> Any:
    """The dataclass a field holds, alone, optional or as a sequence's elements (else ``hint``)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(o for o in typing.get_args(hint) if o is not _NONE)
    if _is_sequence(hint):
        return typing.get_args(hint)[0]
    return hint


def _is_sequence(hint: Any) -> bool:
    return typing.get_origin(hint) in (tuple, list)


@functools.cache
def _fields(kind: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(kind)


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _json_kind(value: Any) -> str:
    for kind, name in ((bool, "a boolean"), (dict, "an object"), (list, "an array"), (str, "a string")):
        if isinstance(value, kind):
            return name
    return "a number" if isinstance(value, (int, float)) else "null"


__all__ = ["Mismatch", "describe", "from_json", "schema_row", "to_json"]
