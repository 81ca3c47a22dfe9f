"""Parse optimized HLO: real executables compiled on 8 CPU devices, and GPU-shaped text for async forms."""

from __future__ import annotations

import pytest

from jaxdiag.sharding import hlo
from jaxdiag.sharding.tiles import MeshGeometry, parse_sharding, replica_groups, spec_text

GEO = MeshGeometry(("data", "model"), (2, 4))


def _compiled(fn, *args):
    import jax

    return hlo.parse_module(jax.jit(fn).lower(*args).compile().as_text())


def _mesh():
    from tests.sharding_programs import MESH_2X4, mesh

    return mesh(*MESH_2X4)


# --- device arrays -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, groups",
    [
        ("{{0,1},{2,3}}", [(0, 1), (2, 3)]),
        ("{{0,4},{1,5},{2,6},{3,7}}", [(0, 4), (1, 5), (2, 6), (3, 7)]),
        ("[2,4]<=[8]", [(0, 1, 2, 3), (4, 5, 6, 7)]),
        ("[4,2]<=[2,4]T(1,0)", [(0, 4), (1, 5), (2, 6), (3, 7)]),
        ("[1,8]<=[8]", [tuple(range(8))]),
        ("[2,2]<=[2,2]T(1,0)", [(0, 2), (1, 3)]),
        ("mesh['axis_0'=1,'axis_1'=4,'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_1'}", [(0, 1, 2, 3), (4, 5, 6, 7)]),
        ("mesh['axis_0'=2,'axis_1'=1,'axis_2'=1,'axis_3'=4] {'axis_0'}", [(0, 4), (1, 5), (2, 6), (3, 7)]),
        ("mesh['a'=2,'b'=4] {'a','b'}", [tuple(range(8))]),
        ("mesh['a'=8] {'a':(2)2}", [(0, 2), (1, 3), (4, 6), (5, 7)]),
        ("mesh['a'=2,'b'=2], device_ids=(0,2,1,3) {'b'}", [(0, 2), (1, 3)]),
        ("{}", [tuple(range(8))]),
    ],
)
def test_replica_group_forms(text, groups):
    assert replica_groups(text, 8) == groups


@pytest.mark.parametrize(
    "groups, axes",
    [
        ([(0, 1, 2, 3), (4, 5, 6, 7)], ("model",)),
        ([(0, 4), (1, 5), (2, 6), (3, 7)], ("data",)),
        ([tuple(range(8))], ("data", "model")),
        ([(0, 3), (1, 2), (4, 7), (5, 6)], None),  # half an axis, out of order: no whole axis
        ([(0, 1), (2, 3), (4, 5), (6, 7)], None),
        ([(0, 9)], None),  # an id off the mesh
    ],
)
def test_groups_map_to_mesh_axes(groups, axes):
    assert GEO.axes_of_groups(groups) == axes


def test_groups_follow_the_device_order():
    # Logical device i sits at mesh position positions[i]: a transposed assignment.
    geo = MeshGeometry(("data", "model"), (2, 4), positions=(0, 4, 1, 5, 2, 6, 3, 7))
    assert geo.axes_of_groups([(0, 1), (2, 3), (4, 5), (6, 7)]) == ("data",)


@pytest.mark.parametrize(
    "text, spec",
    [
        ("{replicated}", "P()"),
        ("{devices=[2,1,4]<=[8] last_tile_dim_replicate}", "P('data', None)"),
        ("{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}", "P(None, 'model')"),
        ("{devices=[2,4]<=[8]}", "P('data', 'model')"),
        ("{devices=[4,2]<=[2,4]T(1,0)}", "P('model', 'data')"),
        ("{devices=[8,1]<=[8]}", "P(('data', 'model'), None)"),
        ("{devices=[8,1]<=[2,4]T(1,0)}", "P(('model', 'data'), None)"),
        ("{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}", "P('data', None)"),
        ("{devices=[2,4]0,2,1,3,4,6,5,7}", "?"),  # fits no axis order
        ("{maximal device=3}", "?"),
    ],
)
def test_hlo_sharding_to_partition_spec(text, spec):
    assert spec_text(GEO.spec_of(parse_sharding(text))) == spec


