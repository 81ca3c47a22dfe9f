"""``jaxdiag.capture``: number steps, annotate each, and profile a window of them.

    with jaxdiag.capture("logs/", skip=10, take=5) as cap:
        for batch in data:
            with cap.step(tokens=batch.size):
                state = train_step(state, batch)

Steps before ``skip`` and after ``skip + take`` run untraced (an integer
increment each); the steps in the window are wrapped in
``StepTraceAnnotation(name, step_num=n)`` so the report can break them down.
The report's steps tile the window (``trace.steps``): the time between two
``cap.step()`` blocks, where a loop loads its next batch, belongs to the step
after it, so no stall between blocks goes unreported.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import warnings
import weakref
from pathlib import Path
from typing import Any, Iterator, Mapping

from jaxdiag.capturing import step_hooks
from jaxdiag.capturing.profile import Capture
from jaxdiag.errors import ConfigError


class StepWindow:
    """Opens a ``Capture`` at step ``start`` and closes it before step ``stop``."""

    def __init__(self, logdir: str | os.PathLike[str], start: int, stop: int | None, **capture_kwargs: Any) -> None:
        if start < 0 or (stop is not None and stop <= start):
            raise ConfigError(f"capture window [{start}, {stop}) is empty or negative: give 0 <= start < stop")
        self.logdir = logdir
        self.start = start
        self.stop = stop
        self.capture_kwargs = capture_kwargs
        self.capture: Capture | None = None
        self.run_dir: Path | None = None
        self.last_step: int | None = None
        self._finalizer = weakref.finalize(self, _close_at_exit, weakref.ref(self))
        atexit.register(self._finalizer)

    def open_if_due(self, step: int) -> bool:
        """Start the capture when ``step`` is the window's first; True while capturing."""
        self.last_step = step
        if self.capture is None and self.run_dir is None and step == self.start:
            self.capture = Capture(self.logdir, **self.capture_kwargs).start()
        return self.capture is not None

    def due_to_close(self, next_step: int) -> bool:
        return self.capture is not None and self.stop is not None and next_step >= self.stop

    def close(self) -> Path | None:
        """Stop the capture if it is running; warn when the window never opened."""
        if self.capture is not None:
            capture, self.capture = self.capture, None
            self.run_dir = capture.stop() if capture.running else capture.run_dir  # SIGTERM may have stopped it
        elif self.run_dir is None and self.last_step is not None and self.last_step < self.start:
            warnings.warn(
                f"jaxdiag: the capture window starting at step {self.start} never opened: "
                f"the last step was {self.last_step}",
                RuntimeWarning,
                stacklevel=3,
            )
            self.last_step = None  # warn once
        return self.run_dir


def _close_at_exit(ref: "weakref.ref[StepWindow]") -> None:
    window = ref()
    if window is not None and window.capture is not None:
        window.close()


class StepCapture:
    """Per-step annotation and window bookkeeping; see ``capture``."""

    def __init__(self, window: StepWindow, name: str, check_hosts: Any = False) -> None:
        self.window = window
        self.name = name
        self.step_num = 0
        self._watch: Any = None
        if check_hosts:  # compiles are recorded (and checked across processes) from the first step on
            from jaxdiag.recording.watch import watch

            self._watch = watch(check_hosts=check_hosts)
            self._watch.__enter__()

    @contextlib.contextmanager
    def step(
        self, *, tokens: float | None = None, samples: float | None = None, flops: float | None = None
    ) -> Iterator[int]:
        """Run one step; yields its number. Facts go into the sidecar."""
        import jax

        n = self.step_num
        if self._watch is not None:
            self._watch.host_check.step = n
        capturing = self.window.open_if_due(n)
        annotation = jax.profiler.StepTraceAnnotation(self.name, step_num=n) if capturing else contextlib.nullcontext()
        if step_hooks.LISTENERS:
            step_hooks.began(n, self)
        try:
            with annotation:
                yield n
        except BaseException:
            self.window.close()  # the trace so far is written; the error propagates as is
            raise
        finally:
            self.step_num = n + 1
        if step_hooks.LISTENERS:
            step_hooks.ended(n, self)
        if capturing and self.window.capture is not None:
            self.window.capture.record_step(n, tokens=tokens, samples=samples, flops=flops)
        if self.window.due_to_close(n + 1):
            self.window.close()

    @property
    def run_dir(self) -> Path | None:
        """The run folder once the window has closed."""
        return self.window.run_dir

    def close(self) -> Path | None:
        if self._watch is not None:
            watching, self._watch = self._watch, None
            watching.__exit__(None, None, None)
        return self.window.close()

    def __enter__(self) -> "StepCapture":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def capture(
    logdir: str | os.PathLike[str],
    *,
    skip: int = 0,
    take: int | None = 10,
    name: str = "train",
    python_tracer: bool = False,
    options: Mapping[str, Any] | Any | None = None,
    tags: Mapping[str, Any] | None = None,
    mesh: Any | None = None,
    run: str | None = None,
    check_hosts: Any = False,
) -> StepCapture:
    """Profile steps ``skip`` to ``skip + take - 1`` of a training loop.

    Args:
      logdir: where the trace and its sidecar go.
      skip: steps to run untraced first (compile and warm-up).
      take: steps to capture (``None``: until ``close()``).
      name: the step annotation name.
      python_tracer, options, tags, mesh, run: as for ``jaxdiag.profile``.
      check_hosts: record every compile from the first step on and compare it
        with the other processes' (``True`` warns, ``"raise"`` raises), as
        ``jaxdiag.watch(check_hosts=...)``; until ``close()``.
    """
    stop = None if take is None else skip + take
    window = StepWindow(logdir, skip, stop, run=run, python_tracer=python_tracer, options=options, tags=tags, mesh=mesh)
    return StepCapture(window, name, check_hosts)
