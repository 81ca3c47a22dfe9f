"""Format the sharding section: per function its mesh, leaf specs and collectives, then the timeline.

Formatting only: it reads the section dict of ``analyses.sharding``
(``ShardingResult.to_dict()``, also ``Report.sharding``) and its findings.

JSON (``to_json``), schema ``jaxdiag.sharding/1``: ``functions`` and ``timeline``
as in ``docs/report-schema.md`` (``sharding``), and ``findings`` (the
``implicit_resharding``, ``replicated_param`` and ``sharding_recompile`` findings).

Each distinct compile of a function is shown (``distinct_compiles``), the steady
one first: compiles whose placements are equal (``P('model', None)`` and
``P('model',)`` place an array the same way) are one. The steady compile is the
one that ran most on the timeline, when the timeline can tell (the compiles share no
op name, see ``_timeline_tells``); otherwise it is unknown which ran most, and the
latest compile comes first, marked so (``steady_by``).

The terminal table and its JSON read the same grouping of compiles, which is why the module runs
past 400 lines.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from jaxdiag.render.terminal_text import esc as escape

from jaxdiag.sharding.facts import format_bytes
from jaxdiag.sharding.tiles import spec_text

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from jaxdiag.analyses.base import Finding

SCHEMA_VERSION = "jaxdiag.sharding/1"
#: Finding kinds the sharding analysis makes.
FINDING_KINDS = ("implicit_resharding", "replicated_param", "sharding_recompile")
_MAX_LEAVES = 12
#: Shapes, specs and op names are kept whole up to this width; past it they wrap.
_MIN_WIDTH = 28
#: From this terminal width, the collectives table also shows each collective's kind and JAX op.
_WIDE = 120


def to_json(section: Mapping[str, Any], findings: Sequence["Finding"]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "functions": distinct_compiles(section.get("functions")),
        "timeline": list(section.get("timeline") or ()),
        "findings": [f.to_dict() for f in findings if f.kind in FINDING_KINDS],
    }


def render(
    section: Mapping[str, Any], findings: Sequence["Finding"], *, width: int | None = None, color: bool = False
) -> str:
    """The sharding section as text tables (ANSI colour when ``color``)."""
    from jaxdiag.render.terminal import text_console

    console, buf = text_console(width, color)
    print_functions(section, console, detail=True)
    print_timeline(section, console)
    print_findings(findings, console)
    return buf.getvalue()


def distinct_compiles(functions: Any) -> list[dict[str, Any]]:
    """Each distinct compile of each function, the steady one first, equal placements merged.

    Adds ``steady`` (the compile that ran most on the timeline, or the latest when
    nothing ran on it) and ``steady_by`` (``"timeline"``, ``"latest compile"``, or
    ``None`` for a function compiled once) to each entry; keeps first-seen function order.
    """
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for fn in functions if isinstance(functions, (list, tuple)) else ():
        if not isinstance(fn, Mapping):
            continue
        merged = groups.setdefault(str(fn.get("qualname") or fn.get("function")), {})
        key = _placement_key(fn)
        if key in merged:
            seen = merged[key]
            seen["compiles"] = sorted({*_ints(seen.get("compiles")), *_ints(fn.get("compiles"))})
            for key in ("program_ids", "timeline_joined_by"):
                seen[key] = list(dict.fromkeys([*_list(seen.get(key)), *_list(fn.get(key))]))
        else:
            merged[key] = {**fn, "compiles": sorted(_ints(fn.get("compiles")))}
    out: list[dict[str, Any]] = []
    for merged in groups.values():
        entries = list(merged.values())
        by_runs = _timeline_tells(entries)
        entries.sort(key=lambda e: (-_runs(e) if by_runs else 0, -max(e["compiles"], default=-1)))
        for i, e in enumerate(entries):
            e["steady"] = i == 0
            e["steady_by"] = None if len(entries) == 1 else ("timeline" if by_runs else "latest compile")
        out += entries
    return out


def _timeline_tells(entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the timeline's runs tell these compiles apart.

    The timeline names a collective by module and op, which compiles of one function
    share; runs can be told apart when every compile's ops were joined to it by the
    program that ran them (``timeline_joined_by``), or else when no two compiles
    have an op name in common; and one ran more than every other.
    """
    seen: set[str] = set()
    by_program = all(_list(e.get("program_ids")) for e in entries) and all(
        set(_list(e.get("timeline_joined_by"))) <= {"program_id"} for e in entries
    )
    for e in entries if not by_program else ():
        names = _op_names(e)
        if names & seen:
            return False
        seen |= names
    runs = sorted((_runs(e) for e in entries), reverse=True)
    return len(runs) > 1 and runs[0] > runs[1]


