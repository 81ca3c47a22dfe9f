"""Every command's help: ``-h`` as well as ``--help``, its exit statuses, no ``<bool>`` beside a flag.

And ``report --html`` says where it wrote the page instead of printing the tables too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = ("report", "compiles", "sharding", "check", "diff", "baseline", "open", "run")


def jaxdiag(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jaxdiag", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "100"},
    )


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help(command: str) -> None:
    args = [command] if command else []
    short, long = jaxdiag(*args, "-h"), jaxdiag(*args, "--help")
    assert short.returncode == 0 and long.returncode == 0, (short.stderr, long.stderr)
    assert short.stdout == long.stdout and short.stdout.startswith("Usage: jaxdiag")
    assert "Exit status:" in short.stdout and "2 bad input" in " ".join(short.stdout.split())
    assert "<bool>" not in short.stdout and "BOOLEAN" not in short.stdout
    assert "-h, --help" in short.stdout


def test_report_html_says_where_it_wrote_the_page(cpu_trace_dir, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    done = jaxdiag("report", str(cpu_trace_dir.logdir), "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"jaxdiag: wrote the HTML report to {page}\n"
    assert page.read_text().startswith("<!DOCTYPE html>")
    both = jaxdiag("report", str(cpu_trace_dir.logdir), "--html", str(page), "--json")
    assert both.returncode == 0 and both.stdout.lstrip().startswith("{")
    assert both.stderr == f"jaxdiag: wrote the HTML report to {page}\n"
