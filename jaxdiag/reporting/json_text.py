"""A report's indented JSON text, written in one pass.

The text is exactly what ``json.dumps(value, indent=2, allow_nan=False, default=...)``
writes, with every array of numbers then put on one line (``[1, 2.5, -3]``): the
timeline's arrays are long, one number a line would make the file unreadable.
``json.dumps`` with an indent runs its pure-Python encoder and the arrays are
joined back by a regular expression afterwards; here scalars and strings go
through the same C helpers ``json`` uses and number arrays are joined as they
are met, in well under half the time. It is the report's one JSON writer:
``model.clean`` first makes every value one JSON holds, so anything this writer
does not know (a key that is not a string, NaN, an object) raises ``Unsupported``,
a value ``clean`` missed.
"""

from __future__ import annotations

import json.encoder
from typing import Any

_STRING = json.encoder.encode_basestring_ascii  # what json.dumps uses with ensure_ascii (the default)
_INT = int.__repr__
_FLOAT = float.__repr__
_INDENT = "  "
#: An array of plain ints and floats on one line, by ``json``'s C encoder (``[1, 2.5, -3]``).
_NUMBERS = json.encoder.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode
_PLAIN_NUMBERS = frozenset({int, float})


class Unsupported(TypeError):
    """A value JSON does not hold (``model.clean`` makes every value of a report one it does)."""


def dumps(value: Any) -> str:
    """``value`` as indented JSON text, arrays of numbers on one line (see the module docstring).

    Raises:
      Unsupported: a value JSON does not hold.
    """
    out: list[str] = []
    _write(value, 0, out)
    return "".join(out)


def _scalar(value: Any) -> str | None:
    """The JSON text of a string, number, bool or null, in ``json``'s order of tests; ``None`` for others."""
    if isinstance(value, str):
        return _STRING(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return _INT(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise Unsupported("a NaN or infinite number")
        return _FLOAT(value)
    return None


def _write(value: Any, level: int, out: list[str]) -> None:
    text = _scalar(value)
    if text is not None:
        out.append(text)
    elif isinstance(value, (list, tuple)):
        _write_list(value, level, out)
    elif isinstance(value, dict):
        _write_dict(value, level, out)
    else:
        raise Unsupported(f"a {type(value).__name__}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _write_list(items: list[Any] | tuple[Any, ...], level: int, out: list[str]) -> None:
    if not items:
        out.append("[]")
        return
    if _PLAIN_NUMBERS.issuperset(map(type, items)):
        try:
            out.append(_NUMBERS(items))
        except ValueError:  # NaN or infinity
            raise Unsupported("a NaN or infinite number") from None
        return
    if all(_is_number(v) for v in items):
        out.append("[" + ", ".join(_scalar(v) for v in items) + "]")  # type: ignore[misc]
        return
    inner = "\n" + _INDENT * (level + 1)
    out.append("[" + inner)
    for i, v in enumerate(items):
        if i:
            out.append("," + inner)
        _write(v, level + 1, out)
    out.append("\n" + _INDENT * level + "]")


def _write_dict(items: dict[Any, Any], level: int, out: list[str]) -> None:
    if not items:
        out.append("{}")
        return
    inner = "\n" + _INDENT * (level + 1)
    out.append("{" + inner)
    first = True
    for k, v in items.items():
        if not isinstance(k, str):
            raise Unsupported("a key that is not a string")
        if not first:
            out.append("," + inner)
        first = False
        out.append(_STRING(k) + ": ")
        _write(v, level + 1, out)
    out.append("\n" + _INDENT * level + "}")
