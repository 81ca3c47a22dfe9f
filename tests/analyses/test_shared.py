"""Sharing intermediate results between the analyses of one report, and the lazy registry."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np

from jaxdiag.analyses import ANALYSES, run_all
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.analyses.compile_spans import compile_spans
from jaxdiag.analyses.device_work import device_ops, host_events, step_windows
from jaxdiag.analyses.shared import once, scope
from jaxdiag.reporting import codec
from jaxdiag.trace import frames as F


def test_once_computes_once_per_key_inside_a_scope_and_always_outside() -> None:
    frames, other = object(), object()
    calls: list[str] = []

    def compute(tag: str):
        return lambda: calls.append(tag) or len(calls)

    assert once(frames, "k", compute("a")) == 1
    assert once(frames, "k", compute("a")) == 2  # no scope: computed again
    with scope(frames):
        assert once(frames, "k", compute("b")) == 3
        assert once(frames, "k", compute("b")) == 3
        assert once(frames, "j", compute("c")) == 4
        assert once(other, "k", compute("d")) == 5  # another capture is never served from this scope
    assert once(frames, "k", compute("e")) == 6  # the scope's answers are gone with it


def test_helpers_share_answers_within_a_scope_only(cpu_frames) -> None:
    frames = cpu_frames.frames
    host = frames.hosts[0]
    assert device_ops(frames, host) is not device_ops(frames, host)
    with scope(frames):
        assert device_ops(frames, host) is device_ops(frames, host)
        assert host_events(frames, host) is host_events(frames, host)
        assert step_windows(frames, host, [1, 2]) is step_windows(frames, host, (1, 2))
        assert step_windows(frames, host, [1]) is not step_windows(frames, host, [1, 2])
        spans = compile_spans(frames, host)
        assert spans == compile_spans(frames, host) and spans
        # Empty compile windows select the same rows as none at all.
        assert device_ops(frames, host, {host: np.zeros((0, 2), np.int64)}) is device_ops(frames, host)


def _section(result: Any) -> Any:
    """An analysis's section of the report, as JSON."""
    return codec.to_json(result.section())


def test_run_all_gives_what_each_analysis_gives_alone(cpu_frames) -> None:
    inputs = AnalysisInputs(frames=cpu_frames.frames, steps=[1, 2, 3, 4])
    together = run_all(inputs)
    assert list(together) == list(ANALYSES)
    for name, analyze in ANALYSES.items():
        alone = analyze(inputs)
        assert _section(together[name]) == _section(alone), name
        assert together[name].findings == alone.findings, name


def test_importing_the_report_model_imports_no_analysis_numpy_or_pandas() -> None:
    code = (
        "import sys, jaxdiag.reporting.model, jaxdiag.analyses;"
        "loaded = [m for m in ('numpy', 'pandas', 'jaxdiag.analyses.host_waits') if m in sys.modules];"
        "print(loaded); sys.exit(1 if loaded else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_names_are_classified_once_per_report_and_as_without_categories(cpu_frames) -> None:
    import pandas as pd

    from jaxdiag.analyses.device_work import classify_names

    frames = cpu_frames.frames
    names = frames.events[F.NAME]
    calls: list[str] = []

    def length(name: str) -> int:
        calls.append(name)
        return len(name)

    expected = np.array([len(str(n)) for n in names.astype(object)], dtype=object)
    plain = pd.Series(names.astype(object))  # no categories: each distinct name, every call
    assert (classify_names(plain, length) == expected).all()
    assert len(calls) == names.nunique() + 1  # and "" for missing names
    calls.clear()
    with scope(frames):
        some = names.iloc[: len(names) // 2]
        assert (classify_names(some, length, key=length) == expected[: len(some)]).all()
        first = len(calls)
        assert first == some.nunique() + 1  # only the names these rows use
        assert (classify_names(names, length, key=length, dtype=np.int64) == expected.astype(np.int64)).all()
        assert (classify_names(some, length, key=length) == expected[: len(some)]).all()
        assert len(calls) == names.nunique() + 1  # each name once, whichever rows ask
    calls.clear()
    classify_names(names, length, key=length)
    assert len(calls) == names.nunique() + 1  # outside a report's scope, answers are not kept