def _op_names(fn: Mapping[str, Any]) -> set[str]:
    colls = fn.get("collectives")
    names: set[str] = set()
    for c in colls if isinstance(colls, list) else ():
        if isinstance(c, Mapping):
            aliases = c.get("aliases")
            names |= {str(c.get("name")), *(str(a) for a in (aliases if isinstance(aliases, list) else ()))}
    return names


def _list(values: Any) -> list[Any]:
    return list(values) if isinstance(values, (list, tuple)) else []


def _ints(values: Any) -> list[int]:
    return [v for v in values if isinstance(v, int)] if isinstance(values, (list, tuple)) else []


def _runs(fn: Mapping[str, Any]) -> int:
    """How often a compile's collectives ran on the timeline (0 without a capture)."""
    colls = fn.get("collectives")
    return (
        sum(
            c.get("timeline_count") or 0
            for c in colls
            if isinstance(c, Mapping) and isinstance(c.get("timeline_count"), int)
        )
        if isinstance(colls, list)
        else 0
    )


_TIMELINE_KEYS = frozenset(
    {"compiles", "timeline_count", "timeline_ms", "steady", "steady_by", "program_ids", "timeline_joined_by"}
)


def _placement_key(fn: Mapping[str, Any]) -> str:
    """The facts of a compile with equivalent specs written one way, for telling distinct compiles apart."""

    def norm(value: Any, key: str = "") -> Any:
        if key == "spec" and isinstance(value, list):
            return normal_spec(value)
        if isinstance(value, Mapping):
            return {k: norm(v, str(k)) for k, v in value.items() if k not in _TIMELINE_KEYS}
        if isinstance(value, (list, tuple)):
            return [norm(v) for v in value]
        return value

    return json.dumps(norm(fn), sort_keys=True, default=str)


def normal_spec(spec: Sequence[Any]) -> list[Any]:
    """A spec written one way: ``('model',)`` -> ``'model'``, ``()`` -> ``None``, trailing ``None``s dropped.

    ``P('model', None)``, ``P('model',)`` and ``P(('model',), None)`` place an array the same way.
    """
    out: list[Any] = []
    for entry in spec:
        if isinstance(entry, (list, tuple)):
            entry = None if not entry else (entry[0] if len(entry) == 1 else list(entry))
        out.append(entry)
    while out and out[-1] is None:
        out.pop()
    return out


def mesh_line(fn: Mapping[str, Any]) -> str:
    mesh = fn.get("mesh") or {}
    axes = ", ".join(f"{n}={s}" for n, s in zip(mesh.get("axis_names") or (), mesh.get("axis_sizes") or ()))
    kinds = ", ".join(str(k) for k in mesh.get("device_kinds") or ())
    inferred = " (no named mesh)" if mesh.get("inferred") else ""
    return f"mesh({axes}){inferred}" + (f" of {kinds}" if kinds else "")


