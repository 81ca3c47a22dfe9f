"""The small-op findings: one per module whose small ops cost enough, with the advice that fits it.

Split from ``small_ops`` (which counts the ops, books them to steps and finds their launch
gaps). Three kinds of module get three pieces of advice: small ops inside a loop body are rolled
up already (a guess at what else might help); a program of one op launched many times
(``one_op_programs``: an eager ``jnp`` operation) belongs inside the jitted step; any other
gets "make each op bigger".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxdiag.analyses import one_op_programs
from jaxdiag.analyses.base import AnalysisInputs, Finding, severity_for
from jaxdiag.analyses.step_pattern import describe_steps

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.small_ops import SmallOpsResult

SUGGESTION = (
    "Make each op bigger: batch repeated work into one op (`vmap` over the repeats, or a larger batch), "
    "and keep elementwise chains inside one jitted function so XLA can fuse them. Rolling an unrolled "
    "Python loop into `lax.scan` shortens its compile, but each iteration still runs its own small ops."
)
#: For small ops that already run in a loop body (``lax.scan``, ``fori_loop``, ``while_loop``): rolled up
#: already, and unrolling such a loop made a model 0.54x as fast.
LOOPED_SUGGESTION = (
    "These small ops already run in a loop (a `lax.scan`, `fori_loop` or `while_loop` body runs them once per "
    "iteration), so rolling them into a loop is done, and unrolling it grows the program rather than speeding "
    "it up. A guess, to measure: give each iteration more work, by batching independent iterations together "
    "(`vmap` over them, a larger batch) or by fewer, wider layers."
)


def findings(r: "SmallOpsResult", inputs: AnalysisInputs, steady_ms: float) -> tuple[Finding, ...]:
    """One finding per module whose small ops cost enough, costliest first."""
    out = []
    one_op = one_op_programs.one_op_programs(inputs.frames, inputs.host)
    for m in r.by_module[: inputs.thresholds.max_small_op_findings]:
        lost = m.time_ms + m.launch_gap_ms
        if lost < inputs.thresholds.min_finding_ms:
            continue
        names = [o.name for o in r.top if o.module == m.module][:3]
        all_steps = [s.step for s in r.per_step]
        where = describe_steps(m.step_numbers, all_steps)
        listed = f"at {len(m.step_numbers)} steps: "
        if where.startswith(listed):
            where = f"in {len(m.step_numbers)} of {len(r.per_step)} steps ({where[len(listed) :]})"
        elif not where.startswith("in every step") and len(m.step_numbers) > 1:
            where = f"in {len(m.step_numbers)} of {len(r.per_step)} steps, {where}"
        out.append(
            Finding(
                kind="small_ops",
                severity=severity_for(lost, steady_ms, inputs.thresholds),
                time_lost_ms=lost,
                message=(
                    f"{m.module or 'unnamed module'} ran {m.count} device ops under "
                    f"{r.threshold_us:g} us {where}"
                    + (f" (mostly {', '.join(names)})" if names else "")
                    + f": {m.time_ms:.2f} ms, {m.share * 100:.{0 if m.share >= 0.01 else 1}f}% of its compute time, plus "
                    f"{m.launch_gap_ms:.2f} ms of launch gaps between them. "
                    + (
                        f"Each of its {one_op[m.module]} runs in the capture was one op: a program launched on its "
                        "own (an eager `jnp` operation, or a jitted function of one op), which nothing can fuse "
                        f"until it runs inside a bigger jitted function; that would save up to {lost:.2f} ms"
                        if m.module in one_op
                        else f"Fusing them would save up to {lost:.2f} ms"
                    )
                    + " (an upper bound: a fused kernel still does the work)."
                ),
                suggestion=(
                    one_op_programs.advice([m.module], inputs.compile_log)
                    if m.module in one_op
                    else LOOPED_SUGGESTION
                    if m.looped >= 0.5 * m.count
                    else SUGGESTION
                ),
                evidence={
                    "one_op_program": m.module in one_op,
                    "module": m.module,
                    "in_loop_body": m.looped,
                    "count": m.count,
                    "steps": m.steps,
                    "step_numbers": list(m.step_numbers),
                    "time_ms": round(m.time_ms, 3),
                    "launch_gap_ms": round(m.launch_gap_ms, 3),
                    "share_of_module": round(m.share, 4),
                    "top_ops": names,
                },
            )
        )
    return tuple(out)
