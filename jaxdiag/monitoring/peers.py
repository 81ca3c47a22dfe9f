"""What the processes of a ``jax.distributed`` run tell each other while they train.

A background thread, every ``interval_s``, publishes this process's progress
(last step ended, step entered, last compile's fingerprint), its step times every
``peer_every`` steps, and the capture triggers it saw; it reads the others'. The
step itself only appends to lists this thread reads: it never waits on the store.

- **Triggers.** A process that sees an anomaly proposes a window; process 0 decides
  (one window for proposals that would overlap) and publishes its first step, ahead
  of the furthest process by ``lead_steps`` or by four intervals of this thread in
  steps, whichever is more, so that every process hears of it in time and captures
  the same steps; every process follows the decisions in order. A process that
  hears of a window too late starts it at its next step, and the reason says so.
- **Stragglers.** Once every process has published its times for the same steps,
  each process compares them: a process whose mean step, or whose mean time before
  entering the step (data loading, host work), exceeds the others' median by more
  than ``straggler_factor - 1`` times their median step, three publications running,
  is named once, with what it was doing. In a loop that meets in a collective every
  step the step times are alike (the others wait for the late one inside the step),
  so the time before entering the step is what tells the straggler; a process slow
  on its devices alone cannot be told this way (a capture window can).
"""

from __future__ import annotations

import collections
import math
import statistics
import threading
import time
import warnings
from typing import Any

from jaxdiag.monitoring.store import Store

#: Publications running in which a process must be late to be named a straggler.
CHRONIC = 3