def test_tuple_and_manual_shardings():
    s = parse_sharding("{{replicated}, {devices=[2,4]<=[8]}}")
    assert s.kind == "tuple" and [e.kind for e in s.elements] == ["replicated", "tiled"]
    assert parse_sharding("{devices=[2,1,4]<=[8] last_tile_dims={manual}}").kind == "manual"


# --- real executables ----------------------------------------------------------------


def test_data_parallel_gradient_all_reduce_over_data():
    import jax
    import jax.numpy as jnp

    from tests.sharding_programs import _mlp_loss, mesh, put

    m = mesh((8,), ("data",))

    def step(params, x):
        grads = jax.grad(_mlp_loss)(params, x)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w1": put(jnp.ones((64, 128)), m), "w2": put(jnp.ones((128, 32)), m)}
    module = _compiled(step, params, put(jnp.ones((256, 64)), m, "data"))
    assert module.name == "jit_step" and module.num_partitions == 8
    (ar,) = hlo.collectives(module, MeshGeometry(("data",), (8,)))
    assert ar.kind == "all-reduce" and ar.mesh_axes == ("data",) and ar.group_size == 8
    # Both gradients in one combined all-reduce (XLA may hold them transposed), each applied
    # to its own weight.
    assert len(ar.result_shapes) == 2 and ar.bytes == (64 * 128 + 128 * 32) * 4
    assert set(ar.arrays) == {"params['w1']", "params['w2']"} and ar.array_role == "update"
    assert "dot_general" in ar.op_name
    assert [hlo.param_name(p) for p in module.entry_params()] == ["params['w1']", "params['w2']", "x"]


def test_tensor_parallel_on_2x4_reduces_over_model_then_data():
    from tests.sharding_programs import tensor_parallel

    (record,) = tensor_parallel().records
    colls = record["sharding"]["collectives"]
    axes = sorted(tuple(c["mesh_axes"]) for c in colls)
    assert axes == [("data",), ("model",)] and all(c["kind"] == "all-reduce" for c in colls)
    forward = next(c for c in colls if c["mesh_axes"] == ["model"])
    assert forward["result_shapes"] == ["f32[32,64]"]  # activations: batch over data, full width
    assert forward["op_name"].endswith("dot_general")


def test_bad_spec_gathers_the_whole_weight_over_model():
    import jax.numpy as jnp

    from tests.sharding_programs import put

    import jax

    from jaxdiag import jax_internals

    m = _mesh()
    args = put(jnp.ones((512, 512)), m, "model", None), put(jnp.ones((2048, 512)), m, "data", None)
    compiled = jax.jit(lambda w, x: jnp.tanh(x @ w)).lower(*args).compile()
    module = hlo.parse_module(compiled.as_text())
    (ag,) = hlo.collectives(module, GEO)
    assert (ag.kind, ag.mesh_axes, ag.arrays, ag.array_role) == ("all-gather", ("model",), ("w",), "operand")
    assert ag.operand_shapes == ("f32[128,512]",) and ag.result_shapes == ("f32[512,512]",)
    assert ag.bytes == 512 * 512 * 4 and ag.operand_bytes == ag.bytes // 4
    w_param = next(p for p in module.entry_params() if hlo.param_name(p) == "w")
    # The executable's parameter shardings (JAX 0.12's optimized HLO text no longer carries them).
    texts = jax_internals.read_parameter_shardings(compiled.runtime_executable())
    assert texts is not None and len(texts) == 2
    given = [parse_sharding(t) for t in texts]
    assert spec_text(GEO.spec_of(hlo.entry_param_sharding(w_param, given))) == "P('model', None)"
    if "sharding=" in w_param.attrs:  # JAX before 0.12: the text says the same
        assert spec_text(GEO.spec_of(hlo.entry_param_sharding(w_param))) == "P('model', None)"


