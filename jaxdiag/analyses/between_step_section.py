"""The report's ``between_steps`` section as a type: what renderers and checks read, and what its JSON is made from.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described


def where(after_step: int, before_step: int) -> str:
    """``between steps 468 and 469``, ``before step 0`` or ``after step 469`` (``-1``: no step there)."""
    if after_step < 0:
        return f"before step {before_step}"
    if before_step < 0:
        return f"after step {after_step}"
    return f"between steps {after_step} and {before_step}"


@dataclasses.dataclass(frozen=True)
class ProgramRuns:
    function: str
    executions: int = 0


@dataclasses.dataclass(frozen=True)
class BetweenStepsRow:
    """One stretch of work between two steps, on one host."""

    host: str
    after_step: int = described("`-1`: before the first step", -1)
    before_step: int = described("`-1`: after the last step", -1)
    start_ns: int = 0
    end_ns: int = 0
    ms: float = 0.0
    device_busy_ms: float = 0.0
    programs: tuple[ProgramRuns, ...] = described("most run first", ())
    compile_ms: float = described(
        "host time compiling inside the stretch (the compile spans of `recompiles`: tracing, lowering and the"
        " backend compile), part of `ms`",
        0.0,
        since="1.6",
    )

    def where(self) -> str:
        """``between steps 468 and 469``, ``before step 0`` or ``after step 469``."""
        return where(self.after_step, self.before_step)


@dataclasses.dataclass(frozen=True)
class BetweenStepsSection:
    """The report's ``between_steps`` section (1.4).

    Work between steps: executions of programs run in fewer than half of the steps (an evaluation,
    a checkpoint, a reshard), cut out of the step they preceded. Rows never hold the step's own
    program; where dispatches pair with executions (XLA:CPU, TPU), an execution is in the row
    between the steps whose dispatches surround its own. Left out of every step figure and of
    steady throughput; finding ``between_steps`` (rows after step 0 only; its evidence's
    ``before_step_0_ms`` is what it leaves out).
    """

    total_ms: float = 0.0
    rows: tuple[BetweenStepsRow, ...] = ()
