"""Time in a collective spent waiting for the last participant, not communicating.

A collective ends on every participant together, and it cannot start moving data
until the last participant arrives: a device that reaches an all-reduce early sits
in it until the late one comes. So a collective's duration on each device is its
wait for the last participant plus the transfer itself. The participant that
arrived last waited for no one, so the shortest duration among the participants
approximates the transfer, and on each device the rest of its duration, at the
start of the op, is waiting.

One collective *instance* is one run of one collective op (``hlo_module`` and op
name) on the devices of one host: each device's occurrence of that op is matched
to the other devices' occurrence that overlaps it and ends nearest to it (they
end together). Across hosts, the straggler analysis aligns the clocks and books
the waits for a late host; this module looks at the devices of one host.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.base import AnalysisInputs, Finding, severity_for
from jaxdiag.analyses.collective_section import LateDevice
from jaxdiag.analyses.device_work import COLLECTIVE, END_NS, kind_is
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclasses.dataclass(frozen=True, slots=True)
class Instance:
    """One collective run by several devices of one host.

    Attributes:
      name: the op (``psum.3``, ``all-reduce.1``).
      kind: its collective kind (``all-reduce``, ...).
      devices: the participants, as ``"plane#ordinal"`` (``per_device``'s names).
      starts_ns, durs_ns: each participant's occurrence, in ``devices`` order.
    """

    name: str
    kind: str
    devices: tuple[str, ...]
    starts_ns: np.ndarray
    durs_ns: np.ndarray

    @property
    def transfer_ns(self) -> int:
        """The shortest participant's duration: the last to arrive waited for no one."""
        return int(self.durs_ns.min())

    @property
    def late_device(self) -> str:
        """The participant that arrived last (the one with the shortest duration)."""
        return self.devices[int(np.argmin(self.durs_ns))]

    @property
    def waits_ns(self) -> np.ndarray:
        """Each participant's wait for the last one: its duration less the transfer."""
        return self.durs_ns - self.transfer_ns

    def waiting_intervals(self) -> dict[str, np.ndarray]:
        """Per device, the stretch it waited, ``[start, start + wait)`` (the start of its occurrence)."""
        return {
            d: np.array([[s, s + w]], dtype=np.int64)
            for d, s, w in zip(self.devices, self.starts_ns.tolist(), self.waits_ns.tolist())
            if w > 0
        }


def instances(ops: "pd.DataFrame") -> list[Instance]:
    """Every collective instance with at least two participants among ``ops`` (one host's ``device_ops``).

    Within a report the answer for one ``device_ops`` frame is shared (see ``analyses.shared``).
    """
    from jaxdiag.analyses.shared import in_scope

    held, found = in_scope(("peer_waits", id(ops)), lambda: (ops, _instances(ops)))
    return list(found) if held is ops else _instances(ops)


def _instances(ops: "pd.DataFrame") -> list[Instance]:
    coll = ops.loc[kind_is(ops, "collective")]
    if coll.empty:
        return []
    out: list[Instance] = []
    keys = [F.HLO_MODULE, F.NAME]
    for (_, name), rows in coll.groupby(keys, sort=True, observed=True):
        per_device = {
            f"{plane}#{device}": grp.sort_values(END_NS)
            for (plane, device), grp in rows.groupby([F.PLANE, F.DEVICE], sort=True, observed=True)
        }
        if len(per_device) < 2:
            continue
        kind = str(rows[COLLECTIVE].iloc[0])
        out += _match(str(name), kind, per_device)
    return out


def _match(name: str, kind: str, per_device: dict[str, "pd.DataFrame"]) -> list[Instance]:
    """Instances of one op: each occurrence on the device with the most, joined to the others' that overlap it.

    A participant whose occurrence the trace lacks (XLA:CPU now and then drops one) is left out of
    that instance; an instance needs two participants.
    """
    columns = {
        d: (
            rows[F.START_NS].to_numpy(np.int64),
            rows[END_NS].to_numpy(np.int64),
        )
        for d, rows in per_device.items()
    }
    reference = max(sorted(columns), key=lambda d: len(columns[d][0]))
    ref_starts, ref_ends = columns[reference]
    out = []
    for s, e in zip(ref_starts.tolist(), ref_ends.tolist()):
        devices, starts, durs = [], [], []
        for d in sorted(columns):
            d_starts, d_ends = columns[d]
            i = _nearest(d_ends, e)
            if i < 0 or not (d_starts[i] < e and s < d_ends[i]):  # not running together: not the same instance
                continue
            devices.append(d)
            starts.append(int(d_starts[i]))
            durs.append(int(d_ends[i] - d_starts[i]))
        if len(devices) > 1:
            out.append(Instance(name, kind, tuple(devices), np.array(starts, np.int64), np.array(durs, np.int64)))
    return out


def _nearest(sorted_ends: np.ndarray, end: int) -> int:
    """The index of the value of ``sorted_ends`` nearest ``end``, or -1 when empty."""
    if not len(sorted_ends):
        return -1
    i = int(np.searchsorted(sorted_ends, end))
    candidates = [j for j in (i - 1, i) if 0 <= j < len(sorted_ends)]
    return min(candidates, key=lambda j: abs(int(sorted_ends[j]) - end))


def waiting_by_device(found: list[Instance]) -> dict[str, np.ndarray]:
    """Per device, the union of the stretches it waited in collectives for a later device."""
    acc: dict[str, list[np.ndarray]] = {}
    for inst in found:
        for device, stretch in inst.waiting_intervals().items():
            acc.setdefault(device, []).append(stretch)
    return {d: iv.union(np.concatenate(parts)) for d, parts in acc.items()}


def consistently_late(late_devices: Sequence[LateDevice]) -> LateDevice | None:
    """The device the others waited for most, when it is the straggler: otherwise ``None``.

    It is one when it arrived last at two thirds or more of the collective runs and the others'
    wait for it is at least half of their wait for every late device. Lateness spread over the
    devices (each last now and then) names no one: then no device's work is the cause to even out.
    """
    if not late_devices:
        return None
    worst = late_devices[0]
    waited = sum(x.waited_ms for x in late_devices)
    if 3 * worst.runs >= 2 * worst.of_runs and 2 * worst.waited_ms >= waited:
        return worst
    return None


def late_device_finding(
    late_devices: Sequence[LateDevice], waiting_ms: float, wall_ms: float, inputs: AnalysisInputs, on_cpu: bool
) -> tuple[Finding, ...]:
    """One ``collective_wait`` finding: the device the others waited for, or that the lateness is spread.

    ``late_devices``: most waited for first. ``waiting_ms``: the devices' wait for later devices,
    per device (mean). A device is named (and the work before the collective called uneven) only
    when it is ``consistently_late``.
    """
    if not late_devices or waiting_ms < inputs.thresholds.min_finding_ms:
        return ()
    several_hosts = len(inputs.frames.hosts) > 1
    worst = consistently_late(late_devices)
    head = f"Devices waited {waiting_ms:.1f} ms per device inside collectives for a later device, not communicating"
    if worst is not None:
        who = _device_name(worst, several_hosts)
        others = "".join(f"; {_device_name(x, several_hosts)} in {x.runs}" for x in late_devices[1:4] if x.runs)
        msg = (
            f"{head}: {who} arrived last at {worst.runs} of {worst.of_runs} collective runs "
            f"({', '.join(worst.ops[:3])}){others}, up to {worst.max_late_ms:.1f} ms after the first; "
            f"the transfer itself took {worst.transfer_ms:.2f} ms in those runs."
        )
        suggestion = (
            "Moving fewer bytes would not help: the wait is for that device, not for the transfer. "
            f"A guess (the trace shows who arrived late, not why): even out the work before the "
            f"collective, since {who} takes longer to reach it (an uneven shard, a branch only it "
            "takes, a slower or busier device)."
            + (
                " On XLA:CPU the devices share the host's cores, so spreading the work over them may not "
                "shorten the step."
                if on_cpu
                else ""
            )
        )
    else:
        by_runs = sorted((x for x in late_devices if x.runs), key=lambda x: -x.runs)
        counts = ", ".join(f"{_device_name(x, several_hosts)} in {x.runs}" for x in by_runs[:8])
        more = f" and {len(by_runs) - 8} more devices" if len(by_runs) > 8 else ""
        ops = sorted({op for x in late_devices for op in x.ops})
        msg = (
            f"{head}; the lateness is spread over the devices, no one of them is last consistently: "
            f"the last to arrive at the {late_devices[0].of_runs} collective runs ({', '.join(ops[:3])}) was "
            f"{counts}{more}, up to {max(x.max_late_ms for x in late_devices):.1f} ms after the first; "
            f"the transfer itself took {sum(x.transfer_ms for x in late_devices):.2f} ms in those runs."
        )
        suggestion = (
            "Moving fewer bytes would not help: the time is waiting, not transfer. No device is late "
            "often enough to point at its share of the work: which device comes last changes from run "
            "to run, so the devices reach the collective at uneven times without one being slower."
            + (
                " On XLA:CPU several virtual devices share the host's cores, so they take turns on them "
                "and arrive at a collective at different times: a likely cause here, which an accelerator "
                "with a chip per device does not have."
                if on_cpu
                else " Look for what delays the devices by turns: work or transfers that share them with the step."
            )
        )
    return (
        Finding(
            kind="collective_wait",
            severity=severity_for(waiting_ms, wall_ms, inputs.thresholds),
            time_lost_ms=waiting_ms,
            message=msg,
            suggestion=suggestion,
            evidence={
                "late_devices": [dataclasses.asdict(x) | {"ops": list(x.ops)} for x in late_devices],
                "consistently_late": worst is not None,
                "waiting_for_devices_ms": round(waiting_ms, 3),
            },
        ),
    )


def _device_name(late: LateDevice, several_hosts: bool) -> str:
    plane, _, ordinal = late.device.rpartition("#")
    return f"device {ordinal} ({plane}{' on ' + late.host if several_hosts else ''})"