class Peers:
    """The background thread of one monitor in a multi-process run."""

    def __init__(self, monitor: Any, store: Store) -> None:
        self.monitor = monitor
        self.store = store
        self.proposals: collections.deque[tuple[int, str]] = collections.deque(maxlen=64)
        self._stats_upto: list[int] = []
        self._evaluate: list[int] = []
        self._strikes: dict[int, int] = {}
        self._named: set[int] = set()
        self._seen_proposals: set[str] = set()
        self._decided_until = -1
        self._decisions = 0
        self._followed: set[str] = set()
        self.stragglers: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="jaxdiag-monitor-peers", daemon=True)
        self._thread.start()

    @classmethod
    def connect(cls, monitor: Any, prefix: str) -> "Peers | None":
        store = Store.connect(prefix)
        return None if store is None else cls(monitor, store)

    # --- called from the step (never waits) -----------------------------------------
    def propose(self, step: int, reason: str) -> None:
        self.proposals.append((step, reason))

    def stats_due(self, step: int) -> None:
        self._stats_upto.append(step)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=max(5.0, 3 * self.monitor.interval_s))
        if not self._failed:
            self._tick()  # what the last steps left to publish

    # --- the thread -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.monitor.interval_s):
            self._tick()

    def _tick(self) -> None:
        try:
            self.publish_progress()
            self._publish_proposals()
            if self.store.index == 0:
                self._decide()
            self._follow()
            self._publish_stats()
            self._compare_stats()
        except Exception as exc:  # noqa: BLE001 - the store is gone: the loop goes on alone
            if not self._failed:
                self._failed = True
                if _still_distributed():  # not the program's own jax.distributed.shutdown()
                    _warn(f"jaxdiag.monitor: lost the key-value store ({type(exc).__name__}: {exc}); peers not watched")
            self._stop.set()

    def publish_progress(self) -> None:
        m = self.monitor
        self.store.set(
            f"progress/{self.store.index}",
            {
                "step": m.last_step,
                "t": m.last_end_unix,
                "entered": m.entered,
                "call": m.entered_call,
                "compile": m.last_compile,
                "host": m.host,
                "pub": time.time(),
            },
        )

    def _publish_proposals(self) -> None:
        while self.proposals:
            step, reason = self.proposals.popleft()
            self.store.set(f"propose/{self.store.index}-{step}", {"step": step, "reason": reason})

    def _decide(self) -> None:
        """Process 0: one window per group of proposals, ``lead_steps`` ahead of the furthest process."""
        m = self.monitor
        proposals = self.store.folder("propose")
        new = sorted(
            ((v.get("step"), k, v) for k, v in proposals.items() if k not in self._seen_proposals),
            key=lambda item: (item[0] if isinstance(item[0], int) else -1, item[1]),
        )
        if not new:
            return
        progress = self.store.folder("progress")
        furthest = max([p.get("step") or 0 for p in progress.values()] + [m.last_step or 0])
        for step, key, value in new:
            self._seen_proposals.add(key)
            if not isinstance(step, int) or step <= self._decided_until:
                continue
            first = furthest + self._lead()
            process = key.partition("-")[0]
            self.store.set(
                f"window/{self._decisions:06d}",
                {"first": first, "reason": f"{value.get('reason')} (seen on process {process})"},
            )
            self._decisions += 1
            self._decided_until = first + m.capture_steps

    def _lead(self) -> int:
        """Steps ahead of the furthest process: ``lead_steps``, or more where that is under four of
        this thread's intervals (the others must hear of the window before they reach it)."""
        m = self.monitor
        median = m.slow.median_ms
        if not median:
            return m.lead_steps
        return max(m.lead_steps, math.ceil(4 * m.interval_s * 1e3 / median))

    def _follow(self) -> None:
        decisions = self.store.folder("window")
        for key in sorted(decisions):
            if key in self._followed:
                continue
            self._followed.add(key)
            value = decisions[key]
            if isinstance(value.get("first"), int):
                self.monitor.schedule(value["first"], str(value.get("reason")))

    def _publish_stats(self) -> None:
        m = self.monitor
        while self._stats_upto:
            upto = self._stats_upto.pop(0)
            rows = [r for r in list(m.recent) if upto - m.peer_every < r[0] <= upto]
            if not rows:
                continue
            gaps = [r[2] for r in rows if r[2] is not None]
            self.store.set(
                f"steps/{upto}/{self.store.index}",
                {
                    "steps": len(rows),
                    "wall_ms": statistics.fmean(r[1] for r in rows),
                    "gap_ms": statistics.fmean(gaps) if gaps else None,
                    "compile_ms": sum(r[3] for r in rows),
                    "host": m.host,
                },
            )
            self._evaluate.append(upto)
            old = upto - 4 * m.peer_every
            if old > 0:
                try:
                    self.store.delete(f"steps/{old}/{self.store.index}")
                except Exception:  # noqa: BLE001 - a key left behind is harmless
                    pass

    def _compare_stats(self) -> None:
        m = self.monitor
        for upto in list(self._evaluate):
            entries = self.store.folder(f"steps/{upto}")
            by_process = {int(k): v for k, v in entries.items() if k.isdigit()}
            if len(by_process) < self.store.count:
                if upto < (m.last_step or 0) - 4 * m.peer_every:
                    self._evaluate.remove(upto)  # a peer is too far behind to compare: the watchdog's business
                continue
            self._evaluate.remove(upto)
            self._judge(upto, by_process)

    def _judge(self, upto: int, by_process: dict[int, dict[str, Any]]) -> None:
        m = self.monitor
        for p, mine in by_process.items():
            others = [v for q, v in by_process.items() if q != p]
            wall = statistics.median(float(v["wall_ms"]) for v in others)
            gap = statistics.median(float(v.get("gap_ms") or 0.0) for v in others)
            late_wall = float(mine["wall_ms"]) - wall
            late_gap = float(mine.get("gap_ms") or 0.0) - gap
            late = max(late_wall, late_gap)
            if wall > 0 and late > (m.straggler_factor - 1) * wall:
                self._strikes[p] = self._strikes.get(p, 0) + 1
            else:
                self._strikes[p] = 0
            if self._strikes[p] >= CHRONIC and p not in self._named:
                self._named.add(p)
                self._name(p, upto, mine, wall, gap, late_gap >= late_wall)

    def _name(self, p: int, upto: int, mine: dict[str, Any], wall: float, gap: float, before_step: bool) -> None:
        m = self.monitor
        doing = (
            f"it spent {float(mine.get('gap_ms') or 0.0):.1f} ms of each step before entering it "
            f"(data loading or other host work) against {gap:.1f} ms on the others"
            if before_step
            else f"its steps took {float(mine['wall_ms']):.1f} ms against {wall:.1f} ms on the others"
        )
        if mine.get("compile_ms"):
            doing += f"; it compiled for {float(mine['compile_ms']):.0f} ms in those steps"
        message = (
            f"jaxdiag.monitor: process {p} (host {mine.get('host')}) is a chronic straggler: over its last "
            f"{mine.get('steps')} steps to step {upto} (and {CHRONIC - 1} publications before), {doing}; "
            f"a step took {float(mine['wall_ms']):.1f} ms on it, {wall:.1f} ms (median) on the others"
        )
        event = {"event": "straggler", "t": time.time(), "process": p, "host": mine.get("host"), "upto": upto}
        event.update(message=message, wall_ms=mine["wall_ms"], gap_ms=mine.get("gap_ms"), others_wall_ms=wall)
        self.stragglers.append(event)
        m.peer_event(event)
        _warn(message)


def _still_distributed() -> bool:
    try:
        from jaxdiag import jax_internals

        return jax_internals.distributed_client() is not None
    except Exception:  # noqa: BLE001
        return False


def _warn(message: str) -> None:
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    except Exception:  # noqa: BLE001
        pass
