"""What the sharding section leaves out or says plainly: a mesh known only from context is named,
a single-device program gets no entry, and a capture is never called "no capture"."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

import jaxdiag
from jaxdiag.analyses.sharding import analyze_records
from jaxdiag.recording import compile_log
from jaxdiag.render.sharding_table import mesh_line, render
from tests import sharding_programs as programs


def test_mesh_in_context_is_named_when_the_arguments_carry_none() -> None:
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    mesh = programs.mesh(*programs.MESH_2X4)
    x = jnp.ones((16, 4))  # uncommitted: it carries no mesh, nor does a bare PartitionSpec
    with compile_log.collecting() as got, jax.set_mesh(mesh):
        jax.block_until_ready(jaxdiag.jit(lambda v: (v * 2).sum(0), in_shardings=P("data"))(x))
    (record,) = got.records
    assert record.sharding["mesh"]["axis_names"] == ["data", "model"] and not record.sharding["mesh"]["inferred"]
    (fn,) = analyze_records([record.to_dict()]).section().functions
    assert "no named mesh" not in mesh_line(fn)


def test_single_device_program_gets_no_sharding_entry() -> None:
    with compile_log.collecting() as got:
        jax.block_until_ready(jaxdiag.jit(lambda v: v + 1, analysis=True)(jnp.ones(3)))
    (record,) = got.records
    assert record.sharding is not None and record.sharding["mesh"]["axis_sizes"] == [1]  # recorded ...
    result = analyze_records([record.to_dict()])
    assert result.functions == () and result.findings == ()  # ... and not shown
    assert "no collectives" not in render(result.section(), result.findings, width=120)


def test_a_capture_is_never_called_no_capture() -> None:
    records = programs.sharding_change().records  # two compiles of `moved`
    with_capture = analyze_records(records, timeline={})  # a capture in which none of their collectives ran
    text = render(with_capture.section(), with_capture.findings, width=200)
    assert "no capture" not in text and "the capture cannot tell them apart" in text
    without = analyze_records(records)
    assert "which compile ran most is unknown (no capture)" in render(without.section(), without.findings, width=200)


def test_an_older_log_naming_equivalent_specs_gives_no_sharding_recompile() -> None:
    """Records written before placements were compared may name P('data', None) -> P('data',) as a change."""
    import copy

    records = [copy.deepcopy(r) for r in programs.sharding_change().records]
    first, second = records
    second["sharding"] = copy.deepcopy(first["sharding"])  # the same program ...
    for leaf in second["sharding"]["inputs"]:
        if leaf["path"] == "args[1]":
            leaf["spec"] = [leaf["spec"][0]]  # ... its spec written without the trailing None
    (change,) = [c for c in second["explanation"]["changes"] if c["what"] == "sharding"]
    assert analyze_records(records).findings == ()
    assert change["path"] == "args[1]"
