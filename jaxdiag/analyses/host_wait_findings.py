"""The host-wait findings: one per cause of device-idle time that matters, with what to change.

Split from ``host_waits`` (which finds the waits and attributes each to what the host
was doing) to keep each module small; see that module's docstring for the causes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jaxdiag.analyses.base import AnalysisInputs, Finding, severity_for
from jaxdiag.analyses.collectives import platform_of
from jaxdiag.analyses.compile_spans import function_name
from jaxdiag.analyses.host_waits import COMPILE, DISPATCH, SYNC, UNATTRIBUTED
from jaxdiag.analyses.one_op_programs import advice, one_op_programs
from jaxdiag.analyses.step_pattern import describe_amounts, describe_steps
from jaxdiag.analyses.booking import step_program
from jaxdiag.analyses.synchronous_launches import SynchronousLaunches, synchronous_launches

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.host_waits import HostWaitsResult

_SUGGESTIONS = {
    "annotation": (
        "Overlap `{name}` with device work: prefetch the next batch in a background thread "
        "(or a data loader with prefetch) and move it to the device ahead of use with "
        "`jax.device_put`, so step N+1's input is ready while step N runs."
    ),
    SYNC: (
        "Avoid reading device values every step (`float(loss)`, `.item()`, `np.asarray`, "
        "`jax.device_get`): keep metrics on the device and fetch them every N steps, or log "
        "them asynchronously with `jax.debug.callback`. Each read drains the device queue, so "
        "whatever the host does next runs with the device idle."
    ),
    DISPATCH: (
        "The host takes longer to launch work than the device takes to run it: put more work "
        "in each jitted call (one jit around the whole step, `lax.scan` over micro-steps), and "
        "avoid many small jitted calls or eager jnp ops between steps."
    ),
    "callback_launch": (
        "Take the callback out of the training step: return the values it prints or logs and handle them "
        "outside the step, every N steps. A program that calls back into Python (`jax.debug.print`, "
        "`jax.debug.callback`, `io_callback`, `pure_callback`) is launched here only once it has run, so the "
        "host cannot queue the next step while the device runs this one; putting more work in each call "
        "would not change that."
    ),
    "synchronous_launch": (
        "Each launch returned only once its program had run, so every launch's overhead adds to the step: "
        "put more work in each jitted call (one jit around the whole step, `lax.scan` over micro-steps), so "
        "the same work takes fewer launches."
    ),
    "one_off_dispatch": (
        "Most of it is one step's launching ({share}), a one-off (moving or resharding data once, say), not a "
        "per-step cost: putting more work in each jitted call would not help. A guess, if it recurs (each "
        "epoch): do it before the timed loop, or in one jitted call rather than op by op."
    ),
    "dispatch_after_reads": (
        "Launching kept up with the device at the steps without a read: this idle time follows the reads (each "
        "empties the device's queue, so the next launch runs with nothing queued), not launch overhead, and "
        "putting more work in each jitted call would not help. It is part of what the reads cost (see the read "
        "finding)."
    ),
    "dispatch_after_host_work": (
        "Launching the step kept up with the device at the other steps: at these, the host's other work (the "
        "other findings) had already left the device's queue empty, so the launch ran with nothing queued. It "
        "is part of what that work costs, not launch overhead: putting more work in each jitted call would not "
        "help."
    ),
    "sparse_sync": (
        "Reads come only at some steps, not every step, so reading less often is not the change to make. "
        "If this time matters, a guess: start each copy as soon as the value exists (`x.copy_to_host_async()`) "
        "and read it after launching the next step, so the device has work queued while the host waits."
    ),
    UNATTRIBUTED: (
        "Find what the host is doing: wrap suspect code in `jax.profiler.TraceAnnotation(...)` "
        "and capture again, or capture with the Python tracer on (`jaxdiag.capture(..., python_tracer=True)`, "
        "or `python_tracer_level=1` in `jax.profiler.ProfileOptions`) and look at this span."
    ),
    "unattributed_traced": (
        "Find what the host is doing: this capture holds the Python tracer's call stacks, so look at this "
        "span's (`jaxdiag open` at this finding, or `jaxdiag.load(..., include_python=True)`), or wrap "
        "suspect code in `jax.profiler.TraceAnnotation(...)` and capture again."
    ),
}


#: A dispatch wait is one step's one-off when that step holds at least this share of it.
ONE_OFF_SHARE = 0.8
#: Dispatch gets the one-op programs' advice when they launched at least this share of it.
ONE_OP_SHARE = 0.5


def findings(r: HostWaitsResult, inputs: AnalysisInputs, all_steps: list[int]) -> tuple[Finding, ...]:
    out = []
    graded_against = r.steady_wall_ms if r.steady_wall_ms > 0 else r.wall_ms
    per_step: dict[tuple[str, str], dict[int, float]] = {}
    for (cause, kind, step), ms in r.waits.totals("cause", "kind", "step").items():
        per_step.setdefault((cause, kind), {})[step] = ms
    compiled = set(r.waits.step[r.waits.kind == COMPILE].tolist())
    by_fn = _dispatch_by_function(r)  # launching waits per launched function, for the launch finding
    for c in r.by_cause:
        amounts = per_step.get((c.cause, c.kind), {})
        ms, left_out = c.ms, []
        if c.kind == DISPATCH:  # launching on a step that compiled is the compile's tracing, not dispatch overhead
            left_out = sorted(s for s in amounts if s in compiled)
            amounts = {s: v for s, v in amounts.items() if s not in compiled}
            ms = sum(amounts.values())
        if c.kind == COMPILE or ms < inputs.thresholds.min_finding_ms:
            continue
        what = {
            "annotation": f"while the host ran `{c.cause}`",
            SYNC: "while the host read results back from the device (a device-to-host sync)",
            DISPATCH: "while the host was launching jitted work",
            UNATTRIBUTED: "while the host ran Python outside any annotation",
        }[c.kind]
        evidence: dict[str, Any] = {
            "cause": c.cause,
            "kind": c.kind,
            "steps": len(amounts) if left_out else c.steps,
            "ms": round(ms, 3),
            "per_step": {int(k): round(v, 3) for k, v in sorted(amounts.items())},
        }
        extra = ""
        if len(inputs.frames.hosts) > 1:  # which host: with several, a wait on one of them is a straggler's cause
            on = _by_host(r, c.cause)
            what += (
                " on " + ", ".join(f"{h} ({h_ms:.1f} ms)" for h, h_ms in on.items())
                if len(on) > 1
                else f" on {next(iter(on))}"
            )
            evidence["by_host"] = {h: round(h_ms, 3) for h, h_ms in on.items()}
        if c.kind == SYNC:
            # Each cause as its own finding counts it: launching on a step that compiled is the compile's.
            counted = {
                o.cause: o.ms
                if o.kind != DISPATCH
                else sum(v for s, v in per_step.get((o.cause, o.kind), {}).items() if s not in compiled)
                for o in r.by_cause
                if o.kind in ("annotation", DISPATCH, UNATTRIBUTED)
            }
            drained = sorted((cause for cause, ms in counted.items() if ms >= 0.1 * c.ms), key=lambda k: -counted[k])
            extra = f" Reads happened {describe_steps(r.sync_steps, all_steps)}"
            if drained:
                listed = ", ".join(f"{cause} {counted[cause]:.1f} ms" for cause in drained[:3])
                extra += (
                    f"; each drains the device queue, so the host work after it ({listed}) cannot overlap device work"
                )
            extra += "."
            evidence["sync_steps"] = list(r.sync_steps)
        suggestion = _SUGGESTIONS[c.kind].format(name=c.cause)
        if c.kind == UNATTRIBUTED and inputs.frames.meta.get("python_frames"):
            suggestion = _SUGGESTIONS["unattributed_traced"]  # the call stacks are there: no new capture needed
        if c.kind == SYNC and all_steps and len(r.sync_steps) < 0.5 * len(all_steps):
            suggestion = _SUGGESTIONS["sparse_sync"]  # a read per epoch or per 100 steps is not the habit to drop
        elif c.kind == SYNC and platform_of(inputs.frames) == "cpu":
            suggestion += (
                " On XLA:CPU the device's work runs on the host's own cores, so how much overlap this buys is a "
                "guess: measure it."
            )
        if left_out:
            extra += (
                f" Not counted: step(s) {', '.join(map(str, left_out))}, which compiled (launching there is "
                "tracing, part of the compile)."
            )
            evidence["left_out_compile_steps"] = left_out
        if c.kind == DISPATCH and len(all_steps) >= 3 and amounts:
            top_step, top_ms = max(amounts.items(), key=lambda kv: kv[1])
            if top_ms >= ONE_OFF_SHARE * ms:  # one step's launching: no per-step habit to change
                suggestion = _SUGGESTIONS["one_off_dispatch"].format(
                    share=f"{top_ms:.1f} of {ms:.1f} ms at step {top_step}"
                )
                evidence["one_off_step"] = int(top_step)
        # Launch waits only where something else had emptied the device's queue: not launch overhead.
        queue_emptied = False
        if (
            c.kind == DISPATCH
            and "one_off_step" not in evidence
            and _only_after(sorted(amounts), set(r.sync_steps), all_steps)
        ):
            queue_emptied = True
            extra += (
                f" Each of these steps came at or right after a read ({describe_steps(r.sync_steps, all_steps)}); "
                "at the other steps the host launched ahead of the device."
            )
            suggestion = _SUGGESTIONS["dispatch_after_reads"]
            evidence["after_reads"] = True
        elif c.kind == DISPATCH and "one_off_step" not in evidence:
            before = _after_other_waits(sorted(amounts), per_step, all_steps, inputs, by_fn)
            if before:
                extra += (
                    " Each of these steps had the devices already idle for the host's other work ("
                    + ", ".join(f"{cause} {ms_:.1f} ms" for cause, ms_ in before.items())
                    + "); at the other steps the host launched the step ahead of the device."
                )
                suggestion = _SUGGESTIONS["dispatch_after_host_work"]
                evidence["after_host_work"] = True
                queue_emptied = True
        if c.kind == DISPATCH:
            evidence["by_function"] = by_fn
            top = [f for f in by_fn if f]
            if top:
                what += f" (mostly {', '.join(top[:3])})"
            one_op = {function_name(m): m for m in one_op_programs(inputs.frames, inputs.host)}
            named = sorted((f for f in by_fn if f in one_op), key=lambda f: -by_fn[f])
            share = sum(by_fn[f] for f in named) / max(sum(by_fn.values()), 1e-9)
            launches = _synchronous_step_launches(inputs, top)
            if launches is not None and "one_off_step" not in evidence and not queue_emptied:
                extra += (
                    f" {launches.synchronous} of {launches.paired} launches of `{top[0]}` returned only once it had"
                    " run, so the host never ran ahead of the device: each launch's overhead left it idle"
                    + (
                        f"; the program calls back into Python ({', '.join(f'`{n}`' for n in launches.callbacks)})."
                        if launches.callbacks
                        else "."
                    )
                )
                evidence["synchronous_launches"] = [launches.synchronous, launches.paired]
                suggestion = _SUGGESTIONS["callback_launch" if launches.callbacks else "synchronous_launch"]
                if launches.callbacks:
                    evidence["host_callbacks"] = list(launches.callbacks)
            if share >= ONE_OP_SHARE and "one_off_step" not in evidence and not queue_emptied:
                extra += (
                    f" {share * 100:.0f}% of it launched programs of one op each "
                    f"({', '.join(named[:5])}{', ...' if len(named) > 5 else ''})."
                )
                suggestion = advice([one_op[f] for f in named], inputs.compile_log)
                evidence["one_op_share"] = round(share, 3)
        out.append(
            Finding(
                kind="host_wait",
                severity=severity_for(ms, graded_against, inputs.thresholds),
                time_lost_ms=ms,
                message=(
                    f"Devices sat idle {ms:.1f} ms {what}: {describe_amounts(amounts, all_steps)} "
                    f"({ms / graded_against * 100 if graded_against > 0 else 0:.0f}% of step time outside compiles)."
                    + extra
                ),
                suggestion=suggestion,
                evidence=evidence,
            )
        )
    return tuple(out)


def _only_after(steps: list[int], marked: set[int], all_steps: list[int]) -> bool:
    """Whether launch waits came only where something had just emptied the device's queue: each (but at the
    run's first step) at a ``marked`` step (a read, other host work) or the one after it, at fewer than half
    the steps (launching that cannot keep up waits at every step)."""
    if not all_steps or len(steps) >= 0.5 * len(all_steps):
        return False
    first = min(all_steps)
    later = [s for s in steps if s != first]  # the run's first launch never has work queued
    return bool(later) and all(s in marked or s - 1 in marked for s in later)


def _after_other_waits(
    steps: list[int],
    per_step: dict[tuple[str, str], dict[int, float]],
    all_steps: list[int],
    inputs: AnalysisInputs,
    by_function: dict[str, float],
) -> dict[str, float]:
    """The other waits (cause -> ms at these steps) that had emptied the device's queue where the step program's
    launch waited, when it waited at fewer than half the steps, each one with such a wait or just after one:
    launching the step kept up elsewhere. Empty when that is not so."""
    program = function_name(step_program(inputs.frames))
    top = next(iter(by_function), None)
    if not program or top != program or by_function[top] < 0.5 * sum(by_function.values()):
        return {}
    others = {key: amounts for key, amounts in per_step.items() if key[1] in ("annotation", UNATTRIBUTED, SYNC)}
    if not _only_after(steps, {s for amounts in others.values() for s in amounts}, all_steps):
        return {}
    wanted = set(steps) | {s - 1 for s in steps}
    there = {cause: sum(v for s, v in amounts.items() if s in wanted) for (cause, _), amounts in others.items()}
    largest = max(there.values(), default=0.0)
    named = sorted((c for c, ms in there.items() if ms >= 0.1 * largest), key=lambda c: -there[c])
    return {cause: round(there[cause], 3) for cause in named[:3]} if largest > 0 else {}


def _synchronous_step_launches(inputs: AnalysisInputs, top: list[str]) -> SynchronousLaunches | None:
    """The step program's launches, where the launching waited mostly on them and they returned only once
    the program had run (on the only host analysed, or the first: hosts launch alike)."""
    program = step_program(inputs.frames)
    if not top or not program or top[0] != function_name(program):
        return None
    host = inputs.host or (inputs.frames.hosts[0] if inputs.frames.hosts else None)
    return None if host is None else synchronous_launches(inputs.frames, host)


def _by_host(r: HostWaitsResult, cause: str) -> dict[str, float]:
    """Wait given to ``cause`` per host, largest first."""
    acc = {host: ms for (host,), ms in r.waits.totals("host", where=r.waits.cause == cause).items()}
    return dict(sorted(acc.items(), key=lambda kv: -kv[1]))


def _dispatch_by_function(r: HostWaitsResult) -> dict[str, float]:
    """Dispatch wait per launched function, largest first."""
    acc = {detail: ms for (detail,), ms in r.waits.totals("detail", where=r.waits.kind == DISPATCH).items()}
    return {k: round(v, 3) for k, v in sorted(acc.items(), key=lambda kv: -kv[1])}
