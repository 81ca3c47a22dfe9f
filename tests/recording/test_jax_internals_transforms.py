"""Each private JAX read recording relies on finds its object on this JAX, and is used."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag.jax_internals import transforms as internals_reads
from jaxdiag.recording import compile_log, listener


def test_code_objects_are_found() -> None:
    assert internals_reads.impl_cache_miss_code() is not None
    assert internals_reads.aot_compile_code() is not None
    listener.install()
    assert listener._internals.impl_miss is internals_reads.impl_cache_miss_code()


@pytest.mark.skipif(
    internals_reads.config_state() is None, reason="JAX before 0.9 keeps no names for its trace-context states"
)
def test_config_state_names_the_cache_key_states() -> None:
    state = internals_reads.config_state()
    assert state is not None and "jax_enable_x64" in state and "jax_default_matmul_precision" in state
    with jax.default_matmul_precision("highest"):
        assert internals_reads.config_state()["jax_default_matmul_precision"] == "highest"


def test_earlier_traces_counts_a_functions_traces() -> None:
    def f(x):
        return x + 1

    assert internals_reads.earlier_traces(f) == 0
    j = jax.jit(f)
    j(jnp.ones(2))
    j(jnp.ones(3))
    assert internals_reads.earlier_traces(f) == 2


def test_jit_options_text_from_jit_info() -> None:
    f = jax.jit(lambda x, y: x, donate_argnums=0, static_argnums=1, keep_unused=True)
    text = internals_reads.jit_options(f._jit_info)
    assert text == "static_argnums=(1,), donate_argnums=(0,), keep_unused=True"
    assert internals_reads.jit_options(jax.jit(lambda x: x)._jit_info) == ""
    assert internals_reads.jit_options(None) is None
    # JAX 0.12 stores inline=False as jax.Inline.AUTO: a default all the same; inline=True is an option.
    assert internals_reads.jit_options(jax.jit(lambda x: x, inline=False)._jit_info) == ""
    inline = internals_reads.jit_options(jax.jit(lambda x: x, inline=True)._jit_info)
    assert inline in ("inline=True", "inline=Inline.JAX_LATE")


def test_vmap_of_jaxdiag_jit_records_the_batched_program() -> None:
    f = jaxdiag.jit(lambda w, x: jnp.sum(w * x))
    for batch in (32, 48):
        jax.vmap(f, in_axes=(None, 0))(jnp.ones(16), jnp.ones((batch, 16)))
    first, second = compile_log.records()
    assert (first.transform, second.transform) == ("vmap", "vmap")
    assert [(a.label, a.shape, a.batch_axis) for a in second.args] == [("w", (16,), None), ("x", (48, 16), 0)]
    assert second.explanation.summary.startswith(
        "<lambda> under jax.vmap: x shape axis 0 (the vmapped batch axis) changed 32 -> 48"
    )
