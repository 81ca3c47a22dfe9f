"""Sharding facts from live objects, and their collection into compile records on 8 CPU devices."""

from __future__ import annotations

import json
import warnings

import pytest

from jaxdiag.sharding import specs
from jaxdiag.sharding.facts import LeafSharding, MeshFacts, ShardingFacts, format_bytes
from tests.sharding_programs import MESH_2X4, mesh, put


@pytest.fixture(autouse=True)
def fresh_compile_log():
    from jaxdiag.recording import compile_log

    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=False)
    yield
    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=False)


def test_mesh_facts_name_axes_and_device_kinds():
    m = specs.mesh_facts(mesh(*MESH_2X4))
    assert (m.axis_names, m.axis_sizes, m.n_devices, m.platform) == (("data", "model"), (2, 4), 8, "cpu")
    assert m.device_kinds == ("cpu",) and m.axis_types == ("Auto", "Auto") and m.text == "mesh(data=2, model=4)"


def test_leaf_sharding_of_live_arrays():
    import jax.numpy as jnp

    m = mesh(*MESH_2X4)
    w = specs.leaf_sharding("args[0]", put(jnp.ones((64, 32), jnp.bfloat16), m, None, "model"))
    assert (w.spec, w.replicated, w.chosen_by) == ((None, "model"), False, "user")
    assert w.bytes_per_device == 64 * 8 * 2 and w.dtype == "bfloat16" and w.sharded_axes() == ("model",)
    both = specs.leaf_sharding("x", put(jnp.ones((16, 8)), m, ("data", "model")))
    assert both.spec == (("data", "model"), None) and both.bytes_per_device == 2 * 8 * 4
    rep = specs.leaf_sharding("r", put(jnp.ones((4, 4)), m))
    assert rep.replicated and rep.spec_text == "P()" and rep.bytes_per_device == 64
    loose = specs.leaf_sharding("u", jnp.ones(5))  # never placed: the compiler will choose
    assert loose.chosen_by == "compiler" and loose.replicated


def test_spec_entries_pad_to_rank_and_fold_replication():
    from jax.sharding import PartitionSpec as P

    assert specs.spec_entries(P("data"), 2) == ("data", None)
    assert specs.spec_entries(P(None, None), 2) == ()
    assert specs.spec_entries(P(("a",), ("b", "c")), 2) == ("a", ("b", "c"))


def test_dynamic_leaves_follow_jax_parameter_order():
    leaves = specs.dynamic_leaves((1, {"b": 2, "a": 3}, 4), {"z": 5, "k": {"q": 6}}, ((2,), ("z",)))
    assert [(p, k) for p, k, _ in leaves] == [
        ("args[0]", ""),
        ("args[1]['a']", "['a']"),
        ("args[1]['b']", "['b']"),
        ("kwargs['k']['q']", "['q']"),
    ]


def test_uncommitted_inputs_get_the_compilers_choice():
    import jax
    import jax.numpy as jnp

    from jaxdiag.sharding.collect import build_facts

    m = mesh(*MESH_2X4)
    w = put(jnp.ones((32, 32)), m, None, "model")
    x = jnp.ones((8, 32))  # uncommitted
    compiled = jax.jit(lambda w, x: x @ w).lower(w, x).compile()
    leaves = specs.dynamic_leaves((w, x), {}, ((), ()))
    facts = build_facts(compiled.as_text(), leaves, mesh=m, devices=list(m.devices.flat))
    by_path = {leaf.path: leaf for leaf in facts.inputs}
    assert by_path["args[0]"].chosen_by == "user" and by_path["args[0]"].spec == (None, "model")
    assert by_path["args[1]"].chosen_by == "compiler" and by_path["args[1]"].replicated
    assert by_path["args[1]"].name == "x" and by_path["args[1]"].bytes_per_device == 8 * 32 * 4
    assert facts.module == "jit__lambda" and facts.collectives == ()


def test_unused_arguments_are_left_out_of_the_pairing():
    import jax
    import jax.numpy as jnp

    from jaxdiag.sharding.collect import build_facts

    m = mesh(*MESH_2X4)
    w, unused, x = put(jnp.ones((32, 32)), m, None, "model"), jnp.ones(5), put(jnp.ones((8, 32)), m, "data")
    compiled = jax.jit(lambda w, unused, x: x @ w).lower(w, unused, x).compile()
    facts = build_facts(compiled.as_text(), specs.dynamic_leaves((w, unused, x), {}, ((), ())), mesh=m)
    assert [(leaf.path, leaf.name) for leaf in facts.inputs] == [("args[0]", "w"), ("args[1]", None), ("args[2]", "x")]
    assert facts.inputs[2].bytes_per_device == 4 * 32 * 4


def test_facts_round_trip_through_json():
    facts = ShardingFacts(
        "jit_f",
        MeshFacts(("d",), (8,), ("cpu",), "cpu"),
        inputs=(LeafSharding("args[0]", "w", (8, 4), "float32", (("d",), None), 16, "user"),),
        outputs=(LeafSharding("out[0]", None, (8, 4), "float32", None, 128, hlo_sharding="{x}"),),
    )
    again = ShardingFacts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again == facts and again.comm_bytes_per_call == 0
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(3 * 2**30) == "3.0 GiB" and format_bytes(12) == "12 B"


# --- collection at compile time ------------------------------------------------------


