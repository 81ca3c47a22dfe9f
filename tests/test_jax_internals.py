"""One test per capability of ``jaxdiag.jax_internals``, each on a real program.

A JAX (or flax, equinox) upgrade that moves what jaxdiag reads fails the test
named after the capability, rather than leaving the recorder silent.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import pytest
from jax import monitoring

from jaxdiag import jax_internals as J
from jaxdiag import errors
from jaxdiag.errors import JaxdiagWarning


_on_duration: list = []  # the callbacks of the test running now
_on_start: list = []


def _duration(event, duration, **kwargs):
    for fn in list(_on_duration):
        fn(event, duration, **kwargs)


def _start(event, value, **kwargs):
    for fn in list(_on_start):
        fn(event, value, **kwargs)


monitoring.register_event_duration_secs_listener(_duration)  # JAX has no public unregister
if J.stage_start_events() is not None:
    J.stage_start_events()(_start)


class _listening:
    def __init__(self, fn, kind=_on_duration):
        self.fn, self.kind = fn, kind

    def __enter__(self):
        self.kind.append(self.fn)

    def __exit__(self, *exc):
        self.kind.remove(self.fn)


def _stack(frame):
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


def _frames_during_compile(call, code):
    """The frames of ``code`` on the stack when a compile of ``call()`` reports its backend compile."""
    seen = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            seen.extend(
                f
                for f in _stack(sys._getframe(1))
                if f.f_code is code or isinstance(code, frozenset) and f.f_code in code
            )

    with _listening(listener):
        call()
    return seen


def test_every_capability_has_a_probe_and_a_test():
    tests = {name[5:] for name in globals() if name.startswith("test_")}
    assert set(J.CAPABILITIES) <= tests
    assert all(callable(J._PROBES[name]) for name in J.CAPABILITIES)


def test_stage_start_events():
    register = J.stage_start_events()
    assert register is not None
    starts = []

    def on_start(event, value, **kwargs):
        starts.append(event)

    with _listening(on_start, _on_start):
        jax.jit(lambda x: x * 3 + 1)(jnp.ones(7))
    assert "/jax/core/compile/jaxpr_trace_duration" in starts


def test_jit_call_frame():
    code = J.jit_call_frame()
    assert code is not None

    def f(x, n):
        return x * n

    x = jnp.ones(5)
    frames = _frames_during_compile(lambda: jax.jit(f, static_argnums=1)(x, 2), code)
    assert len(frames) == 1
    fun, args, kwargs, info = J.jit_call(frames[0])
    assert fun is f and args[1] == 2 and kwargs == {}
    assert J.jit_static(info) == ((1,), ("n",))  # jit infers the name of a static position


def test_aot_entry_points():
    codes = J.aot_entry_points()
    assert codes is not None and len(codes) == 5
    seen = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            seen.extend(f.f_code.co_name for f in _stack(sys._getframe(1)) if f.f_code in codes)

    lowered = jax.jit(lambda x: x - 1).lower(jnp.ones(3))
    with _listening(listener):
        lowered.compile()
    assert seen == ["compile"]  # Lowered.compile is on the stack of its own compile


def test_compiled_executable():
    assert J.compiled_executable() is not None
    found = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            found.append(J.executable_in(_stack(sys._getframe(1))))

    with _listening(listener):
        jax.jit(lambda x: jnp.sin(x) * 11)(jnp.ones(9))
    assert found and found[-1] is not None
    assert found[-1].cost_analysis() is not None


def test_stage_exceptions():
    code = J.stage_exceptions()
    assert code is not None
    raised = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            raised.append(J.stage_raised(_stack(sys._getframe(1))))

    def bad(x):
        raise ValueError("planted")

    with _listening(listener):
        jax.jit(lambda x: x + 5)(jnp.ones(2))
        with pytest.raises(ValueError, match="planted"):
            jax.jit(bad)(jnp.ones(2))
    assert raised[0] is False and raised[-1] is True


def test_traceback_exclusion(tmp_path):
    script = tmp_path / "hidden.py"
    script.write_text("def call(f, x):\n    return f(x)\n")
    code = textwrap.dedent(f"""
        import sys, traceback
        sys.path.insert(0, {str(tmp_path)!r})
        import jax, hidden
        from jaxdiag import jax_internals
        assert jax_internals.hide_frames(hidden.__file__)
        def bad(x):
            raise ValueError("planted")
        try:
            jax.jit(lambda x: hidden.call(bad, x))(1.0)
        except ValueError as e:
            print("".join(traceback.format_exception(e)))
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "planted" in out and "hidden.py" not in out


