"""The recompile findings: what each group of compiles cost the steps, and what to change.

Split from ``recompiles`` (which finds the compiles and joins them to the compile log)
to keep each module small; see that module's docstring for what the findings say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from jaxdiag.analyses.base import AnalysisInputs, Finding, Severity, severity_for
from jaxdiag.analyses.booking import step_program
from jaxdiag.analyses.compile_spans import UNNAMED, function_name
from jaxdiag.config import Settings
from jaxdiag.recording.records import FIRST_SEEN, JAX_INTERNAL_ORIGIN
from jaxdiag.analyses.step_pattern import describe_steps, fmt_ms, join
from jaxdiag.analyses.recompile_advice import (
    EAGER,
    EAGER_ONCE,
    ONE_OFF,
    OTHER_CALLER,
    UNSEEN,
    remainder_advice,
    suggestion_for,
)
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.recompiles import Compile, RecompilesResult


def findings(r: "RecompilesResult", inputs: AnalysisInputs) -> tuple[Finding, ...]:
    """One finding per recompiling function, and one per user line whose eager code recompiled JAX helpers."""
    groups: dict[tuple[str, str], list[Compile]] = {}
    for c in r.compiles:
        if c.origin == JAX_INTERNAL_ORIGIN:  # any compile of a helper mid-run stalls the line that called it
            groups.setdefault(("line", c.call_site or c.function), []).append(c)
        elif c.recompile:
            groups.setdefault(("function", c.function), []).append(c)
    all_steps = sorted({int(s) for s in inputs.frames.steps[F.STEP]}) if len(inputs.frames.steps) else []
    if inputs.steps is not None:
        all_steps = [s for s in all_steps if s in set(inputs.steps)]
    warm_up = _warm_up_steps(r, inputs)
    out = []
    for (kind, name), group in groups.items():
        # Hosts compile at the same time: the run lost the slowest host's share, not their sum.
        host_ms = _slowest_host(group, lambda c: c.compile_ms)
        # What the steps lost: compile time inside them that the device waited for. Compiles outside
        # every step, and the part of one that runs on past its step's end, belong to the time around
        # the steps (``between_steps`` counts that), not to a step.
        lost = _slowest_host(group, lambda c: c.step_wait_ms if c.step >= 0 else 0.0)
        if host_ms < inputs.thresholds.min_finding_ms:
            continue
        warming = _warm_up_of(group, warm_up) if kind == "function" else None
        if kind == "function" and (lost < inputs.thresholds.min_finding_ms or warming is not None):
            out.append(_one_off_finding(name, group, host_ms, lost, all_steps, warming))
            continue
        earlier = _other_caller(group, r.compiles) if kind == "function" else None
        if earlier is not None:
            out.append(_other_caller_finding(name, group, host_ms, lost, all_steps, earlier))
            continue
        warm_line = _warm_up_line(group, warm_up) if kind == "line" else None
        out.append(_group_finding(kind, name, group, host_ms, lost, r.wall_ms, all_steps, inputs.thresholds, warm_line))
    return tuple(out)


def _warm_up_steps(r: "RecompilesResult", inputs: AnalysisInputs) -> dict[str, tuple[int, str]]:
    """Per host, the step that compiled the training step's program for the first time, and its function:
    the run's warm-up, where whatever runs first compiles."""
    program = step_program(inputs.frames)
    function = function_name(program) if program else ""
    out: dict[str, tuple[int, str]] = {}
    for c in r.compiles:
        if function and c.function == function and not c.recompile and c.step >= 0:
            out.setdefault(c.host, (c.step, function))
    return out


def _warm_up_of(group: list[Compile], warm_up: Mapping[str, tuple[int, str]]) -> tuple[int, str] | None:
    """The warm-up step (and the training step's function) that every compile of ``group`` in a step lies in,
    when none is logged; ``None`` otherwise.

    Without a compile log, a compile is called a recompile when its function's name compiled before:
    for an eager operation (``broadcast_in_dim``, ``gather``) that is a first compile at another shape.
    Such compiles that happen only in the step that first compiled the training step, and nowhere after
    it, are the warm-up's, paid once, not shapes that vary in the loop."""
    if any(c.logged for c in group):
        return None
    return _all_in_warm_up([c for c in group if c.step >= 0], warm_up)


