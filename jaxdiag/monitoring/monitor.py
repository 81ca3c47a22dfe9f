"""``jaxdiag.monitor``: watch a long run, capture when it goes wrong, say who a hang waits for.

    with jaxdiag.monitor("logs/run1"):
        for batch in data:
            state = train_step(state, batch)      # @jaxdiag.step, cap.step(), or found (below)

Steps come from the marks the program already has (``@jaxdiag.step``,
``cap.step()``, or ``mon.step()``); without any, from the calls of the dominant
jitted function: the user function with the costliest first compile, timed
through a wrapper put in place of the module global that names it (a function
held only in a local variable cannot be timed this way: the monitor says so). Each
step's end appends one line to the metrics stream (``stream``), compiles are
recorded as ``jaxdiag.watch()`` records them, and at each step end the monitor
decides, from numbers it already has, whether to capture the next steps
(``windows``). Work that talks to other processes (triggers, progress, step
times) runs on a background thread (``peers``), and a hang watchdog on another
(``watchdog``): a step never waits on either.

The module runs past 400 lines: the step's path and the state the background
threads read live in one object, so that a step touches one object's attributes.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

from jaxdiag.errors import ConfigError
from jaxdiag.monitoring.anomaly import SlowSteps, is_recompile, recompile_reason, slow_reason
from jaxdiag.monitoring.stream import SCHEMA, StreamWriter
from jaxdiag.monitoring.windows import WindowKeeper, device_ms_by_step

#: Exit status of a process the watchdog ends (``exit_on_hang``): EX_TEMPFAIL, "try again".
HANG_EXIT_STATUS = 75
_MB = 1 << 20
_MARK = "monitor.step"  # the source of ``Monitor.step()`` marks
_SEQUENCE = [0]  # monitors started in this process: the key-value namespace of each, alike on every process


class Monitor:
    """A monitor of one training loop (made by ``jaxdiag.monitor``).

    Args:
      logdir: where the metrics stream, capture windows and hang files go.
      slow_factor: a step slower than this times the rolling median is captured.
      min_slow_ms: ... and slower than the median by at least this many ms (a busy
        machine stretches a 1 ms step to 4 ms now and then; that is no anomaly).
      median_of: how many recent steady steps the median is taken over.
      warmup_steps: steps before any capture trigger (first compiles, warm caches).
      capture_steps: how many steps each window captures.
      every: also capture a window every this many steps (``None``: only on anomalies).
      max_windows, disk_budget_mb: keep at most this many windows and this much
        disk; the oldest are removed first.
      reports: build each window's report beside it (process 0, a child process).
      hang_after_s: the watchdog's deadline: no step ending for this long is a hang
        (``None``: no watchdog).
      exit_on_hang: end the process with ``HANG_EXIT_STATUS`` (75) once the hang is
        written down, for an orchestrator to restart the job.
      peer_every: publish step times to the other processes every this many steps.
      straggler_factor: a process whose moving average exceeds the others' median by
        this factor, three publications running, is named a straggler.
      flush_every: write the stream every this many steps.
      interval_s: how often the background threads look at the other processes.
      lead_steps: in a multi-process run, at least how many steps ahead a capture is
        scheduled, so that every process captures the same steps.
      name: the step annotation name in capture windows.
    """

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        *,
        slow_factor: float = 3.0,
        min_slow_ms: float = 20.0,
        median_of: int = 50,
        warmup_steps: int = 10,
        capture_steps: int = 5,
        every: int | None = None,
        max_windows: int = 5,
        disk_budget_mb: float = 2048,
        reports: bool = True,
        hang_after_s: float | None = 600.0,
        exit_on_hang: bool = False,
        peer_every: int = 20,
        straggler_factor: float = 1.5,
        flush_every: int = 10,
        interval_s: float = 1.0,
        lead_steps: int = 10,
        name: str = "train",
    ) -> None:
        for label, value in (("slow_factor", slow_factor), ("straggler_factor", straggler_factor)):
            if not (isinstance(value, (int, float)) and value > 1):
                raise ConfigError(f"jaxdiag.monitor({label}=...) must be a number above 1, got {value!r}")
        for label, value in (
            ("median_of", median_of),
            ("capture_steps", capture_steps),
            ("max_windows", max_windows),
            ("peer_every", peer_every),
            ("flush_every", flush_every),
            ("lead_steps", lead_steps),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"jaxdiag.monitor({label}=...) must be a positive integer, got {value!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ConfigError(f"jaxdiag.monitor(warmup_steps=...) must be 0 or more, got {warmup_steps!r}")
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ConfigError(f"jaxdiag.monitor(every=...) must be a positive integer or None, got {every!r}")
        if hang_after_s is not None and not (isinstance(hang_after_s, (int, float)) and hang_after_s > 0):
            raise ConfigError(f"jaxdiag.monitor(hang_after_s=...) must be positive or None, got {hang_after_s!r}")
        if not (isinstance(interval_s, (int, float)) and interval_s > 0):
            raise ConfigError(f"jaxdiag.monitor(interval_s=...) must be positive, got {interval_s!r}")
        self.logdir = Path(logdir)
        if not (isinstance(min_slow_ms, (int, float)) and min_slow_ms >= 0):
            raise ConfigError(f"jaxdiag.monitor(min_slow_ms=...) must be 0 or more, got {min_slow_ms!r}")
        self.slow = SlowSteps(slow_factor, median_of, min_history=min(10, median_of), min_excess_ms=min_slow_ms)
        self.warmup_steps = warmup_steps
        self.capture_steps = capture_steps
        self.every = every
        self.max_windows = max_windows
        self.budget_bytes = int(disk_budget_mb * _MB)
        self.reports = reports
        self.hang_after_s = hang_after_s
        self.exit_on_hang = exit_on_hang
        self.peer_every = peer_every
        self.straggler_factor = float(straggler_factor)
        self.flush_every = flush_every
        self.interval_s = float(interval_s)
        self.lead_steps = lead_steps
        self.name = name
        # --- state read by the background threads (plain attributes: each write is atomic) ---
        self.last_step: int | None = None  # the last step that ended
        self.entered: int | None = None  # the step running now (begun, not ended)
        self.entered_call: str | None = None  # the jitted function whose call is the step, when known
        self.last_end_unix: float | None = None
        self.last_progress = time.monotonic()  # when a step last ended (or the monitor started)
        self.last_compile: dict[str, Any] | None = None
        self.recent: list[tuple[int, float, float | None, float]] = []  # (step, wall, gap, compile) ms, bounded
        self.process_index = 0
        self.process_count = 1
        self.host = socket.gethostname()
        # --- the step thread's own ---
        self._n = -1
        self._begin: float | None = None
        self._prev_end: float | None = None
        self._compiles: list[Any] = []  # records since the last step end, appended by the listener
        self._scheduled: list[tuple[int, str]] = []  # (first step, reason), from this process or process 0
        self._quiet_until = -1  # no slow-step trigger before this step (a window just ran)
        self._annotation: Any = None
        self._started = False
        self._stream: StreamWriter | None = None
        self._windows: WindowKeeper | None = None
        self._watch: Any = None
        self._collector: Any = None
        self._peers: Any = None
        self._watchdog: Any = None
        self._calls: Any = None
        self._source: Any = None  # what marks the steps timed (see ``step_begin``)
        self._lock = threading.Lock()
        self.windows: list[dict[str, Any]] = []  # every window event, in order
        self.stream_path: Path | None = None  # known once the first step has ended
        self._started_unix = 0.0

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> "Monitor":
        if self._started:
            return self
        from jaxdiag.capturing import step_hooks
        from jaxdiag.recording import compile_log
        from jaxdiag.recording.watch import watch

        try:
            self.logdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{self.logdir}: cannot write the monitor's folder ({exc.strerror or exc})") from None
        self._started_unix = time.time()
        self._watch = watch()
        self._watch.__enter__()
        self._collector = _CompileTap(self)
        compile_log.LOG.add_collector(self._collector)
        step_hooks.add_listener(self)
        _SEQUENCE[0] += 1
        if self.hang_after_s is not None:
            from jaxdiag.monitoring.watchdog import Watchdog

            self._watchdog = Watchdog(self)
            self._watchdog.start()
        self.last_progress = time.monotonic()
        self._prev_end = time.perf_counter()
        self._started = True
        return self

    def _attach(self) -> None:
        """Open the stream and, in a ``jax.distributed`` run, join the others: at the first step's end.

        Not at start: under ``jaxdiag run --monitor`` the monitor starts before the script
        calls ``jax.distributed.initialize``, and only then is this process's index known
        (its stream's name, and whether process 0's duties are its own).
        """
        self.process_index, self.process_count = _process()
        self._stream = StreamWriter(self.logdir, self.process_index, self.flush_every)
        self.stream_path = self._stream.path
        self._windows = WindowKeeper(
            self.logdir / "windows",
            steps=self.capture_steps,
            max_windows=self.max_windows,
            budget_bytes=self.budget_bytes,
            reports=self.reports,
            process_index=self.process_index,
            process_count=self.process_count,
        )
        self._stream.event(
            {
                "event": "start",
                "schema": SCHEMA,
                "t": self._started_unix,
                "host": self.host,
                "pid": os.getpid(),
                "process": self.process_index,
                "processes": self.process_count,
                "warmup_steps": self.warmup_steps,
                "slow_factor": self.slow.factor,
                "capture_steps": self.capture_steps,
            }
        )
        if self.process_count > 1:
            from jaxdiag.monitoring.peers import Peers

            self._peers = Peers.connect(self, f"jaxdiag/monitor/m{_SEQUENCE[0]}")

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        stopped = time.time()
        if self._stream is None:
            self._attach()
        from jaxdiag.capturing import step_hooks
        from jaxdiag.recording import compile_log

        step_hooks.remove_listener(self)
        if self._calls is not None:
            self._calls.restore()
            self._calls = None
        self._end_annotation()
        if self._windows is not None and self._windows.open:
            if (self._windows.start_step or 0) > self._n:  # opened for a step that never came
                self._windows.discard()
            else:
                self._window_closed(self._windows.stop(self._n))
        if self._watchdog is not None:
            self._watchdog.stop()
        if self._peers is not None:
            self._peers.stop()
        compile_log.LOG.remove_collector(self._collector)
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
        assert self._stream is not None and self._windows is not None
        self._reports_done(self._windows.wait_reports(timeout_s=120.0))
        self._stream.event({"event": "stop", "t": stopped, "last_step": self.last_step})
        self._stream.close()

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- steps -----------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self) -> Iterator[int]:
        """Mark one step of a loop that has no other mark; yields its number."""
        self.step_begin()
        try:
            yield self._n + 1
        finally:
            self.step_end()

    def step_begin(self, n: int | None = None, source: Any = None, *, call: str | None = None) -> None:
        """A step begins (``step_hooks`` listener; also ``step()`` and the call wrapper).

        Steps are numbered by the monitor, from 0, whatever numbers their marks carry.
        The first mark seen is the one timed: marks nested in it (a ``@jaxdiag.step``
        call inside ``cap.step()``) are ignored, and marks of the program take the
        place of the call wrapper. A step begun while the one before never ended (it
        raised; or it is the call that compiled, when the wrapper was put in place)
        ends first.
        """
        source = _MARK if source is None else source
        if self._source is None or (call is None and self._calls is not None and self._source is self._calls.wrapper):
            if self._calls is not None and call is None:  # the program marks its steps: time those
                self._calls.restore()
                self._calls = None
            self._source = source
        if source is not self._source:
            return
        if self.entered is not None:
            self.step_end(source=source)
        self._begin = time.perf_counter()
        self.entered = self._n + 1
        self.entered_call = call

    def step_end(self, n: int | None = None, source: Any = None) -> None:
        """A step ended: time it, write its line, decide whether to capture the next steps."""
        end = time.perf_counter()
        if not self._started or (_MARK if source is None else source) is not self._source:
            return
        if self._stream is None:
            self._attach()
        n = self._n + 1
        self._n = n
        prev = self._prev_end if self._prev_end is not None else end
        wall_ms = (end - prev) * 1e3
        begin = self._begin
        gap_ms = None if begin is None or begin < prev else (begin - prev) * 1e3
        self._begin = None
        t = time.time()
        # The line is formatted by hand: json.dumps would be most of what a step pays.
        line = f'{{"step":{n},"t":{t:.6f},"wall_ms":{wall_ms:.4f}'
        if gap_ms is not None:
            line += f',"gap_ms":{gap_ms:.4f}'
        reason = None
        compile_ms = 0.0
        compiles = self._compiles
        if compiles:
            self._compiles = []
            compile_ms = sum(r.compile_s for r in compiles) * 1e3
            line += f',"compile_ms":{compile_ms:.3f},"compiles":{json.dumps([r.function for r in compiles])}'
            recompiled = [r for r in compiles if is_recompile(r)]
            if recompiled and n >= self.warmup_steps:
                line += f',"recompile":true,"recompiled":{json.dumps([r.function for r in recompiled])}'
                reason = recompile_reason(n, recompiled)
        window = self._windows
        assert window is not None and self._stream is not None
        in_window = window.open
        if in_window:
            line += f',"window":{window.count}'
        self._stream.step_text(line + "}")
        self.last_step, self.entered, self.entered_call = n, None, None
        self.last_end_unix = t
        self.last_progress = time.monotonic()
        recent = self.recent
        recent.append((n, wall_ms, gap_ms, compile_ms))
        if len(recent) > 4 * self.peer_every:
            del recent[: len(recent) - 2 * self.peer_every]
        if not in_window and not compiles:
            if n >= self.warmup_steps and n >= self._quiet_until and self.slow.is_slow(wall_ms):
                reason = slow_reason(n, wall_ms, gap_ms, self.slow)
            else:
                self.slow.add(wall_ms)
        every = self.every
        if reason is None and every is not None and n + 1 >= self.warmup_steps and (n + 1) % every == 0:
            self._scheduled.append((n + 1, f"scheduled capture (every {every} steps) from step {n + 1}"))
        elif reason is not None and not in_window and not self._scheduled:
            if self._peers is not None:
                self._peers.propose(n, reason)
            else:
                self._scheduled.append((n + 1, reason))
        if in_window or self._scheduled or window.building:
            self._windows_at(n)
        if self._peers is not None and (n + 1) % self.peer_every == 0:
            self._peers.stats_due(n)
        self._prev_end = time.perf_counter()

    def schedule(self, first_step: int, reason: str) -> None:
        """Capture from ``first_step`` on (called by ``peers`` with process 0's decision)."""
        with self._lock:
            self._scheduled.append((first_step, reason))

    def peer_event(self, event: dict[str, Any]) -> None:
        """Write an event seen by a background thread (a straggler) into the stream."""
        if self._stream is not None:
            self._stream.event(event)

    # --- windows ---------------------------------------------------------------------
    def _windows_at(self, n: int) -> None:
        """After step ``n``: close a window that has its steps; open one due at step ``n + 1``."""
        window = self._windows
        assert window is not None and self._stream is not None
        if window.open and n >= (window.last_step() or n):
            self._end_annotation()
            self._window_closed(window.stop(n))
            self._quiet_until = n + 1 + self.capture_steps
        due = None
        if not window.open and self._scheduled:
            with self._lock:
                self._scheduled.sort()
                if self._scheduled[0][0] <= n + 1:
                    due = self._scheduled.pop(0)
                    self._scheduled = [s for s in self._scheduled if s[0] > n + self.capture_steps]
        if due is not None:
            first, reason = due
            if first < n + 1:
                reason += f" (started {n + 1 - first} step(s) late, at step {n + 1})"
            if window.start(n + 1, reason):
                self._annotate(n + 1)
            else:  # the program's own capture has the profiler, or it would not start
                self._stream.event({"event": "window_skipped", "t": time.time(), "step": n + 1, "reason": reason})
        elif window.open:
            self._annotate(n + 1)
        if window.reports and window.building and (n + 1) % self.flush_every == 0:
            self._reports_done(window.finished_reports())

    def _reports_done(self, run_dirs: list[Path]) -> None:
        assert self._stream is not None and self._windows is not None
        for run_dir in run_dirs:
            self._device_times(run_dir)
        if run_dirs:
            for removed in self._windows.prune():
                self._stream.event({"event": "window_dropped", "t": time.time(), "run_dir": removed})

    def _window_closed(self, event: dict[str, Any] | None) -> None:
        assert self._stream is not None and self._windows is not None
        if event is None:
            return
        self.windows.append(event)
        self._stream.event(event)
        for removed in self._windows.prune():
            self._stream.event({"event": "window_dropped", "t": time.time(), "run_dir": removed})

    def _device_times(self, run_dir: Path) -> None:
        assert self._stream is not None
        by_step = device_ms_by_step(run_dir)
        if by_step:
            self._stream.event(
                {"event": "device_time", "run_dir": str(run_dir), "device_ms": {str(k): v for k, v in by_step.items()}}
            )

    def _annotate(self, n: int) -> None:
        """Open step ``n``'s annotation now: a captured step runs from the end of the one before."""
        import jax

        self._end_annotation()
        self._annotation = jax.profiler.StepTraceAnnotation(self.name, step_num=n)
        self._annotation.__enter__()

    def _end_annotation(self) -> None:
        if self._annotation is not None:
            annotation, self._annotation = self._annotation, None
            annotation.__exit__(None, None, None)

    # --- compiles (from the listener, on the compiling thread) -------------------------
    def compiled(self, record: Any) -> None:
        self._compiles.append(record)
        from jaxdiag.recording.host_check import entry

        try:
            fp = entry(record)["fp"]
        except Exception:  # noqa: BLE001
            fp = None
        self.last_compile = {"function": record.function, "compile": record.compile_index, "fp": fp}
        if self._calls is None and self.entered is None and self.last_step is None and record.origin != "jax-internal":
            from jaxdiag.monitoring.calls import CallSteps

            self._calls = CallSteps.find(self, record)
            if self._calls is not None:  # the call compiling now is the first step
                self._source = self._calls.wrapper
                self.entered, self.entered_call = self._n + 1, record.function
        elif self._calls is not None and self._calls.wants(record):
            self._calls.restore()
            from jaxdiag.monitoring.calls import CallSteps

            self._calls = CallSteps.find(self, record)
            self._source = None if self._calls is None else self._calls.wrapper


class _CompileTap:
    """A compile-log collector handing each record to the monitor (``CompileLog.add_collector``)."""

    def __init__(self, monitor: Monitor) -> None:
        self.records = _Discard()
        self.monitor = monitor

    def on_record(self, record: Any) -> None:
        try:
            self.monitor.compiled(record)
        except Exception as exc:  # noqa: BLE001 - never the user's compile
            _warn(f"jaxdiag.monitor: a compile was not seen: {type(exc).__name__}: {exc}")


class _Discard(list):  # type: ignore[type-arg]
    def append(self, item: Any) -> None:
        pass


def _process() -> tuple[int, int]:
    """This process's index and the process count (1 process when ``jax.distributed`` is not running)."""
    try:
        from jaxdiag import jax_internals

        if jax_internals.distributed_client() is None:
            return 0, 1
        import jax

        return jax.process_index(), jax.process_count()
    except Exception:  # noqa: BLE001
        return 0, 1


def _warn(message: str) -> None:
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    except Exception:  # noqa: BLE001
        pass


def monitor(logdir: str | os.PathLike[str], **settings: Any) -> Monitor:
    """Watch a training loop: time each step, capture when it goes wrong, catch hangs and stragglers.

    A context manager (``with jaxdiag.monitor(dir):``) and a start/stop object
    (``mon = jaxdiag.monitor(dir).start()`` ... ``mon.stop()``); ``settings`` are
    ``Monitor``'s keyword arguments.

    Raises:
      ConfigError: a setting out of range, or ``logdir`` cannot be written (on start).
      TypeError: an unknown setting.
    """
    return Monitor(logdir, **settings)
