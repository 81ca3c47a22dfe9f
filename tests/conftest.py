"""Session fixtures shared by every test folder.

``XLA_FLAGS`` is set before anything imports jax so that tests see 8 CPU devices, and
``every_compile_is_a_record`` checks in every test that jaxdiag makes one record of each
compile it is recording (``compile_count`` says which).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tests import compile_count  # noqa: E402

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

    def load_batch_idle_ms(self) -> dict[int, float]:
        """Per step, the ms inside ``load_batch`` with no execution in flight or queued, read with ``ProfileData``
        alone: an execution is pending from the start of the call that launched it (the latest outermost
        ``PjitFunction(f)`` before its first op) to its last op.

        Less than the sleep when the previous step's unread ``tiny_soup`` still runs, or waits to run,
        into it, as on a loaded machine: the planted host waits are held to this, not to the sleep.
        """
        from tests.analyses.trace_truth import load_batch_idle_ns

        (path,) = self.run_dir.glob("*.xplane.pb")
        return {step: ns / 1e6 for step, ns in load_batch_idle_ns(path)}


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


_listening = False


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
        monitoring.register_event_duration_secs_listener(compile_count.on_duration)
        _listening = True
    collector = compile_log.Collector()
    collector.records = compile_count.CountingRecords()
    compile_log.LOG.add_collector(collector)
    count = compile_count.COUNT
    with count.lock:
        count.active, count.compiles, count.records = True, [], []
    try:
        yield
    finally:
        compile_log.LOG.remove_collector(collector)
        with count.lock:
            count.active = False
            compiles, records = count.compiles, count.records
    problem = compile_count.mismatch(compiles, records)
    if problem is not None and request.node.get_closest_marker("compile_count_unchecked") is None:
        pytest.fail(problem, pytrace=False)
