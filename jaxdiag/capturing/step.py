"""``@jaxdiag.step``: one decorator on the train step for a full diagnosis.

It jits the function (through ``jaxdiag.jit``, so every compile is recorded and
explained), numbers the calls, opens the capture at ``profile_steps[0]`` and
closes it before ``profile_steps[1]``, annotates each captured step, and records
tokens, samples and flops per step into the capture's sidecar. A step's
annotation covers its call (the last captured one also its device work); the
report's steps tile the run from these marks (``trace.steps``), so the data
loading and eager conversions before call N, and the compile call N triggers,
belong to step N, not to step N-1 that ran before them.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from jaxdiag.capturing import step_hooks
from jaxdiag.capturing.window import StepWindow

#: The window captured when ``logdir`` is given without ``profile_steps``:
#: skip the first call (it compiles), then take ten steps.
DEFAULT_PROFILE_STEPS = (1, 11)

Count = float | Callable[..., float] | None


class StepFunction:
    """A jitted train step that numbers, annotates and captures its calls."""

    def __init__(
        self,
        fun: Callable[..., Any],
        *,
        tokens: Count,
        samples: Count,
        flops: Count,
        window: StepWindow | None,
        name: str,
        jit: bool,
        jit_kwargs: dict[str, Any],
    ) -> None:
        if jit:
            from jaxdiag.recording.wrapper import jit as jaxdiag_jit

            self.jitted = jaxdiag_jit(fun, **jit_kwargs)
        else:
            self.jitted = fun
        functools.update_wrapper(self, fun)
        self.tokens, self.samples, self.flops = tokens, samples, flops
        self.window = window
        self.name = name
        self.step_num = 0
        self._annotation: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        n = self.step_num
        window = self.window
        capturing = window is not None and window.open_if_due(n)
        if capturing:
            import jax

            self._end_annotation()
            self._annotation = jax.profiler.StepTraceAnnotation(self.name, step_num=n)
            self._annotation.__enter__()
        if step_hooks.LISTENERS:
            step_hooks.began(n, self)
        try:
            out = self.jitted(*args, **kwargs)
        except BaseException:
            self.close()  # the trace so far is written; the error propagates as is
            raise
        finally:
            self.step_num = n + 1
        if step_hooks.LISTENERS:
            step_hooks.ended(n, self)
        if capturing and window is not None and window.capture is not None:
            window.capture.record_step(
                n,
                tokens=_count(self.tokens, args, kwargs),
                samples=_count(self.samples, args, kwargs),
                flops=_count(self.flops, args, kwargs),
            )
            if window.due_to_close(n + 1):
                _block(out)  # the last step ends where its device work ends
                self.close()
                return out
        self._end_annotation()
        return out

    def close(self) -> Any:
        """End the last step annotation and stop the capture; returns the run folder."""
        self._end_annotation()
        return self.window.close() if self.window is not None else None

    @property
    def run_dir(self) -> Any:
        """The run folder of the closed capture window, or ``None``."""
        return self.window.run_dir if self.window is not None else None

    def _end_annotation(self) -> None:
        if self._annotation is not None:
            annotation, self._annotation = self._annotation, None
            annotation.__exit__(None, None, None)

    def __getattr__(self, name: str) -> Any:  # .lower, .trace, .eval_shape, ...
        return getattr(self.__dict__["jitted"], name)


def step(
    fun: Callable[..., Any] | None = None,
    *,
    tokens: Count = None,
    samples: Count = None,
    flops: Count = None,
    logdir: str | os.PathLike[str] | None = None,
    profile_steps: tuple[int, int] | None = None,
    name: str = "train",
    python_tracer: bool = False,
    options: Any = None,
    tags: dict[str, Any] | None = None,
    mesh: Any = None,
    jit: bool = True,
    **jit_kwargs: Any,
) -> Any:
    """Decorate a train step: jit it, number and annotate its calls, capture a window.

    Args:
      fun: the train step.
      tokens, samples, flops: per-step counts: a number, or a function of the
        step's arguments (``tokens=lambda state, batch: batch["ids"].size``).
      logdir: where to write the capture; without it nothing is profiled.
      profile_steps: ``(start, stop)``, the calls to capture, stop exclusive
        (default ``DEFAULT_PROFILE_STEPS`` when ``logdir`` is given).
      name: the step annotation name.
      python_tracer, options, tags, mesh: as for ``jaxdiag.profile``.
      jit: jit the function with ``jaxdiag.jit`` (set False if it is jitted already).
      **jit_kwargs: passed to ``jaxdiag.jit`` (``donate_argnums``, ``static_argnames``, ...).
    """
    if fun is None:
        return functools.partial(
            step,
            tokens=tokens,
            samples=samples,
            flops=flops,
            logdir=logdir,
            profile_steps=profile_steps,
            name=name,
            python_tracer=python_tracer,
            options=options,
            tags=tags,
            mesh=mesh,
            jit=jit,
            **jit_kwargs,
        )
    window = None
    if logdir is not None:
        start, stop = profile_steps or DEFAULT_PROFILE_STEPS
        window = StepWindow(logdir, start, stop, python_tracer=python_tracer, options=options, tags=tags, mesh=mesh)
    return StepFunction(
        fun, tokens=tokens, samples=samples, flops=flops, window=window, name=name, jit=jit, jit_kwargs=jit_kwargs
    )


def _count(value: Count, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float | None:
    if value is None:
        return None
    if callable(value):
        value = value(*args, **kwargs)
    return None if value is None else float(value)


def _block(out: Any) -> None:
    """Wait for the last captured step so its device work lands in the trace."""
    try:
        import jax

        jax.block_until_ready(out)
    except Exception:  # deleted (donated) or non-array outputs: nothing to wait for
        pass
