"""Programs of one op: every execution of the program ran a single compute op.

JAX runs a ``jnp`` operation called outside any jit as a program of its own
(``jit_multiply``, ``jit_add``), as it does a jitted function of one op. Called
many times a step, each call is a launch from Python that XLA cannot fuse with its
neighbours, so the advice is to move the calling code into the jitted step, not to
make the op bigger. Whether a program is one is read from its executions (the ops
that share a ``run_id``, ``trace.executions``): where the trace does not tell
executions apart, no program is called one.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from jaxdiag.analyses.compile_spans import function_name
from jaxdiag.analyses.device_work import device_ops, hosts_of, is_compute, places
from jaxdiag.analyses.shared import once
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.frames import TraceFrames

#: A program is called one of one op when it ran at least this many times: a single run says little.
MIN_RUNS = 2

SUGGESTION = (
    "Move the code that calls them into the jitted step: JAX runs a `jnp` operation called outside any jit as "
    "a program of its own, one launch per op, which XLA cannot fuse with anything. Where to look: an "
    "optimizer update (`optimizer.update`, `apply_updates`) after a jitted loss-and-gradient, metric "
    "arithmetic, or a data loader that indexes `jnp` arrays."
)


def one_op_programs(frames: "TraceFrames", host: str | None = None) -> dict[str, int]:
    """Per module whose every execution on ``host`` (every host: ``None``) ran one compute op: its executions."""
    out: dict[str, int] = {}
    for h in hosts_of(frames, host):
        for module, runs in once(frames, ("one_op_programs", h), functools.partial(_of_host, frames, h)).items():
            out[module] = out.get(module, 0) + runs
    return out


def call_sites(compile_log: Sequence[Mapping[str, Any]], modules: Sequence[str]) -> list[str]:
    """The user's lines that first ran ``modules``, from the compile records (``[]`` without them)."""
    names = {function_name(m) for m in modules}
    sites = [str(r["call_site"]) for r in compile_log if r.get("function") in names and r.get("call_site")]
    return list(dict.fromkeys(sites))


def advice(modules: Sequence[str], compile_log: Sequence[Mapping[str, Any]]) -> str:
    """The suggestion for one-op programs, with the lines that ran them when the compile log says."""
    sites = call_sites(compile_log, modules)
    if sites:
        more = f" and {len(sites) - 4} more" if len(sites) > 4 else ""
        return SUGGESTION + f" The compile log says where they were first run: {', '.join(sites[:4])}{more}."
    return (
        SUGGESTION + " With `jaxdiag.watch(True)` or `jaxdiag run`, `jaxdiag compiles` names the lines that run them."
    )


def _of_host(frames: "TraceFrames", host: str) -> dict[str, int]:
    ops = device_ops(frames, host)
    ops = ops.loc[is_compute(frames, ops)]
    if ops.empty:
        return {}
    out = {}
    run_id = ops[F.RUN_ID].to_numpy(np.int64)
    device = places(ops)
    for module, rows in ops.groupby(F.HLO_MODULE, observed=True, sort=False).indices.items():
        runs = run_id[rows]
        if not str(module) or len(runs) < MIN_RUNS or (runs < 0).any():
            continue
        if _one_each(device[rows], runs):  # one op per execution on each device it ran on
            out[str(module)] = len(np.unique(runs))
    return out


def _one_each(device: np.ndarray, runs: np.ndarray) -> bool:
    """Whether no two rows share both device and run."""
    order = np.lexsort((runs, device))
    device, runs = device[order], runs[order]
    return not ((device[1:] == device[:-1]) & (runs[1:] == runs[:-1])).any()
