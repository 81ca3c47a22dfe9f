"""``jaxdiag.profile``: a ``jax.profiler`` capture that writes its own sidecar.

Low overhead by default (the Python tracer is off unless asked for); every
``jax.profiler.ProfileOptions`` field stays reachable through ``options``. On
exit (normal or by exception) the trace is stopped and written, the sidecar is
written beside it, and the user's exception propagates unchanged. What the
sidecar says of the process and of the compiles is gathered by ``sidecar_facts``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping

from jaxdiag.capturing import sidecar, sidecar_facts
from jaxdiag.errors import CaptureError

_ACTIVE_LOCK = threading.RLock()  # re-entered by the SIGTERM handler when the signal lands inside start or stop
_active: "Capture | None" = None


class Capture:
    """One profiler session, and the per-step facts recorded while it runs.

    Use ``jaxdiag.profile(...)`` rather than building one directly.
    """

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        *,
        run: str | None = None,
        python_tracer: bool = False,
        options: Mapping[str, Any] | Any | None = None,
        tags: Mapping[str, Any] | None = None,
        mesh: Any | None = None,
        watch: bool = True,
    ) -> None:
        self.logdir = Path(logdir)
        self.run = run
        self.python_tracer = python_tracer
        self.options = options
        self.tags = dict(tags or {})
        self.mesh = mesh
        self.watch = watch
        self._watch: Any = None
        self.steps: dict[int, dict[str, float]] = {}
        self.run_dir: Path | None = None
        self._started_unix: float | None = None
        self._process_index = 0
        self._process_count = 1
        self._before: set[Path] = set()

    # --- recording -----------------------------------------------------------
    def record_step(
        self, step: int, *, tokens: float | None = None, samples: float | None = None, flops: float | None = None
    ) -> None:
        """Remember what ``step`` processed; written into the sidecar at stop."""
        facts = {k: float(v) for k, v in (("tokens", tokens), ("samples", samples), ("flops", flops)) if v is not None}
        if facts:
            self.steps.setdefault(int(step), {}).update(facts)

    # --- lifecycle -----------------------------------------------------------
    def start(self) -> "Capture":
        global _active
        import jax

        with _ACTIVE_LOCK:
            if _active is not None:
                raise CaptureError(
                    f"a jaxdiag capture into {_active.logdir} is already running; nested captures are not "
                    "supported (close the outer one first)"
                )
            _check_writable(self.logdir)
            self._process_index = jax.process_index()
            self._process_count = jax.process_count()
            self.run = self.run or _shared_run_name(self._process_count)
            self._before = _run_folders(self.logdir)
            opts = self._profile_options()
            kwargs = {} if opts is None else {"profiler_options": opts}
            # jaxdiag's own set-up comes before the trace starts: the first recorder of a process
            # imports its modules (about 30 ms), which the trace would show as the user's Python
            # leaving the devices idle at the first step.
            self._analysis_was = sidecar_facts.analysis_on()
            if self.watch:
                self._watch = sidecar_facts.start_watch()
            try:
                jax.profiler.start_trace(str(self._trace_dir()), **kwargs)
            except BaseException as exc:
                sidecar_facts.stop_watch(self._watch)
                self._watch = None
                sidecar_facts.restore_analysis(self._analysis_was)
                if isinstance(exc, RuntimeError):
                    raise CaptureError(f"cannot start the profiler: {exc}") from None
                raise
            self._started_unix = time.time()
            _active = self
            self._mark_started()
            self._stop_on_sigterm()
        return self

    def stop(self) -> Path:
        """Wait for the queued device work, stop the trace, write it and the sidecar; returns the run folder.

        A loop that never reads a value has queued steps the devices have not run
        yet when it stops; stopping the trace then would leave those steps with no
        device work in it. So the capture waits for every live array first.
        """
        global _active
        import jax

        with _ACTIVE_LOCK:
            if _active is not self:
                raise CaptureError("this capture is not running")
            _drain_devices()
            _active = None
            self._restore_sigterm()
            records = sidecar_facts.stop_watch(self._watch)
            self._watch = None
            sidecar_facts.restore_analysis(getattr(self, "_analysis_was", None))
            try:
                jax.profiler.stop_trace()
            finally:
                stopped = time.time()
                self.run_dir = self._place_host_file()
                self._write_sidecar(stopped, records)
        return self.run_dir

    @property
    def running(self) -> bool:
        """Whether this capture is started and not yet stopped."""
        return _active is self

    # --- an end by signal -------------------------------------------------------
    def _mark_started(self) -> None:
        """Write a sidecar that says the capture started, so that a folder left by a killed
        program (SIGKILL, a crash: no trace is written) says so rather than look empty."""
        run_dir = self.logdir / "plugins" / "profile" / str(self.run)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            sidecar.write_sidecar(
                run_dir,
                {
                    "host": socket.gethostname(),
                    "process_index": self._process_index,
                    "process_count": self._process_count,
                    "started_unix": self._started_unix,
                    "stopped_unix": None,
                },
            )
        except Exception:  # the stop writes the sidecar again; this one only explains a kill
            pass

    def _stop_on_sigterm(self) -> None:
        """While capturing, SIGTERM stops the capture (the trace so far is written) and then does
        what it did before: the previous handler, or the default (the program ends)."""
        self._sigterm: tuple[Any, Any] | None = None
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers
        try:
            previous = signal.getsignal(signal.SIGTERM)
        except (AttributeError, ValueError):
            return

        def on_sigterm(signum: int, frame: Any) -> None:
            if _active is self:
                try:
                    self.stop()
                except Exception:
                    pass
            _chain(previous, signum, frame)

        try:
            signal.signal(signal.SIGTERM, on_sigterm)
        except (OSError, ValueError):
            return
        self._sigterm = (on_sigterm, previous)

    def _restore_sigterm(self) -> None:
        installed = getattr(self, "_sigterm", None)
        self._sigterm = None
        if installed is None:
            return
        ours, previous = installed
        try:
            if signal.getsignal(signal.SIGTERM) is ours:  # a handler set since is the program's: left alone
                signal.signal(signal.SIGTERM, previous)
        except (OSError, ValueError):  # stopped from another thread: the handler stays, and does nothing
            pass

    # --- helpers ---------------------------------------------------------------
    def _trace_dir(self) -> Path:
        # The logdir given to jax.profiler. Processes on one machine would all write
        # "<hostname>.xplane.pb" into one run folder, and some JAX releases ignore
        # ProfileOptions.session_id and name that folder by the second: each process
        # stages its trace in a logdir of its own, moved into the run at stop.
        if self._process_count == 1:
            return self.logdir
        return self.logdir / f".jaxdiag-staging-{self.run}-p{self._process_index}"

    def _profile_options(self) -> Any:
        from jaxdiag import jax_internals

        options = jax_internals.profile_options()
        if options is None:  # this JAX takes no options: its defaults
            jax_internals.warn_lost("profile_options")
            return None
        opts = options()
        opts.python_tracer_level = 1 if self.python_tracer else 0
        given = self.options
        if given is not None and not isinstance(given, Mapping):
            opts = given  # a ProfileOptions built by the caller
        elif given:
            for key, value in given.items():
                if not hasattr(opts, key):
                    raise CaptureError(
                        f"unknown profiler option {key!r}; ProfileOptions has "
                        f"{sorted(a for a in dir(opts) if not a.startswith('_'))}"
                    )
                setattr(opts, key, value)
        opts.session_id = str(self.run)
        return opts

    def _place_host_file(self) -> Path:
        profile_dir = self.logdir / "plugins" / "profile"
        run_dir = profile_dir / str(self.run)
        if self._process_count == 1:
            new = sorted(_run_folders(self.logdir) - self._before - {run_dir})
            if len(new) == 1:  # session_id ignored: the folder is JAX's timestamp
                if not run_dir.exists():
                    new[0].rename(run_dir)
                else:  # it holds the sidecar written at start
                    for f in new[0].iterdir():
                        os.replace(f, run_dir / f.name)
                    with contextlib.suppress(OSError):
                        new[0].rmdir()
            return run_dir
        staging = self._trace_dir()
        run_dir.mkdir(parents=True, exist_ok=True)
        for f in staging.glob("plugins/profile/*/*"):
            host, _, rest = f.name.partition(".")
            os.replace(f, run_dir / f"{host}-p{self._process_index}.{rest}")
        shutil.rmtree(staging, ignore_errors=True)
        return run_dir

    def _write_sidecar(self, stopped_unix: float, records: list[dict[str, Any]] | None) -> None:
        try:
            content = sidecar_facts.describe_process(self.mesh)
            content.update(
                process_index=self._process_index,
                process_count=self._process_count,
                started_unix=self._started_unix,
                stopped_unix=stopped_unix,
                python_tracer=self.python_tracer,
                steps={str(k): v for k, v in sorted(self.steps.items())},
                compile_log=sidecar_facts.with_earlier(
                    records
                    if records is not None
                    else sidecar_facts.compile_records_between(self._started_unix or 0.0, stopped_unix),
                    self._started_unix or 0.0,
                ),
                tags=self.tags,
            )
            if self.run_dir is not None and self.run_dir.is_dir():
                sidecar.write_sidecar(self.run_dir, content)
        except Exception as exc:  # the trace is written; a sidecar failure must not hide it
            warnings.warn(f"jaxdiag: the capture sidecar was not written: {exc}", RuntimeWarning, stacklevel=3)


@contextlib.contextmanager
def profile(
    logdir: str | os.PathLike[str],
    *,
    run: str | None = None,
    python_tracer: bool = False,
    options: Mapping[str, Any] | Any | None = None,
    tags: Mapping[str, Any] | None = None,
    mesh: Any | None = None,
    watch: bool = True,
) -> Iterator[Capture]:
    """Capture a ``jax.profiler`` trace of the enclosed code, with a jaxdiag sidecar.

    Args:
      logdir: folder for ``plugins/profile/<run>/`` (created if missing).
      run: the run folder name (default: a timestamp, shared by every process).
      python_tracer: record Python frames too (costly: off by default).
      options: ``jax.profiler.ProfileOptions`` fields by name, or a ``ProfileOptions``.
      tags: free-form facts to keep in the sidecar (model name, git commit, ...).
      mesh: the ``jax.sharding.Mesh`` the run uses, recorded in the sidecar.
      watch: record every compile in the process while capturing (``jaxdiag.watch``),
        whatever wrapper made it, so the report can say why each one happened.

    Yields:
      the running ``Capture``; call ``record_step(step, tokens=...)`` on it.

    Raises:
      CaptureError: the logdir cannot be written, or a capture is already running.
    """
    capture = Capture(logdir, run=run, python_tracer=python_tracer, options=options, tags=tags, mesh=mesh, watch=watch)
    capture.start()
    try:
        yield capture
    finally:
        if capture.running:  # not stopped already by SIGTERM
            capture.stop()


def _chain(previous: Any, signum: int, frame: Any) -> None:
    """Do what ``signum`` did before jaxdiag's handler: call the handler, ignore it, or end the program."""
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:  # the default (or a handler set outside Python): end as it would have
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def active() -> Capture | None:
    """The capture running now, if any."""
    return _active


