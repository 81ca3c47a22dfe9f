"""``.ci/run`` finds what it needs: the JAX floor in ``pyproject.toml`` and each Python it tests on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdiag.trace.versions import TESTED_JAX

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = (ROOT / ".ci" / "run").read_text()

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")


def _function(name: str) -> str:
    """The text of a shell function of ``.ci/run``, from ``name() {`` to its closing brace."""
    start = SCRIPT.index(f"{name}() {{")
    return SCRIPT[start : SCRIPT.index("\n}\n", start) + 3]


def _bash(script: str) -> str:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()


def test_the_jax_floor_it_pins_is_the_tested_range_start():
    (line,) = [x for x in SCRIPT.splitlines() if x.startswith('OLDEST_JAX="$(sed')]
    assert _bash(f"{line}\necho $OLDEST_JAX") == TESTED_JAX[0]


def test_it_finds_this_python_and_says_nothing_for_an_absent_one():
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = _bash(f"PATH={Path(sys.executable).parent}:$PATH\n{_function('find_python')}\nfind_python {want}")
    version = subprocess.run([found, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    assert version.stdout.strip() == str(sys.version_info[:2])
    assert _bash(f"{_function('find_python')}\nfind_python 3.99") == ""