def test_roll_shifts_rows_between_devices_on_model():
    import jax.numpy as jnp

    from tests.sharding_programs import put

    module = _compiled(lambda x: jnp.roll(x, 1, axis=0), put(jnp.ones((16, 64)), _mesh(), "model", None))
    (cp,) = hlo.collectives(module, GEO)
    assert (cp.kind, cp.mesh_axes, cp.arrays) == ("collective-permute", ("model",), ("x",))
    assert cp.n_groups == 8 and cp.bytes == 64 * 4


def test_changing_the_split_axis_is_an_all_to_all():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from tests.sharding_programs import put

    m = _mesh()
    module = _compiled(
        lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(m, P(None, "model"))),
        put(jnp.ones((16, 64)), m, "model", None),
    )
    (a2a,) = hlo.collectives(module, GEO)
    assert a2a.kind == "all-to-all" and a2a.mesh_axes == ("model",)
    assert a2a.op_name.endswith("sharding_constraint")


def test_scan_body_collectives_count_once_per_iteration():
    import jax
    import jax.numpy as jnp

    from tests.sharding_programs import put

    def stack(ws, x):
        return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]

    m = _mesh()
    module = _compiled(
        stack, put(jnp.ones((3, 128, 128)), m, None, "model", None), put(jnp.ones((256, 128)), m, "data", None)
    )
    colls = hlo.collectives(module, GEO)
    assert colls and all(c.count == 3 and c.count_exact for c in colls)
    assert all(c.computation != module.entry for c in colls)


def test_shard_map_collectives_keep_their_primitive():
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from tests.sharding_programs import put

    m = _mesh()
    f = jax.shard_map(
        lambda x: jax.lax.psum_scatter(x, "model", tiled=True),
        mesh=m,
        in_specs=P("data", None),
        out_specs=P("data", "model"),
    )
    module = _compiled(f, put(jnp.ones((16, 64)), m, "data", None))
    (rs,) = hlo.collectives(module, GEO)
    assert rs.kind == "reduce-scatter" and rs.mesh_axes == ("model",)
    assert "psum_scatter" in rs.op_name or "reduce_scatter" in rs.op_name


# --- GPU-shaped text: async pairs, wrapped collectives, inline operand shapes --------

GPU_TEXT = r"""HloModule jit_train_step, is_scheduled=true, entry_computation_layout={(f32[128,256]{1,0}, f32[1024,256]{1,0})->(f32[1024,256]{1,0}, f32[128,256]{1,0})}, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.1 = f32[] add(f32[] %x, f32[] %y)
}

%wrapped_reduce_scatter (param_0: f32[1024,256]) -> f32[128,256] {
  %param_0 = f32[1024,256]{1,0} parameter(0)
  ROOT %reduce-scatter.1 = f32[128,256]{1,0} reduce-scatter(f32[1024,256]{1,0} %param_0), channel_id=3, replica_groups=[1,8]<=[8], use_global_device_ids=true, dimensions={0}, to_apply=%add, metadata={op_name="jit(train_step)/transpose(jvp())/dot_general"}
}

%body (p: (s32[], f32[128,256])) -> (s32[], f32[128,256]) {
  %p = (s32[], f32[128,256]{1,0}) parameter(0)
  %i = s32[] get-tuple-element((s32[], f32[128,256]{1,0}) %p), index=0
  %h = f32[128,256]{1,0} get-tuple-element((s32[], f32[128,256]{1,0}) %p), index=1
  %collective-permute-start = (f32[128,256]{1,0}, f32[128,256]{1,0}, u32[], u32[]) collective-permute-start(f32[128,256]{1,0} %h), channel_id=4, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
  %collective-permute-done = f32[128,256]{1,0} collective-permute-done((f32[128,256]{1,0}, f32[128,256]{1,0}, u32[], u32[]) %collective-permute-start)
  ROOT %t = (s32[], f32[128,256]{1,0}) tuple(s32[] %i, f32[128,256]{1,0} %collective-permute-done)
}

%cond (p.1: (s32[], f32[128,256])) -> pred[] {
  %p.1 = (s32[], f32[128,256]{1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element((s32[], f32[128,256]{1,0}) %p.1), index=0
  %n = s32[] constant(6)
  ROOT %lt = pred[] compare(s32[] %i.1, s32[] %n), direction=LT
}

ENTRY %main.7_spmd (param.1: f32[128,256], param.2: f32[1024,256]) -> (f32[1024,256], f32[128,256]) {
  %param.1 = f32[128,256]{1,0} parameter(0), sharding={devices=[8,1]<=[8]}, metadata={op_name="params[\'w\']"}
  %param.2 = f32[1024,256]{1,0} parameter(1), sharding={replicated}, metadata={op_name="grads"}
  %all-gather-start = (f32[128,256]{1,0}, f32[1024,256]{1,0}) all-gather-start(f32[128,256]{1,0} %param.1), channel_id=1, replica_groups=[1,8]<=[8], dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(train_step)/dot_general"}, backend_config={"operation_queue_id":"0","wait_on_operation_queues":[]}
  %all-gather-done = f32[1024,256]{1,0} all-gather-done((f32[128,256]{1,0}, f32[1024,256]{1,0}) %all-gather-start)
  %reduce-scatter-start = ((f32[1024,256]{1,0}), f32[128,256]{1,0}) async-start(f32[1024,256]{1,0} %param.2), calls=%wrapped_reduce_scatter
  %reduce-scatter-done = f32[128,256]{1,0} async-done(((f32[1024,256]{1,0}), f32[128,256]{1,0}) %reduce-scatter-start)
  %zero = s32[] constant(0)
  %init = (s32[], f32[128,256]{1,0}) tuple(s32[] %zero, f32[128,256]{1,0} %reduce-scatter-done)
  %while = (s32[], f32[128,256]{1,0}) while((s32[], f32[128,256]{1,0}) %init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"6"}}
  %loop = f32[128,256]{1,0} get-tuple-element((s32[], f32[128,256]{1,0}) %while), index=1
  ROOT %tuple = (f32[1024,256]{1,0}, f32[128,256]{1,0}) tuple(f32[1024,256]{1,0} %all-gather-done, f32[128,256]{1,0} %loop)
}
"""