def _run_folders(logdir: Path) -> set[Path]:
    """The run folders under ``logdir/plugins/profile`` now."""
    try:
        return {p for p in (logdir / "plugins" / "profile").iterdir() if p.is_dir()}
    except OSError:
        return set()


def _check_writable(logdir: Path) -> None:
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        probe = logdir / f".jaxdiag-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise CaptureError(f"{logdir}: cannot write a trace here ({exc.strerror or exc})") from None


def _shared_run_name(process_count: int) -> str:
    stamp = int(time.time())
    if process_count > 1:  # every process must write into the same run folder
        try:
            import numpy as np
            from jax.experimental import multihost_utils

            stamp = int(multihost_utils.broadcast_one_to_all(np.int64(stamp)))
        except Exception as exc:  # pragma: no cover - depends on the cluster
            warnings.warn(
                f"jaxdiag: could not agree on a run name across processes ({exc}); pass run=... to profile()",
                RuntimeWarning,
                stacklevel=4,
            )
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(stamp))


def _drain_devices() -> None:
    """Wait until the work queued on the devices has run (effects, then every live array).

    An array deleted meanwhile (donated) or one whose computation failed is
    skipped: the failure is the program's to report, not the capture's.
    """
    try:
        import jax

        jax.effects_barrier()
        arrays = jax.live_arrays()
    except Exception:  # noqa: BLE001 - instrumentation never breaks the program
        return
    for array in arrays:
        try:
            array.block_until_ready()
        except Exception:  # noqa: BLE001
            pass