def test_multi_device_compiles_record_sharding_by_default():
    from tests.sharding_programs import bad_spec

    records = bad_spec().records
    assert len(records) == 1  # the second call hit the cache
    sh = records[0]["sharding"]
    assert sh["module"] == "jit_bad_step" and sh["mesh"]["axis_names"] == ["data", "model"]
    assert sh["comm_bytes_per_call"] == 512 * 512 * 4
    inputs = {leaf["path"]: leaf for leaf in sh["inputs"]}
    assert inputs["args[0]['w']"]["name"] == "params['w']" and inputs["args[0]['w']"]["spec"] == ["model", None]
    assert sh["outputs"][0]["shape"] == [2048] and sh["outputs"][0]["spec"] == ["data"]
    # The record round-trips through its JSONL line; a line written before the field existed reads as None.
    from jaxdiag.recording.records import CompileRecord

    line = json.loads(json.dumps(records[0]))
    assert CompileRecord.from_dict(line).to_dict() == records[0]
    assert ShardingFacts.from_dict(line["sharding"]).to_dict() == sh
    del line["sharding"]
    assert CompileRecord.from_dict(line).sharding is None


def test_an_input_with_unreduced_axes_has_its_facts_recorded():
    """An einsum's unreduced output (partial sums over ``model``) passed to another jit: JAX refuses
    ``*spec`` for such a spec, which once cost the second compile its sharding facts (with a warning)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType
    from jax.sharding import PartitionSpec as P

    import jaxdiag
    from jaxdiag.recording import compile_log

    try:
        unreduced = P("data", None, unreduced={"model"})
    except TypeError:
        pytest.skip("this JAX has no unreduced axes in a PartitionSpec")
    m = jax.make_mesh(MESH_2X4[0], MESH_2X4[1], axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(m), warnings.catch_warnings():
        warnings.simplefilter("error")  # a JaxdiagWarning fails the test
        x = jax.device_put(np.arange(64.0).reshape(16, 4), P("data", "model"))
        y = jax.device_put(np.arange(64.0).reshape(4, 16), P("model", None))
        out = jaxdiag.jit(lambda x, y: jnp.einsum("xy,yz->xz", x, y, out_sharding=unreduced))(x, y)
        doubled = jaxdiag.jit(lambda a: jax.sharding.reshard(a + a, P("data", None)))(out)
    np.testing.assert_allclose(np.asarray(doubled), 2 * np.arange(64.0).reshape(16, 4) @ np.arange(64.0).reshape(4, 16))
    sharding = compile_log.records()[-1].sharding
    assert sharding is not None
    assert [leaf["spec"] for leaf in sharding["inputs"]] == [["data", None]]


def test_jit_in_and_out_shardings_count_as_the_users_choice():
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxdiag.recording.wrapper as w
    from jaxdiag.recording import compile_log

    m = mesh(*MESH_2X4)

    @w.jit(in_shardings=NamedSharding(m, P("data")), out_shardings=NamedSharding(m, P(None, "model")))
    def placed(x):
        return x * 2

    placed(jnp.ones((8, 8)))  # uncommitted: only jit's shardings place it
    (record,) = compile_log.records(placed)
    (leaf,) = record.sharding["inputs"]
    (out,) = record.sharding["outputs"]
    assert (leaf["spec"], leaf["chosen_by"]) == (["data", None], "user")
    assert (out["spec"], out["chosen_by"]) == ([None, "model"], "user")
    # Rows split over data become columns split over model: the rows are gathered over data.
    assert [(c["kind"], c["mesh_axes"]) for c in record.sharding["collectives"]] == [("all-gather", ["data"])]


def test_single_device_compiles_skip_the_hlo_unless_analysis_is_on():
    import jax.numpy as jnp

    import jaxdiag.recording.wrapper as w
    from jaxdiag.recording import compile_log

    @w.jit
    def plain(x):
        return x * 2

    @w.jit(analysis=True)
    def analysed(x):
        return x @ x

    plain(jnp.ones(3))
    analysed(jnp.ones((4, 4)))
    by_name = {r.function: r for r in compile_log.records()}
    assert by_name["plain"].sharding is None
    sh = by_name["analysed"].sharding
    assert sh["mesh"]["inferred"] and sh["mesh"]["axis_sizes"] == [1] and sh["collectives"] == []
    assert sh["inputs"][0]["replicated"] and sh["outputs"][0]["replicated"]


def test_a_failure_warns_once_and_never_breaks_the_call(monkeypatch):
    import jax.numpy as jnp

    import jaxdiag.recording.wrapper as w
    from jaxdiag.errors import JaxdiagWarning
    from jaxdiag.recording import compile_log
    from jaxdiag import errors
    from jaxdiag.sharding import hlo

    def broken(text):
        raise ValueError("unreadable HLO")

    monkeypatch.setattr(hlo, "parse_module", broken)
    monkeypatch.setattr(errors, "_warned", set())
    m = mesh((8,), ("data",))

    @w.jit
    def f(x):
        return x + 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")  # a warning turned error must not reach the call either
        out = f(put(jnp.ones(8), m, "data"))
        f(put(jnp.ones(16), m, "data"))
    assert float(out.sum()) == 16.0
    records = compile_log.records(f)
    assert len(records) == 2 and all(r.sharding is None for r in records)
    assert not [c for c in caught if issubclass(c.category, JaxdiagWarning)]
    monkeypatch.setattr(errors, "_warned", set())
    with pytest.warns(JaxdiagWarning, match="unreadable HLO"):
        f(put(jnp.ones(24), m, "data"))