def test_pmap_call_frame():
    code = J.pmap_call_frame()
    assert code is not None

    def f(x, k):
        return x * k

    x = jnp.ones((1, 3))
    calls = [
        J.pmap_call(frame)
        for frame in _frames_during_compile(lambda: jax.pmap(f, static_broadcasted_argnums=1)(x, 4), code)
    ]
    assert calls and calls[0] is not None
    fun, args, kwargs, static = calls[0]
    assert fun is f and args[1] == 4 and static == (1,)


def test_jit_info_fields():
    assert J.jit_info_fields() is not None
    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    x = jnp.ones(len(jax.devices()) * 2)
    frames = _frames_during_compile(lambda: jax.jit(lambda x: x * 7, out_shardings=sharding)(x), J.jit_call_frame())
    info = J.jit_info_of(frames[0])
    ins, outs = J.jit_shardings(info)
    assert [type(s).__name__ for s in outs] == ["NamedSharding"]
    assert all(type(s).__name__ == "UnspecifiedValue" for s in ins)


def test_output_shardings():
    assert J.output_shardings() is not None
    n = len(jax.devices())
    mesh = jax.make_mesh((n,), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    compiled = jax.jit(lambda x: x + 2, out_shardings=sharding).lower(jnp.ones(n * 2)).compile()
    texts = J.read_output_shardings(compiled.runtime_executable())
    assert texts is not None and len(texts) == 1
    assert texts[0] == "{replicated}" if n == 1 else texts[0].startswith("{devices=")
    # The parameters' too: from JAX 0.12 the optimized HLO text no longer carries them.
    x = jax.device_put(jnp.ones(n * 2), sharding)
    params = J.read_parameter_shardings(jax.jit(lambda x: x + 2).lower(x).compile().runtime_executable())
    assert params is not None and len(params) == 1
    assert params[0] == "{replicated}" if n == 1 else params[0].startswith("{devices=")


def test_xspace_reader(tmp_path):
    assert J.xspace_reader() is not None
    jax.profiler.start_trace(str(tmp_path))
    try:
        jax.jit(lambda x: x * 13)(jnp.ones(4)).block_until_ready()
    finally:
        jax.profiler.stop_trace()
    (path,) = tmp_path.glob("plugins/profile/*/*.xplane.pb")
    planes = J.parse_xspace(path.read_bytes(), str(path))
    assert any(p.name == "/host:CPU" for p in planes)
    # Corrupt data is an exception, not a process aborted by the C++ parser: ask a child.
    code = (
        "from jaxdiag import jax_internals as J; from jaxdiag.errors import TraceFormatError\n"
        "try: J.parse_xspace(b'\\x0a\\x05\\x12\\x03abc\\xff\\xff', 'bad.xplane.pb')\n"
        "except TraceFormatError as e: print(e)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("bad.xplane.pb: corrupt XSpace")


def test_xspace_reader_raises():
    # The probe says what a fresh process sees: an exception, or an abort (older jaxlib).
    code = f"from jaxlib import _profile_data as p\ntry: p.ProfileData.from_serialized_xspace({J.profiler._CORRUPT_XSPACE!r})\nexcept RuntimeError: pass"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode in (0, -6), done.stderr[-2000:]  # -6: SIGABRT
    assert J.xspace_reader_raises() is (True if done.returncode == 0 else None)


def test_profile_options():
    options = J.profile_options()
    assert options is not None
    opts = options()
    for field in ("python_tracer_level", "host_tracer_level"):
        assert hasattr(opts, field), field


def test_equinox_jit_frame():
    eqx = pytest.importorskip("equinox")
    code = J.equinox_jit_frame()
    assert code is not None

    def f(x, scale):
        return x * scale

    x = jnp.ones(3)
    frames = _frames_during_compile(lambda: eqx.filter_jit(f)(x, 2.0), code)
    assert frames
    fun, args, kwargs = J.equinox_call(frames[0].f_locals)
    assert fun is f and args[1] == 2.0


def test_flax_nnx_jit_frame():
    nnx = pytest.importorskip("flax.nnx")
    code = J.flax_nnx_jit_frame()
    assert code is not None

    def f(x):
        return x * 5

    x = jnp.ones(3)
    frames = _frames_during_compile(lambda: nnx.jit(f)(x), code)
    calls = [J.flax_nnx_call(frame.f_locals) for frame in frames]
    assert any(c is not None and c[0] is f for c in calls)


def test_flax_nnx_static_fields():
    nnx = pytest.importorskip("flax.nnx")
    assert J.flax_nnx_static_fields() == "_pytree__nodes"

    class Block(nnx.Module):
        def __init__(self):
            self.act = "relu"
            self.w = nnx.Param(jnp.ones(2))

    flags = J.nnx_node_flags(vars(Block()))
    assert flags is not None and flags["act"] is False and flags["w"] is True


def test_distributed_state():
    # A process that never called jax.distributed.initialize has the holder, and no client in it.
    assert J.distributed_state() is not None
    assert J.distributed_client() is None  # tests/recording/test_host_check.py reaches a real one


def test_transformed_compiles():
    from jaxdiag.jax_internals import transforms

    code = J.transformed_compiles()
    assert code is not None and code is transforms.impl_cache_miss_code()

    def loss(w, x):
        return jnp.sum(jnp.sin(w * x))

    f = jax.jit(loss)
    w, x = jnp.ones(3), jnp.ones(3)
    frames = _frames_during_compile(lambda: jax.grad(f)(w, x), code)
    frames += _frames_during_compile(lambda: jax.vmap(f, in_axes=(None, 0))(w, jnp.ones((2, 3))), code)
    calls = [transforms.impl_call(frame) for frame in frames]
    # JAX 0.11 merged ClosedJaxpr into Jaxpr: the source is read from either.
    assert [c[1:] for c in calls] == [
        (f._jit_info.fun_sourceinfo, t) for t in ("grad-forward", "grad-backward", "vmap")
    ]
    assert transforms.batch_dims(frames[-1]) == (None, 0)


def test_config_states():
    from jax._src import config

    names = J.config_states()
    if names is None:  # JAX 0.8 keeps no names for the states in jit's cache key
        assert not hasattr(config, "trace_context_names") and tuple(jax.__version_info__) < (0, 9)
        return
    assert {"jax_enable_x64", "jax_default_matmul_precision"} <= set(names)
    if hasattr(config, "remat3"):  # JAX 0.11 on: its new remat and custom_vjp are states that recompile
        assert {"jax_remat3", "jax_custom_vjp3"} <= set(names)


def test_jit_trace_cache():
    from jaxdiag.jax_internals import transforms

    assert J.jit_trace_cache() is not None

    def f(x, n):
        return x * n

    j = jax.jit(f, static_argnums=1)
    j(jnp.ones(2), 3)
    j(jnp.ones(5), 3)
    assert transforms.earlier_traces(f) == 2
    calls = transforms.cached_calls(f, j._jit_info)
    assert sorted((a[0].shape, a[1]) for a, _ in calls) == [((2,), 3), ((5,), 3)]  # JAX 0.8 lists newest first


def test_missing_capability_is_said_once_with_what_is_lost(monkeypatch):
    monkeypatch.setattr(errors, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        J.warn_lost("jit_call_frame")
        J.warn_lost("jit_call_frame")
    assert len(caught) == 1 and caught[0].category is JaxdiagWarning
    assert str(caught[0].message).startswith("jaxdiag: compile causes unavailable on this JAX")
    assert jax.__version__ in str(caught[0].message)


def test_this_jax_has_every_capability():
    # Older jaxlib aborts on a corrupt XSpace; parse_xspace then asks a forked child first.
    libraries = {"equinox_jit_frame": "equinox", "flax_nnx_jit_frame": "flax", "flax_nnx_static_fields": "flax"}
    absent = {cap for cap, lib in libraries.items() if importlib.util.find_spec(lib) is None}
    # JAX 0.8 names no config states of jit's cache key (test_config_states checks it lacks them).
    older = {"config_states"} if tuple(jax.__version_info__) < (0, 9) else set()
    assert set(J.missing()) - absent <= {"xspace_reader_raises"} | older
    assert J.available("jit_call_frame") and J.available("xspace_reader")