def test_async_pairs_wrapped_collectives_and_loops_in_gpu_text():
    module = hlo.parse_module(GPU_TEXT)
    geo = MeshGeometry(("fsdp",), (8,))
    by_kind = {c.kind: c for c in hlo.collectives(module, geo)}
    assert set(by_kind) == {"all-gather", "reduce-scatter", "collective-permute"}
    ag = by_kind["all-gather"]
    assert ag.name == "all-gather-start" and ag.aliases == ("all-gather-done",)
    assert ag.operand_shapes == ("f32[128,256]",) and ag.result_shapes == ("f32[1024,256]",)
    assert ag.bytes == 1024 * 256 * 4 and ag.mesh_axes == ("fsdp",)
    assert ag.arrays == ("params['w']",) and ag.count == 1
    rs = by_kind["reduce-scatter"]
    assert rs.name == "reduce-scatter.1" and "reduce-scatter-start" in rs.aliases
    assert rs.bytes == 1024 * 256 * 4 and rs.result_bytes == 128 * 256 * 4
    assert rs.arrays == ("grads",)  # reached through the async-start's operand
    cp = by_kind["collective-permute"]
    assert cp.count == 6 and cp.count_exact and cp.result_shapes == ("f32[128,256]",)
    assert cp.mesh_axes == ("fsdp",) and cp.aliases == ("collective-permute-done",)
    # The permute moves the loop carry: the scattered sum of ``grads``, through the while and
    # the async wrapper.
    assert cp.arrays == ("grads",)


def test_unknown_trip_count_is_flagged_and_empty_text_has_no_collectives():
    text = GPU_TEXT.replace(', backend_config={"known_trip_count":{"n":"6"}}', "")
    cp = next(c for c in hlo.collectives(hlo.parse_module(text)) if c.kind == "collective-permute")
    assert cp.count == 1 and not cp.count_exact and cp.mesh_axes is None  # no mesh given
    assert hlo.collectives(hlo.parse_module("")) == []


def test_collective_round_trips_through_dict():
    c = hlo.collectives(hlo.parse_module(GPU_TEXT), MeshGeometry(("fsdp",), (8,)))[0]
    assert hlo.Collective.from_dict(c.to_dict()) == c
