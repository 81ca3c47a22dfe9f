"""``jaxdiag report``: the program reads the trace ahead of typer, bad input is one line, options reach the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jaxdiag.cli.app import main


def test_the_program_loads_numpy_with_one_blas_thread_unless_told(cpu_trace_dir, tmp_path: Path) -> None:
    """Also: no pydantic, which typer 0.29 on imports to build a validator for each option (README's pin)."""
    import os
    import subprocess
    import sys

    script = (
        "import atexit, os, sys\n"
        "atexit.register(lambda: print('blas:', os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules,\n"
        "                              'pydantic' in sys.modules))\n"
        "sys.argv = ['jaxdiag', 'report', *sys.argv[1:]]\n"
        "from jaxdiag.cli.app import main\n"
        "sys.exit(main())\n"
    )
    args = [sys.executable, "-c", script, str(cpu_trace_dir.logdir), "--json", "-o", str(tmp_path / "r.json")]
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    for given, expected in ((None, "1"), ("2", "2")):
        done = subprocess.run(
            args, capture_output=True, text=True, env=env if given is None else {**env, "OPENBLAS_NUM_THREADS": given}
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"blas: {expected} True False"


def test_an_error_naming_a_path_beyond_ascii_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhère"
    assert main(["report", str(missing), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("jaxdiag: error: ") and str(missing) in err


def test_typer_answers_usage_errors_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "trace", "--width", "wide"]) == 2
    assert "Usage: jaxdiag report" in capsys.readouterr().err
    assert main(["report", "--help"]) == 0
    assert "--small-op-us" in capsys.readouterr().out


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    assert main(["report", str(missing), "--json"]) == 2
    assert main(["report", str(tmp_path), "--small-op-us", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("jaxdiag: error: ") for line in err)
    assert str(missing) in err[0] and "--small-op-us must be a positive number" in err[1]


def test_the_program_flushes_its_report_and_exit_status(cpu_trace_dir, tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "report", str(cpu_trace_dir.logdir), "--json"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"]
    bad = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "report", str(tmp_path / "nowhere")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("jaxdiag: error: ") and len(bad.stderr.strip().splitlines()) == 1


def test_the_program_starts_reading_the_trace_before_typer_loads(cpu_trace_dir, tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import atexit, sys
        from jaxdiag.trace import load, reading

        forks = []
        pool = reading.concurrent.futures.ProcessPoolExecutor

        class Counted(pool):
            def __init__(self, *args, **kwargs):
                forks.append("typer" in sys.modules)
                super().__init__(*args, **kwargs)

        reading.concurrent.futures.ProcessPoolExecutor, reading._MIN_WORK_NS = Counted, 0  # workers even for a small trace
        atexit.register(lambda: print("forks after typer:", forks, "unclaimed:", len(load._PREFETCHED)))
        sys.argv = ["jaxdiag", "report", *sys.argv[1:]]
        from jaxdiag.cli.app import main
        sys.exit(main())
        """
    )
    trace = str(cpu_trace_dir.logdir)
    ahead, after = tmp_path / "ahead.json", tmp_path / "after.json"
    for args, forks, status in (
        ([trace, "--json", "-o", str(ahead)], [False], 0),
        (["--json", trace, "-o", str(after)], [True], 0),  # not the first argument: read when typer has parsed
        ([trace, "--help"], [], 0),  # typer answers: nothing is read
        ([trace, "--width", "wide"], [False], 2),  # typer refuses: the read ahead is stopped at exit
        ([trace, "--set", "small_op_us"], [False], 2),  # so too when the command fails before reading
        ([trace, "--run", "no-such-run", "--json"], [], 2),  # another run: not read ahead
    ):
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == status, done.stderr
        assert done.stdout.strip().endswith(f"forks after typer: {forks} unclaimed: 0"), done.stdout + done.stderr
    assert "no run named 'no-such-run'" in done.stderr
    from jaxdiag.reporting.build import report

    expected = report(cpu_trace_dir.logdir).to_dict()["steps"]
    assert json.loads(ahead.read_text())["steps"] == json.loads(after.read_text())["steps"] == expected


def test_settings_from_set_and_pyproject_reach_the_report(cpu_trace_dir, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.jaxdiag]\nsmall_op_us = 3\ntop_ops = 2\n", encoding="utf-8")
    assert main(["report", str(cpu_trace_dir.logdir), "--json", "--set", "small_op_us=4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["small_ops"]["threshold_us"] == 4.0 and len(data["device_time"]["top_ops"]) == 2
    assert main(["report", str(cpu_trace_dir.logdir), "--json", "--small-op-us", "6", "--set", "small_op_us=4"]) == 0
    assert json.loads(capsys.readouterr().out)["small_ops"]["threshold_us"] == 6.0  # the flag wins


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "100:200"], "--steps 100:200: no such step in {logdir}; the capture has steps 0-5"),
        (["--tokens-per-step", "-5"], "--tokens-per-step must be a positive number, got -5"),
        (["--flops-per-step", "0"], "--flops-per-step must be a positive number, got 0"),
        (["--set", "small_op_us"], "--set 'small_op_us': expected NAME=VALUE, e.g. small_op_us=5"),
        (["--set", "padding_buckets=-2"], "--set: padding_buckets: expected a non-negative whole number, got '-2'"),
    ],
)
def test_options_that_match_nothing_or_make_no_sense_exit_2(cpu_trace_dir, capsys, args, message) -> None:
    assert main(["report", str(cpu_trace_dir.logdir), *args]) == 2
    err = capsys.readouterr().err
    assert err == f"jaxdiag: error: {message.format(logdir=cpu_trace_dir.logdir)}\n"


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{trace}"],
        ["check", "{trace}"],
        ["diff", "{trace}", "{trace}"],
        ["sharding", "{trace}"],
        ["compiles", "{trace}"],
    ],
)
def test_a_width_too_narrow_for_a_table_is_refused(cpu_trace_dir, capsys, command) -> None:
    args = [a.format(trace=cpu_trace_dir.logdir) for a in command]
    assert main([*args, "--width", "-3"]) == 2
    assert capsys.readouterr().err == "jaxdiag: error: --width must be at least 20 columns, got -3\n"


def test_a_saved_report_with_text_where_a_figure_goes_is_one_line(tmp_path: Path, capsys) -> None:
    from report_builders import make_report

    good = make_report(steps=[{"step": i, "wall_ms": 10.0, "device_busy_ms": 5.0, "compile_ms": 0.0} for i in range(3)])
    data = json.loads(good.to_json())
    data["steps"][1]["wall_ms"] = "ten"  # a hand-edited file: the containers are right, a value is not
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(data))
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "steps[1].wall_ms: text" in err and "not a number" in err, err