def print_functions(section: Mapping[str, Any], console: "Console", *, detail: bool) -> None:
    """Per function: a header line, its leaves (with ``detail``) and its collectives."""

    for fn in distinct_compiles(section.get("functions")):
        compiles = ", ".join(str(c) for c in fn.get("compiles") or ())
        console.print(
            f"[bold]{escape(str(fn.get('function')))}[/bold] ({escape(str(fn.get('module') or '?'))}, "
            f"compile {compiles}){_steady_text(fn, bool(section.get('captured')))}  "
            f"{escape(mesh_line(fn))}   communication {_bytes(fn.get('comm_bytes_per_call'))} per call"
            + ("" if fn.get("hlo", True) else "   (optimized HLO not read)")
        )
        if detail:
            leaves = [("in", x) for x in fn.get("inputs") or ()] + [("out", x) for x in fn.get("outputs") or ()]
            rows = [
                [
                    side,
                    *map(
                        escape,
                        (
                            str(leaf.get("name") or leaf.get("path")),
                            _shape(leaf),
                            _spec(leaf),
                            _bytes(leaf.get("bytes_per_device")),
                            str(leaf.get("chosen_by", "")),
                        ),
                    ),
                ]
                for side, leaf in leaves[:_MAX_LEAVES]
            ]
            if len(leaves) > _MAX_LEAVES:
                rows.append(["…", f"{len(leaves) - _MAX_LEAVES} more", "", "", "", ""])
            t = _table(
                (
                    ("", "left"),
                    ("array", "left"),
                    ("shape", "left"),
                    ("spec", "left"),
                    ("per\ndevice", "right"),
                    ("chosen\nby", "left"),
                ),
                rows,
                "array",
                console.width,
                pad_edge=False,
            )
            console.print(t)
        colls = fn.get("collectives") or ()
        if not colls:
            console.print("  no collectives" if fn.get("hlo", True) else "")
            console.print()
            continue
        # Narrow terminals drop the kind (the op's name says it) and the JAX op (listed below).
        wide = console.width >= _WIDE
        columns = [
            ("collective", "left"),
            ("kind", "left"),
            ("mesh\naxes", "left"),
            ("bytes/\ncall", "right"),
            ("origin", "left"),
            ("array", "left"),
            ("JAX op", "left"),
            ("timeline\nms", "right"),
        ]
        keep = [i for i, (col, _) in enumerate(columns) if wide or col not in ("kind", "JAX op")]
        rows = []
        op_names: list[str] = []  # the JAX op paths, too long for a column, go below the table
        # Newer XLA names a gather of an argument by the argument (the user's name by now).
        args = {str(x.get("name")) for x in fn.get("inputs") or () if isinstance(x, dict) and x.get("name")}
        for c in colls:
            op = str(c.get("op_name") or "")
            arg = f"argument {op}" if op in args else None
            origin = str(c.get("origin"))
            style = "yellow" if origin == "resharding" else ""
            runs = f" ×{c.get('count')}" if _is_num(c.get("count")) and c["count"] > 1 else ""
            origin = escape(origin)
            cells = [
                escape(str(c.get("name"))),
                escape(str(c.get("kind"))),
                escape(_axes(c.get("mesh_axes"))),
                escape(_bytes(c.get("bytes_per_call")) + runs),
                f"[{style}]{origin}[/{style}]" if style else origin,
                escape(_arrays(c)),
                escape(arg or _primitive(op)),
                _ms(c.get("timeline_ms")) if c.get("timeline_count") else "—",
            ]
            rows.append([cells[i] for i in keep])
            if op:
                op_names.append(f"{c.get('name')}: {arg or op}")
        t = _table([columns[i] for i in keep], rows, "array", console.width, pad_edge=False)
        console.print(t)
        for line in op_names:
            console.print(f"[dim]  {escape(line)}[/dim]", overflow="fold")
        console.print()


def _table(
    columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]], wraps: str, width: int, **kwargs: Any
) -> Any:
    """A table whose columns keep their widest cell (up to ``_MIN_WIDTH``) whole; only ``wraps`` wraps.

    Rich shares a narrow terminal out evenly, cutting names, shapes and specs mid-word;
    here the short columns are held at their content's width and one column of free
    text (array names) takes what is left.
    """
    from rich.table import Table
    from rich.text import Text

    t = Table(show_edge=False, **kwargs)
    widths = [
        max([Text.from_markup(row[i]).cell_len for row in rows] + [len(w) for w in col.split()], default=1)
        for i, (col, _) in enumerate(columns)
    ]
    edges = 3 * (len(columns) - 1) + (0 if kwargs.get("pad_edge") is False else 2)
    for i, (col, just) in enumerate(columns):
        if col == wraps:  # what the other columns leave, at least 10
            rest = width - edges - sum(min(w, _MIN_WIDTH) for j, w in enumerate(widths) if j != i)
            t.add_column(col, justify=just, overflow="fold", max_width=max(rest, 10))  # type: ignore[arg-type]
        else:
            t.add_column(col, justify=just, overflow="fold", min_width=min(widths[i], _MIN_WIDTH))  # type: ignore[arg-type]
    for row in rows:
        t.add_row(*row)
    return t


