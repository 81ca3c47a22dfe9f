"""The placement figure: each sharded array drawn as a grid of the blocks its spec cuts, over the mesh.

What treescope's ``render_array_sharding`` draws, from ``report.sharding`` alone:
an array's first two dimensions cut into blocks by the mesh axes its spec names,
each block labelled with the mesh coordinates that hold it (``data 1 · model 0``);
axes the spec does not name hold a copy of every block (listed on hover). A
vector is one row of blocks; higher ranks draw their first two dimensions and say so.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import TYPE_CHECKING, Any, Sequence

from jaxdiag.render.figures import _finish, _go, _short, no_data
from jaxdiag.sharding.tiles import spec_text

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from jaxdiag.reporting.model import Report

TITLE = "Placement: how each sharded input is split over the mesh"
_MAX_ARRAYS = 8
_PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#EECA3B", "#B279A2", "#FF9DA6", "#9D755D")


@dataclasses.dataclass(frozen=True, slots=True)
class Block:
    """One block of an array: its place in the grid and the mesh coordinates that hold it.

    Attributes:
      row, col: the block's index along the array's first and second dimension.
      fixed: ``(axis, coordinate)`` of each mesh axis the spec splits the array over.
      copies: how many devices hold this block (the product of the other axes' sizes).
    """

    row: int
    col: int
    fixed: tuple[tuple[str, int], ...]
    copies: int

    @property
    def label(self) -> str:
        return " · ".join(f"{a} {i}" for a, i in self.fixed) or "every device"


def blocks(
    shape: Sequence[int], spec: Sequence[Any], axis_names: Sequence[str], axis_sizes: Sequence[int]
) -> tuple[int, int, list[Block]]:
    """``(rows, cols, blocks)`` of an array's first two dimensions cut by ``spec`` over the mesh.

    An entry of ``spec`` names one axis, several (major first) or none; the block
    index along a dimension is the mixed-radix number of its axes' coordinates, as
    JAX lays out ``PartitionSpec(('a', 'b'))``.
    """
    sizes = dict(zip(axis_names, axis_sizes))
    entries = list(spec) + [None] * (len(shape) - len(spec))

    def axes(entry: Any) -> list[str]:
        return [] if entry is None else [entry] if isinstance(entry, str) else list(entry)

    dims = [axes(e) for e in entries[:2]]
    dims = [[], dims[0]] if len(dims) == 1 else dims if dims else [[], []]  # a vector is one row
    used = {a for d in entries for a in axes(d)}
    copies = math.prod(s for a, s in sizes.items() if a not in used)
    per_dim = [[math.prod(sizes[a] for a in d)] for d in dims]
    rows, cols = per_dim[0][0], per_dim[1][0]
    out = []
    for r, c in itertools.product(range(rows), range(cols)):
        fixed: list[tuple[str, int]] = []
        for index, names in ((r, dims[0]), (c, dims[1])):
            coords = []
            for a in reversed(names):  # minor axis first
                coords.append((a, index % sizes[a]))
                index //= sizes[a]
            fixed += reversed(coords)
        out.append(Block(r, c, tuple(fixed), copies))
    return rows, cols, out


def _markup_safe(text: str) -> str:
    """``text`` for a plotly label, which plotly reads as a subset of HTML."""
    import html

    return html.escape(text, quote=False)


def sharding_layouts(report: "Report") -> "go.Figure":
    """One grid per sharded input of each function's steady compile (at most ``_MAX_ARRAYS``)."""
    from jaxdiag.render.sharding_compiles import distinct_compiles

    arrays = []
    for shown in distinct_compiles(report.sharding.functions):
        if not shown.steady:
            continue
        fn = shown.program
        for leaf in fn.inputs:
            if leaf.spec is None or not leaf.shape or not any(e not in (None, ()) for e in leaf.spec):
                continue
            arrays.append((fn, leaf))
    if not arrays:
        return no_data(TITLE, "no sharded inputs (replicated, single-device, or no sharding facts in this report)")
    note = f"the first {_MAX_ARRAYS} of {len(arrays)} sharded inputs" if len(arrays) > _MAX_ARRAYS else ""
    arrays = arrays[:_MAX_ARRAYS]
    go = _go()
    from plotly.subplots import make_subplots

    titles = [  # plotly reads titles as HTML: names from a log are escaped
        _markup_safe(
            _short(
                f"{fn.function}: {leaf.label} {leaf.dtype or ''}[{','.join(map(str, leaf.shape or ()))}] "
                f"{spec_text(leaf.spec)}",
                60,
            )
        )
        for fn, leaf in arrays
    ]
    cols = 2 if len(arrays) > 1 else 1
    n_rows = math.ceil(len(arrays) / cols)
    fig = make_subplots(rows=n_rows, cols=cols, subplot_titles=titles, vertical_spacing=0.12 / max(n_rows, 1) + 0.05)
    for k, (fn, leaf) in enumerate(arrays):
        shape, spec = leaf.shape or (), leaf.spec or ()
        rows, cols_n, grid = blocks(shape, spec, fn.mesh.axis_names, fn.mesh.axis_sizes)
        unused = [a for a in fn.mesh.axis_names if not any(a == f for b in grid for f, _ in b.fixed)]
        z = [[0.0] * cols_n for _ in range(rows)]
        text = [[""] * cols_n for _ in range(rows)]
        hover = [[""] * cols_n for _ in range(rows)]
        for i, b in enumerate(grid):
            z[b.row][b.col] = float(i % len(_PALETTE))
            text[b.row][b.col] = b.label
            hover[b.row][b.col] = f"block ({b.row}, {b.col}) held by {b.label}" + (
                f"; a copy on each of {b.copies} devices along {', '.join(unused)}" if b.copies > 1 else ""
            )
        fig.add_trace(
            go.Heatmap(
                z=z,
                text=text,
                customdata=hover,
                texttemplate="%{text}",
                hovertemplate="%{customdata}<extra></extra>",
                colorscale=[[i / (len(_PALETTE) - 1), c] for i, c in enumerate(_PALETTE)],
                zmin=0,
                zmax=len(_PALETTE) - 1,
                showscale=False,
                xgap=2,
                ygap=2,
            ),
            row=k // cols + 1,
            col=k % cols + 1,
        )
        fig.update_xaxes(title_text="dim 1" if len(shape) > 1 else "dim 0", row=k // cols + 1, col=k % cols + 1)
        fig.update_yaxes(autorange="reversed", showticklabels=False, row=k // cols + 1, col=k % cols + 1)
        if len(shape) > 2:
            note = (note + "; " if note else "") + f"{titles[k]}: first two dimensions drawn"
    fig.update_layout(height=max(300, 260 * n_rows + 80))
    return _finish(fig, TITLE, note)
