"""Every private JAX read, behind one door: one probe per capability.

jaxdiag reads a few things JAX does not publish: the frame of jit's Python
fallback (which holds a call's arguments), the frame that holds the compiled
executable, pmap's dispatch frame, the profiler's XSpace reader, and the jit
frames of equinox and flax. Each is a *capability* here, with a probe that
looks for what it reads (a code object, a field, a module) without running a
program, and with one line saying what is lost without it. Callers ask
``available(name)`` and, when it is missing, ``warn_lost(name)`` says so once
("compile causes unavailable on this JAX; ...") instead of recording nothing.

Probes decide by what is there, never by version numbers. ``tests/test_jax_internals.py``
has a test per probe that runs the capability on a real program, so a JAX
upgrade that moves something shows as one failing test with the capability's name.

Nothing here imports jax at import time: ``trace`` reads files without jax.

The probes and reads live in modules by what they read: ``capabilities`` (the list, and
the one warning of a missing one), ``calls`` (jit's and pmap's call frames, AOT entry
points, compile stages), ``executable`` (the compiled executable, its shardings and
program id), ``profiler`` (profiler options and the XSpace reader), ``libraries``
(equinox's and flax's jit frames), ``distributed`` (``jax.distributed``'s client) and
``transforms`` (transformed compiles, jit options, config states). Callers import
every name from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxdiag.jax_internals.calls import (
    aot_entry_points,
    config_states,
    hide_frames,
    jit_call,
    jit_call_frame,
    jit_info_fields,
    jit_info_of,
    jit_shardings,
    jit_static,
    jit_trace_cache,
    pmap_call,
    pmap_call_frame,
    stage_exceptions,
    stage_raised,
    stage_start_events,
    traceback_exclusion,
    transformed_compiles,
)
from jaxdiag.jax_internals.capabilities import (
    CAPABILITIES,
    Capability,
    warn_lost,
)
from jaxdiag.jax_internals.distributed import (
    distributed_client,
    distributed_state,
)
from jaxdiag.jax_internals.executable import (
    compiled_executable,
    executable_in,
    output_shardings,
    program_id,
    read_output_shardings,
    read_parameter_shardings,
)
from jaxdiag.jax_internals.libraries import (
    equinox_call,
    equinox_jit_frame,
    flax_nnx_call,
    flax_nnx_jit_frame,
    flax_nnx_static_fields,
    nnx_node_flags,
)
from jaxdiag.jax_internals.profiler import (
    parse_xspace,
    profile_options,
    xspace_reader,
    xspace_reader_raises,
)

__all__ = [
    "CAPABILITIES",
    "Capability",
    "aot_entry_points",
    "available",
    "compiled_executable",
    "config_states",
    "distributed_client",
    "distributed_state",
    "equinox_call",
    "equinox_jit_frame",
    "executable_in",
    "flax_nnx_call",
    "flax_nnx_jit_frame",
    "flax_nnx_static_fields",
    "hide_frames",
    "jit_call",
    "jit_call_frame",
    "jit_info_fields",
    "jit_info_of",
    "jit_shardings",
    "jit_static",
    "jit_trace_cache",
    "missing",
    "nnx_node_flags",
    "output_shardings",
    "parse_xspace",
    "pmap_call",
    "pmap_call_frame",
    "profile_options",
    "program_id",
    "read_output_shardings",
    "read_parameter_shardings",
    "stage_exceptions",
    "stage_raised",
    "stage_start_events",
    "traceback_exclusion",
    "transformed_compiles",
    "warn_lost",
    "xspace_reader",
    "xspace_reader_raises",
]


def available(name: str) -> bool:
    """Whether capability ``name`` works on the JAX (and libraries) of this process."""
    return _PROBES[name]() is not None


def missing() -> list[str]:
    """The names of the capabilities this process lacks (libraries not installed count as missing)."""
    return [name for name in CAPABILITIES if not available(name)]


_PROBES: dict[str, Callable[[], Any]] = {name: globals()[name] for name in CAPABILITIES}
