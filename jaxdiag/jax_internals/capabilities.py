"""The capabilities: what jaxdiag reads from JAX's internals, and what is lost without each.

One ``Capability`` per private read, named as its probe is (in the sibling modules)
and as its test is (``tests/test_jax_internals.py``); ``warn_lost`` says once what a
missing one costs.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.errors import warn_once


@dataclasses.dataclass(frozen=True, slots=True)
class Capability:
    """One thing jaxdiag reads from JAX's internals.

    Attributes:
      name: the capability's name (the probe test is ``test_<name>``).
      reads: what is read, for the maintainer who must find it again.
      lost: what jaxdiag cannot do on a JAX without it (said once, in a warning).
    """

    name: str
    reads: str
    lost: str


CAPABILITIES: dict[str, Capability] = {
    c.name: c
    for c in (
        Capability(
            "stage_start_events",
            "jax.monitoring.register_scalar_listener (stage start times)",
            "compile start times are estimated from their durations",
        ),
        Capability(
            "jit_call_frame",
            "jax._src.pjit._cpp_pjit's cache_miss frame (fun, jit_info, args, kwargs)",
            "compile causes unavailable on this JAX; compiles are matched by function name, "
            "jaxdiag.watch() records only names, counts and durations, and compiles without a "
            "trace (a sharding-only change) go unrecorded",
        ),
        Capability(
            "aot_entry_points",
            "jax._src.pjit.jit_trace/jit_lower/jit_eval_shape, stages.Traced.lower, stages.Lowered.compile",
            "a .lower()/.compile() may be taken for a call",
        ),
        Capability(
            "compiled_executable",
            "jax._src.interpreters.pxla._cached_compilation's xla_executable",
            "cost, memory and sharding facts unavailable on this JAX",
        ),
        Capability(
            "stage_exceptions",
            "jax._src.dispatch.LogElapsedTimeContextManager.__exit__'s exc_type",
            "a compile stage that raised is taken for a finished one",
        ),
        Capability(
            "traceback_exclusion",
            "jax._src.traceback_util/source_info_util.register_exclusion",
            "jaxdiag.jit's wrapper frame shows in filtered tracebacks and source locations",
        ),
        Capability(
            "pmap_call_frame",
            "jax._src.pmap's wrapped frame (infer_params closure, args, kwargs)",
            "pmap compiles are named after JAX's own wrapper and show its flat arguments",
        ),
        Capability(
            "jit_info_fields",
            "PjitInfo.static_argnums/static_argnames/in_shardings_leaves/out_shardings_leaves",
            "whether jit was given shardings is unknown",
        ),
        Capability(
            "output_shardings",
            "jaxlib.xla_client.HloSharding.from_proto (of an executable's get_output_shardings/get_parameter_shardings)",
            "compiled output shardings unknown, and input shardings too from JAX 0.12 (its optimized HLO leaves them out)",
        ),
        Capability(
            "xspace_reader",
            "jaxlib._profile_data.ProfileData.from_serialized_xspace",
            "cannot read .xplane.pb traces on this jaxlib (a .trace.json.gz still reads)",
        ),
        Capability(
            "xspace_reader_raises",
            "a corrupt XSpace given to ProfileData.from_serialized_xspace raises (older jaxlib aborts)",
            "each .xplane.pb is first parsed in a forked child, so that a corrupt one cannot abort the process",
        ),
        Capability(
            "profile_options",
            "jax.profiler.ProfileOptions",
            "the Python tracer and profiler options cannot be set; captures use the profiler's defaults",
        ),
        Capability(
            "equinox_jit_frame",
            "equinox._jit._call's locals (jit_wrapper, args, kwargs)",
            "eqx.filter_jit compiles are named after equinox's wrapper",
        ),
        Capability(
            "flax_nnx_jit_frame",
            "flax.nnx.transforms.compilation's __call__ locals (self.fun, args, kwargs)",
            "nnx.jit compiles are named after flax's wrapper",
        ),
        Capability(
            "distributed_state",
            "jax._src.distributed.global_state.client (the key-value store jax.distributed starts)",
            "the run-time host check (watch(check_hosts=...)) cannot reach the other processes",
        ),
        Capability(
            "transformed_compiles",
            "jax._src.pjit._pjit_call_impl's call_impl_cache_miss frame (args, jaxpr's debug_info) and the jit_p "
            "rules _pjit_linearize/_pjit_transpose_fancy/_pjit_batcher on its stack",
            "compiles made by jax.grad or jax.vmap of a jitted function are not tied to it or labelled with "
            "their transformation",
        ),
        Capability(
            "config_states",
            "jax._src.config.trace_context_names/trace_context (the config states in jit's cache key)",
            "a recompile caused by a jax config change (jax_enable_x64, matmul precision...) is not named",
        ),
        Capability(
            "jit_trace_cache",
            "jax._src.pjit._infer_params_cached.cache_keys() (the traces jit holds)",
            "a watch() entered late cannot say what changed since the traces made before it",
        ),
        Capability(
            "flax_nnx_static_fields",
            "a flax nnx module's _pytree__nodes",
            "static attributes of nnx modules are not named in recompile causes",
        ),
    )
}


def warn_lost(name: str) -> None:
    """Say once per process that capability ``name`` is missing and what that costs.

    Never raises, even under ``-W error``: a problem of jaxdiag's must not fail the call.
    """
    import jax

    cap = CAPABILITIES[name]
    warn_once(f"lost:{name}", f"jaxdiag: {cap.lost} (JAX {jax.__version__} lacks {cap.reads})", stacklevel=3)