def _warm_up_line(group: list[Compile], warm_up: Mapping[str, tuple[int, str]]) -> tuple[int, str] | None:
    """The warm-up step (and the training step's function) that every compile of an eager line's ``group`` lies
    in, none of them a change from the line's own earlier calls; ``None`` otherwise.

    A helper JAX shares between lines (``multiply``) held traces at other shapes before this line first ran, so
    the log calls its compile here a recompile: made only in the step that first compiled the training step,
    with nothing changed since the line's earlier calls, it is the line's first compile, paid once."""
    if any(c.step < 0 or c.changes for c in group):
        return None
    return _all_in_warm_up(group, warm_up)


def _all_in_warm_up(compiles: list[Compile], warm_up: Mapping[str, tuple[int, str]]) -> tuple[int, str] | None:
    """The warm-up step (and function) of ``compiles``' host when each lies in its host's warm-up step."""
    if compiles and all(c.host in warm_up and warm_up[c.host][0] == c.step for c in compiles):
        return warm_up[compiles[0].host]
    return None


def _slowest_host(group: list[Compile], ms: Any) -> float:
    per_host: dict[str, float] = {}
    for c in group:
        per_host[c.host] = per_host.get(c.host, 0.0) + ms(c)
    return max(per_host.values())


def _where(group: list[Compile], all_steps: list[int]) -> str:
    """``at steps 6 and 9``, ``before step 0``, ``at step 12 and between steps``: inside steps by number,
    outside them by where they lie in the capture."""
    inside = [c.step for c in group if c.step >= 0]
    places = list(dict.fromkeys(c.place or "outside the captured steps" for c in group if c.step < 0))
    parts = ([describe_steps(inside, all_steps)] if inside else []) + places
    return join(parts)


def _other_caller(group: list[Compile], compiles: tuple[Compile, ...]) -> tuple[str, ...] | None:
    """The call sites of the function's earlier compiles, where every recompile of ``group`` came from a
    call site none of its earlier compiles did (the compile log's ``call_site``: another caller, such as an
    evaluation calling the training step's function at its own size); else ``None``."""
    earlier_sites: set[str] = set()
    for c in group:
        before = {
            e.call_site for e in compiles if e.function == c.function and e.host == c.host and e.start_ns < c.start_ns
        }
        if c.call_site is None or None in before or not before or c.call_site in before:
            return None
        earlier_sites |= {e for e in before if e is not None}
    return tuple(sorted(earlier_sites))


def _other_caller_finding(
    name: str, group: list[Compile], host_ms: float, lost: float, all_steps: list[int], earlier: tuple[str, ...]
) -> Finding:
    """Recompiles each for a call site the function had not compiled for: another caller's shapes, once."""
    count = _count(group)
    sites = sorted({_short_site(str(c.call_site)) for c in group})
    message = (
        f"`{name}` compiled {'once more' if count == 1 else f'{count} more times'}, {_where(group, all_steps)}, "
        f"for another call: from {join(sites)}, where its earlier compiles were for "
        f"{join([_short_site(e) for e in earlier])}: {fmt_ms(host_ms)} ms compiling, {fmt_ms(lost)} ms of it "
        f"waited for, once{_causes(group)}."
    )
    return Finding(
        kind="recompile",
        severity=Severity.INFO,
        # Each call site's shapes compile once: a one-time cost, not a loss of the loop's (the evidence keeps it).
        time_lost_ms=0.0,
        message=message,
        suggestion=OTHER_CALLER.format(name=name),
        evidence={
            **_evidence("function", name, group),
            "one_off": True,
            "other_caller": True,
            "earlier_call_sites": list(earlier),
            "host_compile_ms": round(host_ms, 3),
            "other_caller_wait_ms": round(lost, 3),
        },
    )


