"""Session fixtures shared by every test folder.

``XLA_FLAGS`` is set before anything imports jax so that tests see 8 CPU devices, and
``every_compile_is_a_record`` checks in every test that jaxdiag records each compile it is recording.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import collections  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import types  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

#: The real H100 traces (``README.md`` says which tests need them): ``$JAXDIAG_FIXTURES``,
#: else ``shared/fixtures`` beside the checkout.
SHARED_FIXTURES = Path(
    os.environ.get("JAXDIAG_FIXTURES") or Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
)


@dataclasses.dataclass(frozen=True)
class CpuTrace:
    """A real CPU capture made by ``cpu_trace_dir``, with what was planted in it.

    Attributes:
      logdir: the folder given to ``jax.profiler.start_trace``.
      run_dir: its ``plugins/profile/<run>`` folder.
      steps: number of ``StepTraceAnnotation("train", step_num=i)`` steps, numbered from 0.
      recompile_step: the step whose new batch shape recompiles ``train_step``.
      sleep_steps: steps with a ``TraceAnnotation("load_batch")`` around a sleep.
      sleep_s: the length of each sleep.
      soup_ops: HLO ops per ``tiny_soup`` execution (about 2 per unrolled iteration).
      step_module: the HLO module name of the training step.
      soup_module: the HLO module name of the small-op soup.
    """

    logdir: Path
    run_dir: Path
    steps: int = 6
    recompile_step: int = 3
    sleep_steps: tuple[int, ...] = (1, 4)
    sleep_s: float = 0.02
    soup_ops: int = 200
    step_module: str = "jit_train_step"
    soup_module: str = "jit_tiny_soup"


def _capture(logdir: Path, truth: CpuTrace) -> None:
    """Run a small real training loop under ``jax.profiler`` with the planted problems."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def train_step(w, x, y):
        def loss_fn(w):
            return jnp.mean((jnp.tanh(x @ w) - y) ** 2)

        loss, grad = jax.value_and_grad(loss_fn)(w)
        return w - 0.1 * grad, loss

    @jax.jit
    def tiny_soup(v):
        # cumsum does not fuse, so each iteration stays two tiny ops (reduce-window + fusion).
        for i in range(truth.soup_ops // 2):
            v = jnp.cumsum(v) * 0.5 + i
        return v

    def batch(rows: int):
        return jnp.ones((rows, 64)), jnp.zeros((rows, 64))

    w = jnp.zeros((64, 64))
    w, _ = train_step(w, *batch(32))
    tiny_soup(jnp.ones(16)).block_until_ready()
    jax.profiler.start_trace(str(logdir))
    try:
        for i in range(truth.steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                if i in truth.sleep_steps:
                    with jax.profiler.TraceAnnotation("load_batch"):
                        time.sleep(truth.sleep_s)
                x, y = batch(32 if i < truth.recompile_step else 48)
                w, loss = train_step(w, x, y)
                tiny_soup(jnp.ones(16))
                float(loss)
    finally:
        jax.profiler.stop_trace()


@pytest.fixture(scope="session")
def cpu_trace_dir(tmp_path_factory: pytest.TempPathFactory) -> CpuTrace:
    """A real CPU ``jax.profiler`` capture, made once per session (about 2 s)."""
    logdir = tmp_path_factory.mktemp("cpu_trace")
    truth = CpuTrace(logdir=logdir, run_dir=logdir)
    _capture(logdir, truth)
    runs = sorted((logdir / "plugins" / "profile").iterdir())
    return dataclasses.replace(truth, run_dir=runs[-1])


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """The folder of real H100 traces (``$JAXDIAG_FIXTURES``); skips when absent."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"shared H100 traces not present at {SHARED_FIXTURES} (set JAXDIAG_FIXTURES)")
    return SHARED_FIXTURES


@dataclasses.dataclass(frozen=True)
class MatmulCapture:
    """A ``jaxdiag.profile`` capture of a matmul step, with what the compiler said about it.

    Attributes:
      logdir, run_dir: as in ``CpuTrace``.
      steps: ``StepTraceAnnotation("train", step_num=i)`` steps, one ``step`` call each.
      flops: ``cost_analysis()["flops"]`` of the compiled ``step``.
      memory: ``memory_analysis()`` of the compiled ``step`` as a dict of the recorded fields.
    """

    logdir: Path
    run_dir: Path
    steps: int
    flops: float
    memory: dict


@pytest.fixture(scope="session")
def matmul_capture(tmp_path_factory: pytest.TempPathFactory) -> MatmulCapture:
    """A real capture of 4 steps of ``tanh(x @ w)`` (512 x 512, f32) under ``jaxdiag.profile``."""
    import jax
    import jax.numpy as jnp

    import jaxdiag
    from jaxdiag.recording import compile_log

    compile_log.configure(analysis=None)  # the default, whatever earlier tests chose

    @jax.jit
    def step(w, x):
        return jnp.tanh(x @ w)

    w, x = jnp.ones((512, 512)), jnp.ones((512, 512))
    logdir = tmp_path_factory.mktemp("matmul")
    steps = 4
    with jaxdiag.profile(logdir) as capture:
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                step(w, x).block_until_ready()
    compiled = step.lower(w, x).compile()
    stats = compiled.memory_analysis()
    memory = {
        "argument_bytes": stats.argument_size_in_bytes,
        "output_bytes": stats.output_size_in_bytes,
        "temp_bytes": stats.temp_size_in_bytes,
        "generated_code_bytes": stats.generated_code_size_in_bytes,
    }
    return MatmulCapture(logdir, Path(capture.run_dir), steps, float(compiled.cost_analysis()["flops"]), memory)


# --- every compile is a record -------------------------------------------------------
#
# jaxdiag promises that each backend compile it is recording is one record. Counted
# for every test: a compile is "being recorded" when ``jaxdiag.watch()`` records
# everything (JAX's own helpers included), or when the function it compiles is a
# ``jaxdiag.jit`` function: the nearest jit call on the stack is one (a plain call, or
# grad's forward and vmap's batched program under it), or a transformed compile with
# no call left on the stack (grad's backward pass) comes from the source of one. The
# check reads JAX's frames, not jaxdiag's matching, so a compile jaxdiag misses shows.
# Nothing here imports jax or jaxdiag: a test that never imports jax is not checked,
# nor is the one that first imports it (the listener is registered at setup).

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_JIT_CALL_FRAMES = ("cache_miss", "call_impl_cache_miss")


class _CompileCount:
    """The backend compiles jaxdiag was recording, and its records, over one test."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = False
        self.compiles: list[str] = []
        self.records: list[str] = []
        #: ``jit_info.fun_sourceinfo`` of the ``jaxdiag.jit`` functions seen compiling.
        self.jaxdiag_sources: set[str] = set()


_COUNT = _CompileCount()
_listening = False


def _recording_everything() -> bool:
    listener, watch = sys.modules.get("jaxdiag.recording.listener"), sys.modules.get("jaxdiag.recording.watch")
    if listener is None or watch is None or listener.mode() != "frames":
        return False
    recorders = getattr(watch, "_RECORDERS", {})
    return recorders.get(True) is not None and listener.get_watch() is recorders[True]


def _is_jaxdiag_jit(fun: object) -> bool:
    try:
        return getattr(fun, "__jaxdiag_hooks__", None) is not None
    except Exception:
        return False


def _jaxdiag_function_compiling() -> bool:
    """Whether the compile under way is of a ``jaxdiag.jit`` function, read from JAX's own frames."""
    frame: types.FrameType | None = sys._getframe(2)
    transformed = None
    while frame is not None:
        code = frame.f_code
        if code.co_name in _JIT_CALL_FRAMES and frame.f_globals.get("__name__") == "jax._src.pjit":
            local = frame.f_locals
            if code.co_name == "cache_miss":
                if not _is_jaxdiag_jit(local.get("fun")):
                    return False
                source = getattr(local.get("jit_info"), "fun_sourceinfo", None)
                if isinstance(source, str):
                    _COUNT.jaxdiag_sources.add(source)
                return True
            if transformed is None:
                transformed = local
        elif code.co_name == "compile" and frame.f_globals.get("__name__") == "jax._src.stages":
            return False  # ahead of time: the user's own request, recorded only under watch
        frame = frame.f_back
    if transformed is None:
        return False
    info = getattr(getattr(transformed.get("jaxpr"), "jaxpr", None), "debug_info", None)
    return getattr(info, "func_src_info", None) in _COUNT.jaxdiag_sources


def _compile_raised() -> bool:
    """Whether the backend compile being reported failed: JAX times it in a ``with`` whose exit sees the error."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__exit__" and frame.f_globals.get("__name__") == "jax._src.dispatch":
            return frame.f_locals.get("exc_type") is not None
        frame = frame.f_back
    return False


def _on_duration(event: str, duration: float, **kwargs: object) -> None:
    if event != COMPILE_EVENT or not _COUNT.active:
        return
    if not _compile_raised() and (_recording_everything() or _jaxdiag_function_compiling()):
        with _COUNT.lock:
            _COUNT.compiles.append(str(kwargs.get("fun_name")))


class _CountingRecords(list):
    """A collector's record list that counts the records made of compiles being recorded."""

    def append(self, record: object) -> None:
        super().append(record)
        if _COUNT.active and (getattr(record, "origin", None) == "jit" or _recording_everything()):
            with _COUNT.lock:
                _COUNT.records.append(str(getattr(record, "function", "?")))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "compile_count_unchecked: the test breaks recording on purpose; its records need not match JAX's compile count",
    )


@pytest.fixture(autouse=True)
def every_compile_is_a_record(request: pytest.FixtureRequest):
    """Fail a test in which jaxdiag recorded a number of compiles other than JAX's backend compiles."""
    global _listening
    if "jax" not in sys.modules:
        yield
        return
    from jax import monitoring

    from jaxdiag.recording import compile_log

    if not _listening:
        monitoring.register_event_duration_secs_listener(_on_duration)
        _listening = True
    collector = compile_log.Collector()
    collector.records = _CountingRecords()
    compile_log.LOG.add_collector(collector)
    with _COUNT.lock:
        _COUNT.active, _COUNT.compiles, _COUNT.records = True, [], []
    try:
        yield
    finally:
        compile_log.LOG.remove_collector(collector)
        with _COUNT.lock:
            _COUNT.active = False
            compiles, records = _COUNT.compiles, _COUNT.records
    if request.node.get_closest_marker("compile_count_unchecked") is None:
        missing = collections.Counter(_bare(name) for name in compiles) - collections.Counter(records)
        extra = collections.Counter(records) - collections.Counter(_bare(name) for name in compiles)
        assert len(records) == len(compiles), (
            f"jaxdiag recorded {len(records)} compiles where JAX reported {len(compiles)} backend compiles "
            f"({COMPILE_EVENT}); compiled without a record: {dict(missing) or 'none by name'}; "
            f"records without a compile: {dict(extra) or 'none by name'}"
        )


def _bare(fun_name: str) -> str:
    return fun_name[4:-1] if fun_name.startswith("jit(") and fun_name.endswith(")") else fun_name
