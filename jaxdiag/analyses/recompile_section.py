"""The report's ``recompiles`` section as a type: one row per compile seen on the timeline.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described


@dataclasses.dataclass(frozen=True)
class RecompileRow:
    """One object per compile seen on the timeline."""

    function: str
    step: int | None = described("the step it stalled, or `null` outside steps", None)
    compile_ms: float = 0.0
    device_wait_ms: float = described(
        "the part of `compile_ms` the device waited for: idle with nothing in flight or queued; 0 for a compile "
        "that ran while the device worked through executions the host had queued ahead",
        0.0,
    )
    recompile: bool | None = described(
        "true when the function had compiled before: a recompile, not a first compile (`null`: a report before 1.1)",
        None,
        since="1.1",
    )
    cause: str | None = described(
        'from the compile log when one is found: what changed, `"first compile"` for a function\'s first, '
        '`"first compile seen: ..."` for a recompile whose earlier compile came before recording began; else `null`',
        None,
    )
    logged: bool = described("true: a compile-log record was joined", False, only_with="logged")
    origin: str | None = described(
        "`jit`, `watch`, or `jax-internal` for JAX's own helpers that eager code compiled", None, only_with="logged"
    )
    call_site: str | None = described("`file:line` of the user's call", None, only_with="logged")
