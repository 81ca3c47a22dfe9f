"""The hang watchdog: when no step ends within the deadline, say who the run waits for.

A thread of each process checks, a few times per deadline, when a step last
ended. Past the deadline it writes down where this process is (its main thread's
innermost frame of the program's own code), publishes that, and reads what the
other processes published (their progress, and where they are once their own
watchdogs fire), waiting a bounded time for them. It then names the processes
that did not arrive (a lower last step, or not yet in the step the others are in)
and where the others wait, writes ``hang-<host>-p<process>.json`` and every
thread's Python stack (``faulthandler``) to ``hang-<host>-p<process>.txt`` in the
logdir, adds a ``hang`` event to the stream and prints the verdict on stderr; with
``exit_on_hang`` it then ends the process with ``HANG_EXIT_STATUS``. It fires once
per stall; a step ending re-arms it.

Only the watchdog's own thread runs: a main thread stuck in a collective (which
releases the GIL while it waits) does not stop it. A process whose Python is
stuck holding the GIL cannot answer; the others name it from its last progress.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from jaxdiag.monitoring.frames import is_library
from jaxdiag.monitoring.store import bounded


class Watchdog:
    """The watchdog thread of one monitor."""

    def __init__(self, monitor: Any) -> None:
        self.monitor = monitor
        self.deadline_s = float(monitor.hang_after_s)
        self.verdicts: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jaxdiag-monitor-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        check = min(max(self.deadline_s / 10, 0.05), 1.0)
        fired_for = None
        while not self._stop.wait(check):
            since = self.monitor.last_progress
            if time.monotonic() - since > self.deadline_s and fired_for != since:
                fired_for = since
                try:
                    self.fire()
                except Exception as exc:  # noqa: BLE001 - a watchdog that fails says so, and never stops the run
                    print(f"jaxdiag.monitor: the hang watchdog failed: {type(exc).__name__}: {exc}", file=sys.stderr)

    def fire(self) -> dict[str, Any]:
        m = self.monitor
        if m._stream is None:  # no step has ended yet: which process this is was not asked
            from jaxdiag.monitoring.monitor import _process

            m.process_index, m.process_count = _process()
        mine = {
            "process": m.process_index,
            "host": m.host,
            "pid": os.getpid(),
            "step": m.last_step,
            "entered": m.entered,
            "call": m.entered_call,
            "compile": m.last_compile,
            "where": where_main_thread_is(),
            "stalled_s": round(time.monotonic() - m.last_progress, 3),
            "t": time.time(),
        }
        peers: dict[int, dict[str, Any]] = {}
        answers: dict[int, dict[str, Any]] = {}
        store = getattr(m._peers, "store", None)
        if store is not None:
            peers, answers = self._gather(store, mine)
        verdict = judge(mine, peers, answers, m.process_count, self.deadline_s)
        self._write(verdict)
        self.verdicts.append(verdict)
        if m.exit_on_hang:
            from jaxdiag.monitoring.monitor import HANG_EXIT_STATUS

            sys.stderr.flush()
            os._exit(HANG_EXIT_STATUS)
        return verdict

    def _gather(self, store: Any, mine: dict[str, Any]) -> tuple[dict[int, Any], dict[int, Any]]:
        """Publish where this process is; read the others' progress and answers, waiting a bounded time."""
        bounded(lambda: store.set(f"hang/{store.index}", mine), 5.0)
        wait_s = min(max(2.0, 3 * self.monitor.interval_s), max(self.deadline_s, 2.0), 30.0)
        until = time.monotonic() + wait_s
        answers: dict[int, Any] = {}
        while True:
            found = bounded(lambda: store.folder("hang"), 5.0, {}) or {}
            answers = {
                int(k): v
                for k, v in found.items()
                if k.isdigit() and int(k) != store.index and float(v.get("t") or 0) > mine["t"] - 2 * self.deadline_s
            }
            if len(answers) >= store.count - 1 or time.monotonic() >= until:
                break
            time.sleep(min(0.2, self.monitor.interval_s))
        progress = bounded(lambda: store.folder("progress"), 5.0, {}) or {}
        peers = {int(k): v for k, v in progress.items() if k.isdigit() and int(k) != store.index}
        return peers, answers

    def _write(self, verdict: dict[str, Any]) -> None:
        m = self.monitor
        stem = m.logdir / f"hang-{_safe(m.host)}-p{m.process_index}"
        try:
            Path(f"{stem}.json").write_text(json.dumps(verdict, indent=1, default=str))
            with open(f"{stem}.txt", "w", encoding="utf-8") as f:
                f.write(verdict["message"] + "\n\n")
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
        except OSError as exc:
            print(f"jaxdiag.monitor: could not write the hang files {stem}.*: {exc}", file=sys.stderr)
        if m._stream is not None:
            m._stream.event({"event": "hang", **{k: v for k, v in verdict.items() if k != "processes"}})
        print(verdict["message"], file=sys.stderr, flush=True)


