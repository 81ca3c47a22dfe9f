"""``jaxdiag report``: the plain-arguments path reads options as typer does, and leaves the rest to typer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from jaxdiag.cli.app import app, main
from jaxdiag.cli.report_run import PARAMETERS
from jaxdiag.cli.report_run import plain_values as _plain_values

PLAIN = [
    ["trace"],
    ["trace", "--json", "-o", "out.json"],
    ["--json", "trace", "--output=out.json", "--width", "120"],
    ["trace", "--run", "r1", "--host", "h0", "--steps", "3:10", "--compile-log", "logs", "--html", "r.html"],
    ["trace", "--tokens-per-step", "1e3", "--flops-per-step", "2.5E12", "--small-op-us", ".5"],
    ["--", "-trace-starting-with-a-dash"],
    ["trace", "--set", "small_op_us=5", "--set=check.step_time_regression=10%", "--config", "p.toml"],
]
NOT_PLAIN = [
    [],
    ["--help"],
    ["trace", "--help"],
    ["trace", "other"],
    ["trace", "--json=yes"],
    ["trace", "--width", "1.5"],
    ["trace", "--width", "-3"],
    ["trace", "--small-op-us", "-1"],
    ["trace", "--tokens-per-step", "1_000"],
    ["trace", "--run", "a", "--run", "b"],
    ["trace", "-o"],
    ["trace", "-oout.json"],
    ["trace", "--unknown", "x"],
    ["trace", "--run", ""],
]


def _typer_params(args: list[str]) -> dict:
    command = typer.main.get_command(app).commands["report"]  # type: ignore[attr-defined]
    return command.make_context("report", list(args)).params


@pytest.mark.parametrize("args", PLAIN)
def test_plain_arguments_read_as_typer_reads_them(args: list[str]) -> None:
    main(["--version"])  # registers every command, as the console script does
    assert _plain_values(args) == _typer_params(args)


@pytest.mark.parametrize("args", NOT_PLAIN)
def test_other_arguments_are_left_to_typer(args: list[str]) -> None:
    assert _plain_values(args) is None


def test_the_typer_command_takes_the_plain_table_s_parameters() -> None:
    import inspect
    from typing import Optional, Union, get_args, get_origin

    from jaxdiag.cli.report_cmd import report_command

    def kind(annotation: object) -> object:
        if get_origin(annotation) is Union:
            (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
        return list if get_origin(annotation) is list else annotation

    declared = inspect.signature(report_command, eval_str=True).parameters.values()
    assert [p.name for p in declared] == [p.name for p in PARAMETERS]
    for param, plain in zip(declared, PARAMETERS):
        info = param.default
        assert kind(param.annotation) is plain.kind, param.name
        assert (param.annotation is Optional[list[str]]) == (plain.kind is list), param.name
        assert isinstance(info, typer.models.ArgumentInfo) == (plain.flags is None), param.name
        assert (info.default, info.param_decls or ()) == (plain.default, plain.flags or ()), param.name
        custom = [getattr(info, a, None) for a in ("callback", "envvar", "parser", "click_type", "is_eager")]
        assert all(c in (None, False) for c in custom), param.name  # what the plain path cannot do


def test_the_program_reports_without_typer_or_the_other_commands(cpu_trace_dir, tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import atexit, sys
        loaded = lambda: sorted(m for m in sys.modules if m.split(".")[0] in ("typer", "click", "rich", "plotly")
                                or m.startswith(("jaxdiag.cli.", "jaxdiag.render.")))
        atexit.register(lambda: print("loaded:", loaded(), file=sys.stderr))
        sys.argv = ["jaxdiag", "report", *sys.argv[1:]]
        from jaxdiag.cli.app import main
        sys.exit(main())
        """
    )
    out = tmp_path / "report.json"
    plain = ["jaxdiag.cli.app", "jaxdiag.cli.options", "jaxdiag.cli.report_run", "jaxdiag.render.json_out"]
    for args in ([str(cpu_trace_dir.logdir), "--json", "-o", str(out)], [str(cpu_trace_dir.logdir), "--json"]):
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip().splitlines()[-1] == f"loaded: {plain}"
    assert json.loads(done.stdout) == json.loads(out.read_text())
    done = subprocess.run([sys.executable, "-c", script, str(cpu_trace_dir.logdir)], capture_output=True, text=True)
    assert done.returncode == 0 and "Findings (by time lost)" in done.stdout  # the tables still print, through typer
    assert "'typer'" in done.stderr and "'jaxdiag.cli.compiles_cmd'" not in done.stderr


def test_the_program_loads_numpy_with_one_blas_thread_unless_told(cpu_trace_dir, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    script = (
        "import atexit, os, sys\n"
        "atexit.register(lambda: print('blas:', os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules))\n"
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
        assert done.stdout.strip() == f"blas: {expected} True"


def test_an_error_naming_a_path_beyond_ascii_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhère"
    assert main(["report", str(missing), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("jaxdiag: error: ") and str(missing) in err


def test_typer_still_answers_what_the_plain_path_leaves(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "trace", "--width", "wide"]) == 2
    assert "Usage: jaxdiag report" in capsys.readouterr().err  # typer's usage error, not ours
    assert main(["report", "--help"]) == 0
    assert "--small-op-us" in capsys.readouterr().out


def test_both_paths_write_the_same_report(cpu_trace_dir, tmp_path: Path) -> None:
    plain, full = tmp_path / "plain.json", tmp_path / "full.json"
    args = [str(cpu_trace_dir.logdir), "--json", "--steps", "1:5", "--tokens-per-step", "64"]
    assert main(["report", *args, "-o", str(plain)]) == 0
    done = CliRunner().invoke(app, ["report", *args, "-o", str(full)])
    assert done.exit_code == 0, done.output
    assert json.loads(plain.read_text()) == json.loads(full.read_text())
    assert json.loads(plain.read_text())["steps"][0]["tokens"] == 64


def test_bad_input_is_one_line_on_the_plain_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    out = tmp_path / "report.json"
    for args, forks in (
        (["--json", str(cpu_trace_dir.logdir), "-o", str(out)], [False]),
        ([str(cpu_trace_dir.logdir), "--help"], []),  # typer answers: nothing is read
        ([str(cpu_trace_dir.logdir), "--width", "wide"], []),
        ([str(cpu_trace_dir.logdir), "--run", "no-such-run", "--json"], []),
    ):
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
        assert done.stdout.strip().endswith(f"forks after typer: {forks} unclaimed: 0"), done.stdout + done.stderr
    assert done.returncode == 2 and "no run named 'no-such-run'" in done.stderr
    from jaxdiag.reporting.build import report

    assert json.loads(out.read_text())["steps"] == report(cpu_trace_dir.logdir).to_dict()["steps"]


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