def _timeline_op(row: Mapping[str, Any]) -> str:
    """``all-reduce.3``, or ``jit_other/all-reduce.3`` when the module is not the function's own."""
    module, function = str(row.get("module")), row.get("function")
    return str(row.get("op")) if function and module == f"jit_{function}" else f"{module}/{row.get('op')}"


def _primitive(op_name: str) -> str:
    """The JAX primitive an HLO op came from: the last part of its op name (``reduce_sum``)."""
    return op_name.split(";")[-1].rsplit("/", 1)[-1].rstrip(")") or "—"


def _steady_text(fn: Mapping[str, Any], captured: bool) -> str:
    by = fn.get("steady_by")
    if by is None:
        return ""
    if not fn.get("steady"):
        return " [dim]another compile[/dim]"
    if by == "timeline":
        return f" [green]steady[/green]: ran most on the timeline ({_runs(fn)} collective runs)"
    if captured:
        return (
            " [yellow]latest[/yellow]: which compile ran most is unknown (the capture cannot tell them "
            "apart: they share op names, or none of their collectives ran in it)"
        )
    return " [yellow]latest[/yellow]: which compile ran most is unknown (no capture)"


def print_timeline(section: Mapping[str, Any], console: "Console") -> None:
    """Collective ops on the timeline, with the function and array each serves."""

    rows = section.get("timeline") or ()
    if not rows:
        return
    t = _table(
        (
            ("op", "left"),
            ("function", "left"),
            ("array", "left"),
            ("mesh\naxes", "left"),
            ("count", "right"),
            ("ms /\ndevice", "right"),
            ("origin", "left"),
        ),
        [
            [
                escape(_timeline_op(r)),
                escape(str(r.get("function") or "—")),
                escape(", ".join(str(a) for a in r.get("arrays") or ()) or "—"),
                escape(_axes(r.get("mesh_axes"))) if r.get("function") else "—",
                escape(str(r.get("count"))),
                _ms(r.get("total_ms")),
                escape(str(r.get("origin") or "—")),
            ]
            for r in rows
        ],
        "array",
        console.width,
        title="Collectives on the timeline",
        title_justify="left",
    )
    console.print(t)
    console.print()


def print_findings(findings: Sequence["Finding"], console: "Console") -> None:
    mine = [f for f in findings if f.kind in FINDING_KINDS]
    for f in mine:
        console.print(f"[bold]{f.severity.value}[/bold] {escape(f.message)}\n  [dim]→ {escape(f.suggestion)}[/dim]")
    if mine:
        console.print()


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _bytes(v: Any) -> str:
    return format_bytes(v) if _is_num(v) else "?"


def _shape(leaf: Mapping[str, Any]) -> str:
    shape = leaf.get("shape")
    return f"{leaf.get('dtype') or '?'}[{','.join(str(d) for d in shape)}]" if shape is not None else "?"


def _spec(leaf: Mapping[str, Any]) -> str:
    spec = leaf.get("spec")
    return spec_text(spec) if spec is not None else str(leaf.get("hlo_sharding") or "?")


def _axes(axes: Any) -> str:
    if axes is None:
        return "?"
    return ", ".join(str(a) for a in axes) if axes else "—"


def _arrays(c: Mapping[str, Any]) -> str:
    arrays = ", ".join(str(a) for a in c.get("arrays") or ())
    if not arrays:
        return "—"
    return {"update": f"update of {arrays}", "output": f"→ {arrays}"}.get(str(c.get("array_role")), arrays)


def _ms(value: Any) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "—"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.2f}"