def _one_off_finding(
    name: str,
    group: list[Compile],
    host_ms: float,
    lost: float,
    all_steps: list[int],
    warming: tuple[int, str] | None,
) -> Finding:
    """Compiles of a function that cost the steps (next to) nothing, or only in the warm-up step
    (``warming``, from ``_warm_up_of``): one-off compiles, not a loop's recompiles."""
    count = _count(group)
    times = "once more" if count == 1 else f"{count} more times"
    shown = f"`{name}`" if name != UNNAMED else "a function the trace does not name"
    notes = []
    if any(c.step < 0 for c in group):
        notes.append("outside the steps: part of the time around them, not of any step")
    if warming is not None:
        step, function = warming
        notes.append(
            f"in step {step}, the run's warm-up, which also compiled `{function}` for the first time"
            + (f": the step waited {fmt_ms(lost)} ms for these, once" if lost > 0 else "")
        )
        cost = "one-off compiles, not recompiles in the training loop"
    else:
        if any(c.step >= 0 for c in group):
            notes.append(
                "inside the steps: the device kept running work the host had queued ahead"
                + (f" (it waited {fmt_ms(lost)} ms)" if lost > 0 else "")
            )
        cost = "one-off compiles that cost the steps " + ("nothing" if lost <= 0 else "little")
    message = (
        f"{shown} compiled {times}, {_where(group, all_steps)}: {fmt_ms(host_ms)} ms of host compile time, "
        f"{cost} ({'; '.join(notes)}){_causes(group)}."
    )
    return Finding(
        kind="recompile",
        severity=Severity.INFO,
        # The warm-up step's wait is paid once, as for the training step's own first compile: not a loss
        # of the loop's (the evidence keeps it).
        time_lost_ms=0.0 if warming is not None else lost,
        message=message,
        suggestion=ONE_OFF,
        evidence={
            **_evidence("function", name, group),
            "one_off": True,
            "host_compile_ms": round(host_ms, 3),
            **({"warm_up_step": warming[0], "warm_up_wait_ms": round(lost, 3)} if warming is not None else {}),
        },
    )


def _evidence(kind: str, name: str, group: list[Compile]) -> dict[str, Any]:
    changes = [ch for c in group for ch in c.changes]
    return {
        "function": group[0].function if kind == "function" else None,
        "functions": sorted({c.function for c in group}),
        "call_site": name if kind == "line" else group[0].call_site,
        "origin": group[0].origin,
        "count": len(group),
        "steps": [c.step for c in group],
        "step": group[0].step,
        "hosts": sorted({c.host for c in group}),
        "compile_ms": [round(c.compile_ms, 3) for c in group],
        "device_wait_ms": [round(c.device_wait_ms, 3) for c in group],
        "places": [c.place for c in group],
        "causes": [c.cause for c in group],
        "changes": [dict(ch) for ch in changes],
    }


def _suggestion(group: list[Compile], changes: list[Mapping[str, Any]]) -> str:
    """What to change for a function's recompiles: a remainder batch's own advice where one compile alone
    changed a shape and it shrank once, beside the advice for the other compiles' changes."""
    if not changes and all((c.cause or "").startswith(FIRST_SEEN) for c in group):
        return UNSEEN
    shaped = [c for c in group if any(ch.get("what") == "shape" for ch in c.changes)]
    remainder = remainder_advice(shaped[0].changes) if len(shaped) == 1 else None
    if remainder is None:
        return suggestion_for(changes)
    rest = [ch for c in group if c is not shaped[0] for ch in c.changes]
    return f"{suggestion_for(rest)} {remainder}" if rest else remainder


