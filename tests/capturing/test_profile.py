"""``jaxdiag.profile``: a real capture with its sidecar; bad input is refused cleanly."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag.capturing.sidecar import read_sidecars
from jaxdiag.errors import CaptureError


def _work():
    return float(jax.jit(lambda x: (x @ x).sum())(jnp.ones((32, 32))))


def test_capture_writes_trace_and_sidecar(tmp_path):
    with jaxdiag.profile(tmp_path, run="r1", tags={"model": "tiny"}) as cap:
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                _work()
            cap.record_step(i, tokens=128 * (i + 1))
    run_dir = tmp_path / "plugins" / "profile" / "r1"
    assert cap.run_dir == run_dir
    assert list(run_dir.glob("*.xplane.pb"))
    facts = read_sidecars(run_dir)
    assert facts is not None
    assert facts.tokens_per_step() == {0: 128.0, 1: 256.0, 2: 384.0}
    doc = json.loads(next(run_dir.glob("jaxdiag-*.json")).read_text())
    assert doc["jax_version"] == jax.__version__
    assert doc["tags"] == {"model": "tiny"}
    assert doc["python_tracer"] is False
    assert doc["devices"] and doc["devices"][0]["platform"] == "cpu"


def test_python_tracer_is_off_by_default_and_options_reach_jax(tmp_path):
    with jaxdiag.profile(tmp_path, run="quiet") as cap:
        _work()
    opts = cap._profile_options()
    assert opts.python_tracer_level == 0
    with pytest.raises(CaptureError, match="unknown profiler option 'no_such_option'"):
        with jaxdiag.profile(tmp_path, options={"no_such_option": 1}):
            pass
    with jaxdiag.profile(tmp_path, run="opts", options={"host_tracer_level": 1}) as cap:
        _work()
    assert cap._profile_options().host_tracer_level == 1


def test_unwritable_logdir_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(CaptureError, match=r"file/logs: cannot write a trace here"):
        with jaxdiag.profile(blocker / "logs"):
            pass


def test_nested_capture_is_refused_and_outer_survives(tmp_path):
    with jaxdiag.profile(tmp_path / "outer", run="o") as outer:
        with pytest.raises(CaptureError, match="already running"):
            with jaxdiag.profile(tmp_path / "inner"):
                pass
        _work()
    assert list(outer.run_dir.glob("*.xplane.pb"))


def test_exception_in_profiled_code_propagates_and_trace_is_kept(tmp_path):
    class Boom(Exception):
        pass

    err = Boom("inside the step")
    with pytest.raises(Boom) as info:
        with jaxdiag.profile(tmp_path, run="boom"):
            _work()
            raise err
    assert info.value is err
    run_dir = tmp_path / "plugins" / "profile" / "boom"
    assert list(run_dir.glob("*.xplane.pb"))
    assert read_sidecars(run_dir) is not None
    with jaxdiag.profile(tmp_path, run="after"):  # the profiler was released
        _work()


def test_the_leak_check_sees_a_session_left_running_on_this_jax(tmp_path):
    from tests.capturing.conftest import stop_a_running_session

    assert stop_a_running_session() is False
    jax.profiler.start_trace(str(tmp_path))
    jnp.ones(3).block_until_ready()
    assert stop_a_running_session() is True  # found and stopped
    assert stop_a_running_session() is False
    assert list(tmp_path.glob("plugins/profile/*/*.xplane.pb"))


def test_the_captures_own_set_up_runs_before_the_trace_starts(tmp_path):
    """The first capture of a process imports jaxdiag's compile recorder (about 30 ms on two cores).
    Inside the trace, that import showed as the user's Python leaving the devices idle at the first
    step. A fresh process, whose capture holds one call of a function compiled before it, with the
    Python tracer on: no import runs between the trace's start and that call (ProfileData alone)."""
    import subprocess
    import sys

    from jax.profiler import ProfileData

    script = (
        "import sys, jax, jax.numpy as jnp, jaxdiag\n"
        "f = jax.jit(lambda x: x * 2)\n"
        "x = jnp.ones(8)\n"
        "f(x).block_until_ready()\n"
        "with jaxdiag.profile(sys.argv[1], run='r', python_tracer=True):\n"
        "    f(x).block_until_ready()\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=300)
    (path,) = (tmp_path / "plugins" / "profile" / "r").glob("*.xplane.pb")
    python = [
        (e.start_ns, e.name)
        for plane in ProfileData.from_file(str(path)).planes
        for line in plane.lines
        if line.name == "python"
        for e in line.events
    ]
    first_call = min(start for start, name in python if name.startswith("PjitFunction("))
    imports = sorted({name for start, name in python if start < first_call and "importlib._bootstrap" in name})
    assert python and not imports, imports[:5]


def test_a_capture_refused_leaves_no_compile_recording(tmp_path):
    """jaxdiag starts its compile recorder before the trace. Options the profiler does not know are
    refused before it starts; when the profiler will not start (a session of the program's own is
    running), the recorder stops again with the error."""
    from jaxdiag.recording.watch import watching

    was = watching()  # (False unless the test runs inside a watch of its own)
    with pytest.raises(CaptureError, match="unknown profiler option"):  # refused before anything starts
        with jaxdiag.profile(tmp_path / "ours", options={"no_such_option": 1}):
            pass
    assert watching() is was
    jax.profiler.start_trace(str(tmp_path / "theirs"))
    try:
        with pytest.raises(CaptureError, match="cannot start the profiler"):
            with jaxdiag.profile(tmp_path / "ours"):
                pass
        assert watching() is was
    finally:
        jax.profiler.stop_trace()
    with jaxdiag.profile(tmp_path / "ours", run="after") as cap:  # and a capture starts cleanly afterwards
        _work()
    assert list(cap.run_dir.glob("*.xplane.pb"))
