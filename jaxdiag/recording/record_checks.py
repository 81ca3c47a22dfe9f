"""What makes a dict a readable compile record: the checks every reader of records makes.

A hand-edited or damaged line fails here, named, rather than later in a table. The
log reader checks each line, the sidecar reader each record it carries.
"""

from __future__ import annotations

from typing import Any

from jaxdiag.recording.records import SCHEMA

_SCHEMA_FAMILY, _, _SCHEMA_MAJOR = SCHEMA.rpartition("/")


def record_problem(d: Any) -> str | None:
    """Why ``d`` is not a readable compile record, or ``None``.

    Checks the types the readers rely on, so a hand-edited line fails here, named,
    rather than later in a table.
    """
    return fields_problem(d) or args_problem(d.get("args")) or explanation_problem(d.get("explanation"))


def fields_problem(d: Any) -> str | None:
    """``record_problem`` for everything but ``args`` and ``explanation``."""
    if not isinstance(d, dict):
        return f"not a compile record (a JSON {type(d).__name__})"
    schema = d.get("schema")
    if schema is not None:
        family, _, version = str(schema).rpartition("/")
        if family != _SCHEMA_FAMILY or version.split(".")[0] != _SCHEMA_MAJOR:
            return f"schema {schema!r} is not {SCHEMA}"
    for name in ("function", "qualname"):
        if not isinstance(d.get(name), str):
            return f"not a compile record (field {name!r} missing or not text)"
    if not _is_int(d.get("compile_index")):
        return "not a compile record (field 'compile_index' missing or not an integer)"
    if not _is_number(d.get("time_unix")):
        return "not a compile record (field 'time_unix' missing or not a number)"
    for name in ("trace_s", "lower_s", "backend_compile_s"):
        if d.get(name) is not None and not _is_number(d[name]):
            return f"field {name!r} is not a number"
    for name, kind in _OPTIONAL_FIELDS.items():
        value = d.get(name)
        if value is None or type(value) is kind:  # as written; checked in full below otherwise
            continue
        if not (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
            return f"field {name!r} is not {_KIND_NAMES[kind]}"
    return None


def args_problem(args: Any) -> str | None:
    args = args or []
    if not isinstance(args, list):
        return "field 'args' is not a list"
    for a in args:
        if not isinstance(a, dict) or not isinstance(a.get("path"), str):
            return "an entry of 'args' has no text 'path'"
        for name in ("kind", "dtype", "sharding", "memory_kind", "value"):
            if a.get(name) is not None and not isinstance(a[name], str):
                return f"args {a['path']!r}: {name!r} is not text"
        if a.get("committed") is not None and not isinstance(a["committed"], bool):
            return f"args {a['path']!r}: 'committed' is not true or false"
        shape = a.get("shape")
        if shape is not None and not (isinstance(shape, list) and all(type(x) is int for x in shape)):
            return f"args {a['path']!r}: 'shape' is not a list of integers"
    return None


def explanation_problem(exp: Any) -> str | None:
    if exp is not None and not (isinstance(exp, dict) and isinstance(exp.get("changes", []), list)):
        return "field 'explanation' is not an object with a 'changes' list"
    if exp is not None and exp.get("compared_to") is not None and not _is_int(exp["compared_to"]):
        return "field 'explanation.compared_to' is not an integer"
    if exp is not None and not isinstance(exp.get("summary", ""), str):
        return "field 'explanation.summary' is not text"
    for change in (exp or {}).get("changes") or ():
        if not (
            isinstance(change, dict)
            and isinstance(change.get("what"), str)
            and isinstance(change.get("path"), str)
            and all(change.get(k) is None or isinstance(change[k], str) for k in ("old", "new"))
            and (change.get("axis") is None or _is_int(change["axis"]))
        ):
            return "not a compile record (an entry of 'explanation.changes' lacks text 'what' and 'path')"
    return None


#: Fields a record may leave out, and the JSON type each has when present.
_OPTIONAL_FIELDS: dict[str, type] = {
    "source": str,
    "call_site": str,
    "in_tree": str,
    "origin": str,
    "thread": str,
    "function_id": int,
    "pid": int,
    "traced": bool,
    "lowered": bool,
    "compiled": bool,
    "persistent_cache_hit": bool,
    "cost": dict,
    "memory": dict,
    "sharding": dict,
    "program_id": int,
    "call_function": str,
    "transform": str,
    "jit_options": str,
    "config": dict,
    "jit_leaves": dict,
    "earlier_unseen": int,
}
_KIND_NAMES = {str: "text", int: "an integer", bool: "true or false", dict: "an object"}


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