def judge(
    mine: dict[str, Any],
    peers: dict[int, dict[str, Any]],
    answers: dict[int, dict[str, Any]],
    count: int,
    deadline_s: float,
) -> dict[str, Any]:
    """The verdict: who did not arrive and where everyone is, from what each process told."""
    me = int(mine["process"])
    state: dict[int, dict[str, Any]] = {me: mine}
    for p in range(count):
        if p == me:
            continue
        if p in answers:
            state[p] = {**answers[p], "answered": True}
        elif p in peers:
            state[p] = {**peers[p], "answered": False}
        else:
            state[p] = {"answered": False, "unknown": True}
    reached = [int(s["step"]) for s in state.values() if isinstance(s.get("step"), int)]
    furthest = max(reached) if reached else None
    in_next = any(s.get("entered") is not None and s.get("entered") == (furthest or 0) + 1 for s in state.values())
    behind = []
    for p, s in sorted(state.items()):
        step = s.get("step")
        if s.get("unknown"):
            behind.append(p)
        elif furthest is not None and (step is None or step < furthest):
            behind.append(p)
        elif in_next and s.get("entered") is None:
            behind.append(p)
    lines = []
    stalled = f"no step ended for {mine['stalled_s']:.0f} s (deadline {deadline_s:g} s)"
    for p in behind:
        s = state[p]
        if s.get("unknown"):
            lines.append(f"process {p} published nothing (not started, or lost)")
            continue
        host = s.get("host")
        text = f"process {p} (host {host}) did not arrive: its last step ended was {s.get('step')}"
        if s.get("entered") is not None:
            text += f", it is in step {s.get('entered')}"
        elif furthest is not None and s.get("step") == furthest:
            text += f", and it has not entered step {furthest + 1} as the others have"
        if s.get("where"):
            text += f"; it is at {s['where']}"
        elif not s.get("answered"):
            pub = s.get("pub")
            ago = f"{time.time() - float(pub):.0f} s ago" if isinstance(pub, (int, float)) else "never"
            text += f"; it did not answer (last heard from {ago}: dead, or stuck holding the GIL)"
        lines.append(text)
    waiting = []
    for p, s in sorted(state.items()):
        if p in behind or s.get("unknown"):
            continue
        at = s.get("where") or "(did not answer)"
        step = s.get("entered") if s.get("entered") is not None else s.get("step")
        waiting.append(f"process {p} (host {s.get('host')}) waits in step {step} at {at}")
    if count == 1:
        head = f"jaxdiag.monitor: hang: {stalled}"
    elif behind:
        head = f"jaxdiag.monitor: hang on process {me}: {stalled}. Not arrived: " + "; ".join(lines)
    else:
        head = (
            f"jaxdiag.monitor: hang on process {me}: {stalled}. Every process reached the same point "
            "(no process is behind by its steps): where each waits is below"
        )
    message = head + ". " + "; ".join(waiting) + "."
    if mine.get("compile"):
        c = mine["compile"]
        message += f" Last compile here: `{c.get('function')}` (compile {c.get('compile')}, fingerprint {c.get('fp')})."
    return {
        "event": "hang",
        "process": me,
        "host": mine.get("host"),
        "t": mine["t"],
        "stalled_s": mine["stalled_s"],
        "not_arrived": behind,
        "message": message,
        "processes": {str(p): s for p, s in state.items()},
    }


def where_main_thread_is() -> str | None:
    """``file:line (function)`` of the main thread's innermost frame of the program's own code, and what it is in."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    if frame is None:
        return None
    stack = traceback.extract_stack(frame)
    if not stack:
        return None
    user = next((f for f in reversed(stack) if not is_library(f.filename)), None)
    inner = stack[-1]
    if user is None:
        return f"{inner.filename}:{inner.lineno} ({inner.name})"
    text = f"{user.filename}:{user.lineno} ({user.name})"
    if inner is not user:
        text += f", inside {inner.name} ({os.path.basename(inner.filename)}:{inner.lineno})"
    return text


def _safe(host: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in host)
