"""Format the sharding section: per function its mesh, leaf specs and collectives, then the timeline.

Formatting only: it reads the ``ShardingSection`` of ``analyses.sharding`` (also ``Report.sharding``)
and its findings, each distinct compile of a function as ``sharding_compiles`` groups them.

JSON (``to_json``), schema ``jaxdiag.sharding/1``: ``functions`` and ``timeline``
as in ``docs/report-schema.md`` (``sharding``), each function with ``steady`` and
``steady_by`` added, and ``findings`` (the ``implicit_resharding``,
``replicated_param`` and ``sharding_recompile`` findings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from jaxdiag.render.sharding_compiles import DistinctCompile, distinct_compiles
from jaxdiag.render.terminal_text import esc as escape

from jaxdiag.sharding.facts import format_bytes
from jaxdiag.sharding.tiles import spec_text

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from jaxdiag.analyses.base import Finding
    from jaxdiag.analyses.sharding_section import (
        CollectiveRow,
        LeafPlacement,
        ProgramSharding,
        ShardingSection,
        TimelineCollective,
    )

SCHEMA_VERSION = "jaxdiag.sharding/1"
#: Finding kinds the sharding analysis makes.
FINDING_KINDS = ("implicit_resharding", "replicated_param", "sharding_recompile")
_MAX_LEAVES = 12
#: Shapes, specs and op names are kept whole up to this width; past it they wrap.
_MIN_WIDTH = 28
#: From this terminal width, the collectives table also shows each collective's kind and JAX op.
_WIDE = 120


def to_json(section: ShardingSection, findings: Sequence["Finding"]) -> dict[str, Any]:
    from jaxdiag.reporting import codec

    return {
        "schema_version": SCHEMA_VERSION,
        "functions": [c.to_json() for c in distinct_compiles(section.functions)],
        "timeline": [codec.to_json(r) for r in section.timeline],
        "findings": [f.to_dict() for f in findings if f.kind in FINDING_KINDS],
    }


def render(
    section: ShardingSection, findings: Sequence["Finding"], *, width: int | None = None, color: bool = False
) -> str:
    """The sharding section as text tables (ANSI colour when ``color``)."""
    from jaxdiag.render.terminal import text_console

    console, buf = text_console(width, color)
    print_functions(section, console, detail=True)
    print_timeline(section, console)
    print_findings(findings, console)
    return buf.getvalue()


def mesh_line(fn: ProgramSharding) -> str:
    mesh = fn.mesh
    axes = ", ".join(f"{n}={s}" for n, s in zip(mesh.axis_names, mesh.axis_sizes))
    kinds = ", ".join(mesh.device_kinds)
    inferred = " (no named mesh)" if mesh.inferred else ""
    return f"mesh({axes}){inferred}" + (f" of {kinds}" if kinds else "")


def print_functions(section: ShardingSection, console: "Console", *, detail: bool) -> None:
    """Per function: a header line, its leaves (with ``detail``) and its collectives."""

    for shown in distinct_compiles(section.functions):
        fn = shown.program
        compiles = ", ".join(str(c) for c in fn.compiles)
        console.print(
            f"[bold]{escape(fn.function)}[/bold] ({escape(fn.module or '?')}, "
            f"compile {compiles}){_steady_text(shown, section.captured)}  "
            f"{escape(mesh_line(fn))}   communication {_bytes(fn.comm_bytes_per_call)} per call"
            + ("" if fn.hlo else "   (optimized HLO not read)")
        )
        if detail:
            leaves = [("in", x) for x in fn.inputs] + [("out", x) for x in fn.outputs]
            rows = [
                [
                    side,
                    *map(
                        escape,
                        (
                            leaf.label,
                            _shape(leaf),
                            _spec(leaf),
                            _bytes(leaf.bytes_per_device),
                            leaf.chosen_by,
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
        colls = fn.collectives
        if not colls:
            console.print("  no collectives" if fn.hlo else "")
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
        args = {x.name for x in fn.inputs if x.name}
        for c in colls:
            op = c.op_name
            arg = f"argument {op}" if op in args else None
            style = "yellow" if c.origin == "resharding" else ""
            runs = f" ×{c.count}" if c.count > 1 else ""
            origin = escape(c.origin)
            cells = [
                escape(c.name),
                escape(c.kind),
                escape(_axes(c.mesh_axes)),
                escape(_bytes(c.bytes_per_call) + runs),
                f"[{style}]{origin}[/{style}]" if style else origin,
                escape(_arrays(c)),
                escape(arg or _primitive(op)),
                _ms(c.timeline_ms) if c.timeline_count else "—",
            ]
            rows.append([cells[i] for i in keep])
            if op:
                op_names.append(f"{c.name}: {arg or op}")
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


def _timeline_op(row: TimelineCollective) -> str:
    """``all-reduce.3``, or ``jit_other/all-reduce.3`` when the module is not the function's own."""
    return row.op if row.function and row.module == f"jit_{row.function}" else f"{row.module}/{row.op}"


def _primitive(op_name: str) -> str:
    """The JAX primitive an HLO op came from: the last part of its op name (``reduce_sum``)."""
    return op_name.split(";")[-1].rsplit("/", 1)[-1].rstrip(")") or "—"


def _steady_text(shown: DistinctCompile, captured: bool) -> str:
    by = shown.steady_by
    if by is None:
        return ""
    if not shown.steady:
        return " [dim]another compile[/dim]"
    if by == "timeline":
        return f" [green]steady[/green]: ran most on the timeline ({shown.runs} collective runs)"
    if captured:
        return (
            " [yellow]latest[/yellow]: which compile ran most is unknown (the capture cannot tell them "
            "apart: they share op names, or none of their collectives ran in it)"
        )
    return " [yellow]latest[/yellow]: which compile ran most is unknown (no capture)"


def print_timeline(section: ShardingSection, console: "Console") -> None:
    """Collective ops on the timeline, with the function and array each serves."""

    rows = section.timeline
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
                escape(r.function or "—"),
                escape(", ".join(r.arrays) or "—"),
                escape(_axes(r.mesh_axes)) if r.function else "—",
                escape(str(r.count)),
                _ms(r.total_ms),
                escape(r.origin or "—"),
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


def _shape(leaf: LeafPlacement) -> str:
    shape = leaf.shape
    return f"{leaf.dtype or '?'}[{','.join(str(d) for d in shape)}]" if shape is not None else "?"


def _spec(leaf: LeafPlacement) -> str:
    return spec_text(leaf.spec) if leaf.spec is not None else leaf.hlo_sharding or "?"


def _axes(axes: Sequence[str] | None) -> str:
    if axes is None:
        return "?"
    return ", ".join(axes) if axes else "—"


def _arrays(c: CollectiveRow) -> str:
    arrays = ", ".join(c.arrays)
    if not arrays:
        return "—"
    return {"update": f"update of {arrays}", "output": f"→ {arrays}"}.get(c.array_role, arrays)


def _ms(value: Any) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "—"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.2f}"
