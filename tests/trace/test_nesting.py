"""The category rule of a Python thread's events: ``_xline.nest`` in C and ``nesting._nest``, its twin.

Both are run on every Python thread of the corpus and the shared H100 captures, on a CPU capture
made here, and on generated threads: events that nest, overlap, start together and end together,
names of each kind, XLA:CPU ops, step numbers and C++ source stats given or not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import contract, host_plane, nesting
from jaxdiag.trace.contract import ColumnReader
from tests.trace.test_contract import _captures

#: A name of each kind: 1 the runtime's, 2 a framework span, 0 neither.
_NAMES = ["ParseArguments", "PjitFunction(train_step)", "train_step", "data", "ThunkExecutor::Execute"]


def _both(starts, durs, names, ops, steps, sources) -> tuple[Any, Any]:
    """``categorize`` in C (``_xline``'s codes and ``nest``), and with the module absent (its Python twins)."""
    args = (list(map(float, starts)), list(map(float, durs)), names, host_plane._name_kind, ops, steps, sources)
    compiled = nesting.categorize(*args)
    with mock.patch.object(contract, "line_decoder", lambda: None):
        return compiled, nesting.categorize(*args)


_event = st.tuples(
    st.integers(0, 60),
    st.integers(0, 25),
    st.sampled_from(_NAMES),
    st.booleans(),
    st.sampled_from([None, 3, "7"]),
    st.sampled_from([None, "x.cc:12"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event, max_size=40), with_ops=st.booleans(), in_order=st.booleans())
def test_the_rule_in_c_is_its_python_twin(events: list[tuple], with_ops: bool, in_order: bool, xline: object) -> None:
    if in_order:  # as a thread is read: by start, an enclosing event first
        events = sorted(events, key=lambda e: (e[0], -e[1]))
    starts, durs, names, ops, steps, sources = (list(column) for column in zip(*events)) if events else [[]] * 6
    got, want = _both(starts, durs, names, ops if with_ops else None, [steps], [sources, sources[::-1]])
    assert got == want


def test_a_thread_reads_as_its_enclosing_events_say(xline: object) -> None:
    """A step's annotation, a runtime span and what it encloses, a TraceMe with C++ source, an op."""
    starts = [0, 0, 1, 2, 10, 11, 20, 30]
    durs = [50, 9, 5, 1, 5, 1, 1, 1]
    names = ["train", "PjitFunction(f)", "train_step", "data", "data", "ParseArguments", "data", "train"]
    steps = [[None, None, None, None, None, None, None, 4]]
    sources = [[None, None, None, None, "a.cc:1", None, None, None]]
    ops = [False, False, False, False, False, False, True, False]
    got, want = _both(starts, durs, names, ops, steps, sources)
    assert got == want
    categories, marks = got
    # Inside the framework span all is the runtime's; an event with C++ source is too, and what it encloses.
    assert categories == [
        "annotation",
        "annotation",
        "runtime",
        "runtime",
        "runtime",
        "runtime",
        "device",
        "annotation",
    ]
    assert marks == [7]


def _python_threads(path: Path) -> list[Any]:
    stats = host_plane.PYTHON_THREAD_STATS | {"hlo_op", "hlo_module"}
    planes = ColumnReader().read(path.read_bytes(), str(path), frames=False, stats=stats)
    return [
        line
        for plane in planes
        if plane.name == "/host:CPU"
        for line in plane.lines
        if not host_plane.is_runtime_thread(line.name)
    ]


def _check_threads(lines: list[Any]) -> int:
    events = 0
    for line in lines:
        stats = line.stats
        ops = [
            module is not None and op is not None
            for module, op in zip(*(stats.get(k, [None] * len(line.names)) for k in ("hlo_module", "hlo_op")))
        ]
        starts, durs, names, stats = host_plane._outer_first(line.starts, line.durs, line.names, stats)
        got, want = _both(
            starts,
            durs,
            names,
            ops if any(ops) else None,
            [stats[k] for k in host_plane._STEP_STATS if k in stats],
            [stats[k] for k in host_plane._SOURCE_STATS if k in stats],
        )
        assert got == want, line.name
        events += len(names)
    return events


@pytest.mark.parametrize("path", _captures(), ids=lambda p: p.name if "fixtures" not in str(p) else p.parts[-5])
def test_every_captured_thread_reads_alike_in_c_and_python(path: Path, xline: object) -> None:
    try:
        lines = _python_threads(path)
    except TraceFormatError:  # not an XSpace (the corpus keeps one, for the tests of bad input): no thread
        pytest.skip(f"{path.name} is not read as an XSpace")
    _check_threads(lines)


def test_a_cpu_capture_reads_alike_in_c_and_python(cpu_trace_dir, xline: object) -> None:
    paths = sorted(Path(cpu_trace_dir.run_dir).glob("*.xplane.pb"))
    assert sum(_check_threads(_python_threads(path)) for path in paths) > 0
