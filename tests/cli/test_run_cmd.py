"""``jaxdiag run SCRIPT [ARGS]``: the script runs as Python would run it, its compiles summarised on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdiag.cli.app import main

#: Its shapes are used by no other test: JAX compiles its eager helpers (``jnp.ones``, ...) once per
#: process and shape, and this script must see them compile whatever ran before it in the process.
TRAIN = """
import sys
import jax
import jax.numpy as jnp

print("argv", sys.argv[1:])


@jax.jit
def train_step(w, x):
    return w - 0.1 * jnp.mean(x @ w)


w = jnp.ones((7, 7))
for rows in (9, 9, 11, 13, 17):
    w = train_step(w, jnp.ones((rows, 7)))
print("sum", float(w.sum()))
if "--exit" in sys.argv:
    sys.exit(int(sys.argv[-1]))
"""

# Plain Python, so that it can be compared with a real ``python script.py`` cheaply.
PLAIN = """
import os
import sys


def fail(kind):
    if kind == "raise":
        raise ValueError("planted failure")
    if kind == "message":
        sys.exit("stopped: planted message")
    sys.exit(int(kind))


print("argv", sys.argv[1:])
print("name", __name__, "file", os.path.basename(__file__))
print("path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
if len(sys.argv) > 1:
    fail(sys.argv[1])
"""


@pytest.fixture(autouse=True)
def fresh_compile_log():
    from jaxdiag.recording import compile_log

    compile_log.clear()
    compile_log.configure(log_dir=None)
    yield
    compile_log.clear()
    compile_log.configure(log_dir=None)


@pytest.fixture()
def scripts(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "plain.py").write_text(PLAIN)
    return tmp_path


def python(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)


def test_summary_on_stderr_and_the_scripts_args_untouched(scripts, capsys):
    import jax

    jax.clear_caches()  # JAX's eager helpers compile again, whichever tests ran before
    argv, path = sys.argv[:], sys.path[:]
    status = main(["run", "--width", "160", str(scripts / "train.py"), "--lr", "3", "--log-dir", "x"])
    out, err = capsys.readouterr()
    assert status == 0
    # Options after the script are the script's, even one jaxdiag also has.
    assert out.splitlines()[0] == "argv ['--lr', '3', '--log-dir', 'x']"
    assert out.splitlines()[1].startswith("sum ") and len(out.splitlines()) == 2
    assert "4 compile(s) of 1 function(s)" in err
    assert "train_step" in err and "3x x shape axis 0" in err
    assert "pad x axis 0 up to buckets" in err
    assert "of JAX's own jitted helpers (eager jnp ops" in err
    assert (sys.argv, sys.path) == (argv, path)
    from jaxdiag.recording.watch import watching

    assert not watching()


def test_log_dir_gets_the_records_and_the_compiles_command_reads_them(scripts, tmp_path, capsys):
    from jaxdiag.recording.log_reader import read_compile_log

    logs = tmp_path / "logs"
    assert main(["run", "--log-dir", str(logs), "--no-jax-internals", str(scripts / "train.py")]) == 0
    err = capsys.readouterr().err
    (log_file,) = logs.glob("compiles-*.jsonl")
    assert f"jaxdiag: compile log: {log_file}" in err and "JAX's own" not in err
    records = read_compile_log(logs).records
    assert [(r.function, r.origin, r.compile_index) for r in records] == [
        ("train_step", "watch", i) for i in (1, 2, 3, 4)
    ]
    assert records[1].explanation.summary.startswith("train_step: x shape axis 0 changed 9 -> 11; called at ")
    assert records[1].call_site == f"{scripts / 'train.py'}:16"


def test_stdout_and_exit_status_pass_through(scripts, capsys):
    expected = python(scripts / "plain.py", "3")
    assert expected.returncode == 3
    assert main(["run", "--no-summary", str(scripts / "plain.py"), "3"]) == 3
    out, err = capsys.readouterr()
    assert out == expected.stdout and err == ""
    assert "name __main__ file plain.py" in out and "path0 True" in out
    assert main(["run", str(scripts / "train.py"), "--exit", "4"]) == 4


def test_an_exception_prints_the_traceback_python_prints(scripts, capsys):
    expected = python(scripts / "plain.py", "raise")
    assert expected.returncode == 1
    assert main(["run", "--no-summary", str(scripts / "plain.py"), "raise"]) == 1
    out, err = capsys.readouterr()
    assert out == expected.stdout
    assert err == expected.stderr
    assert err.splitlines()[-1] == "ValueError: planted failure"


def test_an_exit_message_is_printed_with_status_1(scripts, capsys):
    expected = python(scripts / "plain.py", "message")
    assert main(["run", "--no-summary", str(scripts / "plain.py"), "message"]) == expected.returncode == 1
    assert capsys.readouterr().err == expected.stderr == "stopped: planted message\n"


def test_the_summary_still_comes_before_the_traceback(scripts, tmp_path, capsys):
    script = tmp_path / "crash.py"
    script.write_text(TRAIN + "\nraise RuntimeError('after training')\n")
    assert main(["run", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.index("train_step") < err.index("Traceback (most recent call last):")
    assert err.rstrip().endswith("RuntimeError: after training")
    assert "jaxdiag/cli" not in err  # no frame of the runner in the traceback


@pytest.mark.parametrize("target", ["missing.py", "."], ids=["missing file", "folder without __main__"])
def test_a_missing_script_is_a_one_line_error(tmp_path, capsys, target):
    assert main(["run", str(tmp_path / target), "--flag"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"jaxdiag: error: {tmp_path / target}: no such script (give a Python file, or a folder with __main__.py)"
    ]


@pytest.mark.parametrize(
    "data, problem",
    [
        (bytes(range(256)) * 8, "binary data (a NUL byte at offset 0)"),
        (b"import os\n\x00\x01\x02", "binary data (a NUL byte at offset 10)"),
        (b"\xff\xfe\xfa not utf-8\n", "not a Python script: not text in its encoding"),
        (b"# -*- coding: no-such-codec -*-\nx = 1\n", "not a Python script: not text in its encoding"),
    ],
    ids=["binary", "nul", "not utf-8", "unknown coding"],
)
def test_a_binary_file_is_a_one_line_error(tmp_path, data, problem):
    script = tmp_path / "weights.py"
    script.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "run", str(script)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"jaxdiag: error: {script}: {problem}"), proc.stderr


def test_a_syntax_error_is_the_scripts_own(tmp_path):
    """A text script that does not parse fails as ``python script.py`` fails: its SyntaxError, exit 1."""
    script = tmp_path / "broken.py"
    script.write_text("x = (\n")
    proc = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "run", "--no-summary", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "SyntaxError" in proc.stderr.splitlines()[-1], proc.stderr


def test_python_dash_m_jaxdiag_run(scripts):
    proc = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "run", str(scripts / "train.py"), "--exit", "3"],
        capture_output=True,
        text=True,
        env={**os.environ, "JAXDIAG_LOG_DIR": ""},
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.splitlines()[0] == "argv ['--exit', '3']"
    assert "train_step" in proc.stderr and "4 compile(s) of 1 function(s)" in proc.stderr


def test_help_names_the_script_and_its_arguments(capsys):
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "SCRIPT" in out and "--log-dir" in out and "--no-summary" in out
