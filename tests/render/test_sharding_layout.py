"""The placement figure: its blocks agree with where JAX puts each piece (``devices_indices_map``)."""

from __future__ import annotations

import dataclasses
import types

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxdiag.analyses.sharding import analyze_records
from jaxdiag.render.figures import all_figures
from jaxdiag.render.sharding_layout import TITLE, blocks, sharding_layouts
from tests import sharding_programs as programs


@pytest.mark.parametrize(
    ("shape", "spec"),
    [
        ((8, 16), P("data", None)),
        ((8, 16), P(None, "model")),
        ((8, 16), P("model", "data")),
        (
            (16, 8),
            P(
                ("data", "model"),
            ),
        ),
        ((16, 8), P(None, ("model", "data"))),
        ((16,), P("model")),
        ((4, 8, 2), P("data", "model")),
    ],
    ids=str,
)
def test_blocks_match_jax_placement(shape, spec) -> None:
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    mesh = programs.mesh(*programs.MESH_2X4)
    rows, cols, grid = blocks(shape, list(spec), mesh.axis_names, mesh.devices.shape)
    # JAX's truth: each device's slice of the array, as a block of the drawn grid.
    truth: dict[tuple[int, int], set[int]] = {}
    drawn = (1, shape[0]) if len(shape) == 1 else shape[:2]
    for device, index in NamedSharding(mesh, spec).devices_indices_map(shape).items():
        starts = [sl.start or 0 for sl in index[:2]]
        starts = [0, starts[0]] if len(shape) == 1 else starts
        block = (starts[0] * rows // drawn[0], starts[1] * cols // drawn[1])
        truth.setdefault(block, set()).add(device.id)
    ours: dict[tuple[int, int], set[int]] = {}
    for b in grid:
        fixed = dict(b.fixed)
        held = {
            int(mesh.devices[pos].id)
            for pos in np.ndindex(mesh.devices.shape)
            if all(pos[mesh.axis_names.index(a)] == i for a, i in fixed.items())
        }
        assert len(held) == b.copies
        ours[(b.row, b.col)] = held
    assert ours == truth


def test_figure_draws_each_sharded_input_of_the_steady_compile() -> None:
    result = analyze_records(programs.tensor_parallel().records)
    report = types.SimpleNamespace(sharding=result.section())
    fig = sharding_layouts(report)
    titles = [a.text for a in fig.layout.annotations]
    assert fig.layout.title.text == TITLE and len(fig.data) == 3  # w1, w2 and x are split; nothing else is
    assert any("params['w1']" in t and "P(None, 'model')" in t for t in titles)
    assert any(t.startswith("tp_step: x ") and "P('data', None)" in t for t in titles)
    (w1,) = [d for d, t in zip(fig.data, titles) if "params['w1']" in t]
    assert np.array(w1.text).tolist() == [["model 0", "model 1", "model 2", "model 3"]]
    replicated = types.SimpleNamespace(sharding=analyze_records(programs.data_parallel().records).section())
    assert "no sharded inputs" not in str(sharding_layouts(replicated).layout.annotations)  # x is split on data


def test_placement_figure_is_among_the_reports_figures() -> None:
    from jaxdiag.render import registry

    assert "sharding_layouts" in registry.figure_names()
    assert "sharding_layouts" in all_figures.__globals__


def test_names_from_a_log_are_escaped_for_plotly() -> None:
    section = analyze_records(programs.tensor_parallel().records).section()
    first = section.functions[0]
    hostile = dataclasses.replace(first.inputs[0], name="<img src=x onerror=alert(1)>")
    first = dataclasses.replace(first, inputs=(hostile, *first.inputs[1:]))
    fig = sharding_layouts(types.SimpleNamespace(sharding=dataclasses.replace(section, functions=(first,))))
    titles = " ".join(a.text for a in fig.layout.annotations)
    assert "<img" not in titles and "&lt;img src=x onerror=alert(1)&gt;" in titles
