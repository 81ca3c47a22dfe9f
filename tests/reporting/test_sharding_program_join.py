"""Timeline collectives joined to the compile that ran them, when a function compiles again in the window.

``reduce_step`` compiles during warm-up with ``a`` split over the mesh (its sum is
all-reduced), then compiles again inside the captured window with ``b`` split
instead: one module, one op name, two programs moving different arrays. Each
collective on the timeline must be attributed to the compile that ran it. The
truth is read from the trace with jaxlib's ``ProfileData`` alone: the
``program_id`` stat on the collective op events, the first program to run being
the warm-up compile's.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax._src.lib import _profile_data
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdiag
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.analyses.sharding import JOINED_BY_MODULE, JOINED_BY_PROGRAM, analyze
from jaxdiag.capturing.sidecar import read_sidecars
from jaxdiag.recording import compile_log
from jaxdiag.reporting.build import report

MODULE = "jit_reduce_step"
STEPS, SKIP, SWITCH = 7, 2, 5  # steps SKIP.. are captured; from step SWITCH ``b`` is the split one


@pytest.fixture(autouse=True)
def fresh_compile_log():
    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=None)
    yield
    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=None)


def reduce_step(a, b):
    return jnp.sum(a * 2.0, axis=0), jnp.sum(b * 3.0, axis=0)


def run(logdir: Path) -> Path:
    if jax.device_count() < 4:
        pytest.skip("needs 4 devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)")
    mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:4])
    put = lambda x, *s: jax.device_put(x, NamedSharding(mesh, P(*s)))  # noqa: E731
    x = jnp.ones((64, 32), jnp.float32)
    split_a = (put(x, "data"), put(x))
    split_b = (put(x), put(x, "data"))
    step = jaxdiag.jit(reduce_step)
    with jaxdiag.capture(logdir, skip=SKIP, take=STEPS - SKIP, run="r") as cap:
        for i in range(STEPS):
            with cap.step():
                jax.block_until_ready(step(*(split_a if i < SWITCH else split_b)))
    assert cap.run_dir is not None
    return cap.run_dir


def collectives_by_program(run_dir: Path) -> dict[tuple[int, str], int]:
    """``(program_id, op) -> ops`` of the module's all-reduces, ordered by when each program first ran."""
    (path,) = run_dir.glob("*.xplane.pb")
    first: dict[int, int] = {}
    count: dict[tuple[int, str], int] = {}
    for plane in _profile_data.ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                op = str(stats.get("hlo_op", ""))
                if stats.get("hlo_module") == MODULE and op.startswith("all-reduce") and "program_id" in stats:
                    program = int(stats["program_id"])
                    first[program] = min(first.get(program, event.start_ns), event.start_ns)
                    count[(program, op)] = count.get((program, op), 0) + 1
    order = sorted(first, key=first.__getitem__)
    return dict(sorted(count.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])))


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    compile_log.clear()
    try:
        return run(tmp_path_factory.mktemp("program_join"))
    finally:
        compile_log.clear()


def test_each_collective_is_joined_to_the_compile_that_ran_it(captured: Path) -> None:
    truth = collectives_by_program(captured)
    programs = list(dict.fromkeys(p for p, _ in truth))
    assert len(programs) == 2  # the warm-up compile's program ran first, then the window's recompile
    ops = {op for _, op in truth}
    assert len(ops) == 1  # one op name in both: the module and op alone cannot tell them apart
    rows = report(captured).to_dict()["sharding"]["timeline"]
    got = {(r["program_id"], r["op"]): r for r in rows if r["module"] == MODULE}
    assert set(got) == set(truth)
    for (program, op), n in truth.items():
        row = got[(program, op)]
        first = program == programs[0]
        assert row["joined_by"] == JOINED_BY_PROGRAM
        assert row["count"] == n and row["function"] == "reduce_step"
        assert row["compiles"] == ([1] if first else [2])
        assert row["arrays"] == (["out[0]"] if first else ["out[1]"])  # the sum of a, then of b


def test_the_compile_that_ran_most_comes_first(captured: Path) -> None:
    """Three captured steps ran the warm-up compile, two the recompile: the earlier one is the steady one,
    told by the programs' own ops although both compiles name their all-reduce alike."""
    from jaxdiag.render.sharding_compiles import distinct_compiles

    truth = collectives_by_program(captured)
    runs = [sum(n for (p, _), n in truth.items() if p == program) for program in dict.fromkeys(p for p, _ in truth)]
    assert runs[0] > runs[1]
    functions = report(captured).sharding.functions
    entries = [e for e in distinct_compiles(functions) if e.program.function == "reduce_step"]
    assert [(e.program.compiles, e.steady, e.steady_by) for e in entries] == [
        ((1,), True, "timeline"),
        ((2,), False, "timeline"),
    ]
    assert [e.program.collectives[0].timeline_count for e in entries] == runs


def test_recorded_program_ids_are_the_traces(captured: Path) -> None:
    records = [r for r in read_sidecars(captured).compile_log if r["function"] == "reduce_step"]
    by_index = {r["compile_index"]: r["program_id"] for r in records}
    assert list(by_index.values()) == list(dict.fromkeys(p for p, _ in collectives_by_program(captured)))


def test_without_program_ids_the_module_rule_joins_and_says_so(captured: Path) -> None:
    """A log written before records had program ids: each op goes to the module's latest compile, labelled so."""
    from jaxdiag.trace.load import load

    records = [{k: v for k, v in r.items() if k != "program_id"} for r in read_sidecars(captured).compile_log]
    result = analyze(AnalysisInputs(frames=load(captured), compile_log=records))
    rows = [r for r in result.timeline if r.module == MODULE]
    assert len(rows) == 2
    assert {(r.joined_by, r.compiles, r.arrays) for r in rows} == {(JOINED_BY_MODULE, (2,), ("out[1]",))}