def _group_finding(
    kind: str,
    name: str,
    group: list[Compile],
    host_ms: float,
    total: float,
    wall_ms: float,
    all_steps: list[int],
    settings: Settings,
    warm_line: tuple[int, str] | None = None,
) -> Finding:
    hosts = sorted({c.host for c in group})
    count = _count(group)
    times = "once" if count == 1 else f"{count} times"
    where = _where(group, all_steps) + (f" (on {len(hosts)} hosts; the slowest's time)" if len(hosts) > 1 else "")
    changes = [ch for c in group for ch in c.changes]
    once = False
    if kind == "function":
        head = f"`{name}` recompiled {times}, {where}: {fmt_ms(total)} ms"
        if host_ms - total >= 0.5:
            head += f" the steps waited for (of {fmt_ms(host_ms)} ms compiling)"
        suggestion = _suggestion(group, changes)
    else:
        helpers = sorted({c.function for c in group})
        again = sum(1 for c in group if c.recompile)
        head = (
            f"Eager code at {_short_site(name)} compiled JAX's {join([f'`{h}`' for h in helpers])} {times}, {where}: "
            f"{fmt_ms(host_ms)} ms"
            + (
                f" ({again} of them recompiles)"
                if 1 < again < len(group)
                else " (1 a recompile)"
                if again == 1 < len(group)
                else ""
            )
        )
        if host_ms - total >= 0.5:
            head += f", of which the steps waited for {fmt_ms(total)} ms"
        # The log's changes compare unrelated calls of a shared helper: they say nothing about this line.
        suggestion = EAGER
        once = again == 0 and all(c.logged for c in group)  # each helper's first compile: paid once, never again
        if once:
            head += ", each a first compile, paid once"
            suggestion = EAGER_ONCE
        elif warm_line is not None and all(c.logged for c in group):
            once = True
            head += (
                f", all in the run's warm-up step, which also compiled `{warm_line[1]}` for the first time: paid once"
            )
            suggestion = EAGER_ONCE
    return Finding(
        kind="recompile",
        severity=severity_for(total, wall_ms, settings) if total > 0 and not once else Severity.INFO,
        # A first compile is paid once, as a jitted function's (which has no finding): the evidence keeps it.
        time_lost_ms=0.0 if once else total,
        message=f"{head}{_causes(group)}.",
        suggestion=suggestion,
        evidence={
            **_evidence(kind, name, group),
            "host_compile_ms": round(host_ms, 3),
            **({"one_off": True, "first_compile_wait_ms": round(total, 3)} if once else {}),
        },
    )


def _count(group: list[Compile]) -> int:
    """How many compiles of ``group`` one host made, at most: hosts compile the same programs together."""
    hosts = {c.host for c in group}
    return max(sum(1 for c in group if c.host == h) for h in hosts)


def _short_site(site: str) -> str:
    """``/home/me/proj/examples/train.py:63`` -> ``.../examples/train.py:63``: the file's folder and name (evidence keeps the path)."""
    parts = site.replace("\\", "/").split("/")
    return site if len(parts) <= 3 else ".../" + "/".join(parts[-2:])


#: The distinct causes a finding's message names; the evidence keeps them all.
MAX_CAUSES = 4


def _causes(group: list[Compile]) -> str:
    """``; cause: ...`` or ``; causes: ... (at step 6); ... (at step 9)``: each distinct cause once, with its steps."""
    if not any(c.logged for c in group):
        return " (cause unknown without a compile log)"
    by_cause: dict[str, list[int]] = {}
    for c in group:
        cause = c.cause or "unknown (not in the compile log)"
        if cause.startswith(f"{c.function}: "):
            cause = cause[len(c.function) + 2 :]
        by_cause.setdefault(cause, []).append(c.step)
    if len(by_cause) == 1:
        return f"; cause: {next(iter(by_cause))}"
    same_steps = len({tuple(sorted(set(v))) for v in by_cause.values()}) == 1
    parts = [cause if same_steps else f"{cause} ({describe_steps(steps)})" for cause, steps in by_cause.items()]
    more = len(parts) - MAX_CAUSES
    if more > 0:  # an eager line's helpers on many shapes: the evidence keeps every cause
        parts = [*parts[:MAX_CAUSES], f"and {more} more (in the finding's evidence)"]
    return "; causes: " + "; ".join(parts)
