"""Launches of the step's program that return only once it has run, and the Python callbacks that cause it.

A host that launches a step and goes on while the device runs it can queue the next one: the
launch's overhead overlaps device work. Where each launch waits for its execution (it returns only
after the execution ended, ``Booked.dispatch_end`` against the execution's end, and the execution
fills at least half of it), the host never runs ahead, and every launch's overhead is device idle
time, which the host-wait findings report as launching. A launch that is long beside a short
execution is a slow launch, not a waiting one: the host takes longer to launch than the device to
run. A program that calls back into Python (``jax.debug.print``, ``jax.debug.callback``,
``io_callback``, ``pure_callback``: ops named ``debug_print.1``, ``io_callback.3`` ...) launches
that way on XLA:CPU, and is the cause to name: without its callback, the same step launches and
returns at once.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING


from jaxdiag.analyses.booking import booked, step_program
from jaxdiag.analyses.device_work import device_ops
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.frames import TraceFrames

#: Ops that call back into Python: JAX's callback primitives as XLA names them.
HOST_CALLBACK = re.compile(r"^(?:debug_print|debug_callback|io_callback|pure_callback|python_callback)(?:\.\d+)?$")
#: The launches wait for their runs when at least this share of the paired ones did.
SYNCHRONOUS_SHARE = 0.8


@dataclasses.dataclass(frozen=True, slots=True)
class SynchronousLaunches:
    """The step program's launches on one host that waited for their execution to end."""

    module: str
    synchronous: int  # launches that returned after their execution ended, which filled half of them or more
    paired: int  # launches paired with their execution
    callbacks: tuple[str, ...]  # the program's ops that call back into Python, by name


def synchronous_launches(frames: "TraceFrames", host: str) -> SynchronousLaunches | None:
    """The step program's launches on ``host``, where most returned only once the program had run; else ``None``."""
    module = step_program(frames)
    b = booked(frames, host)
    paired = b.dispatch >= 0
    if not module or not paired.any():
        return None
    run = b.ends[paired] - b.starts[paired]
    launch = b.dispatch_end[paired] - b.dispatch[paired]
    synchronous = int(((b.dispatch_end[paired] >= b.ends[paired]) & (2 * run >= launch)).sum())
    if synchronous < SYNCHRONOUS_SHARE * int(paired.sum()):
        return None
    ops = device_ops(frames, host)
    names = ops.loc[(ops[F.HLO_MODULE] == module).to_numpy(), F.NAME].astype(str).unique()
    callbacks = tuple(sorted(n for n in names if HOST_CALLBACK.match(n)))
    return SynchronousLaunches(module, synchronous, int(paired.sum()), callbacks)
