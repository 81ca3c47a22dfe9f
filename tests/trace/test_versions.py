"""The JAX, jaxlib and platform versions a capture carries, in the report's header, and the untested-JAX warning."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jaxdiag.render import html, json_out, terminal
from jaxdiag.render.terminal_text import esc
from jaxdiag.reporting.build import report
from jaxdiag.trace.versions import TESTED_JAX, capture_versions, untested_jax, versions_text
from tests.xspace_builders import Ev, XSpaceBuilder


def _metadata_stats(file: Path) -> dict:
    """The ``/host:metadata`` plane's stats, read with jaxlib's ``ProfileData`` alone."""
    from jax.profiler import ProfileData

    planes = [p for p in ProfileData.from_file(str(file)).planes if p.name == "/host:metadata"]
    return {k: v for p in planes for k, v in p.stats}


def test_tested_range_is_the_one_pyproject_declares():
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    (declared,) = re.findall(r'"jax(>=[^"]+)"', text)
    assert declared == f">={TESTED_JAX[0]},<{TESTED_JAX[1]}"


@pytest.mark.parametrize(
    ("jax", "untested"),
    [
        ("0.8.0", False),
        ("0.10.2", False),
        ("0.12.0.1", False),
        ("0.12.9.dev20270101", False),
        ("0.7.2", True),
        ("0.13.0", True),
        ("1.0", True),
        ("not a version", False),  # unknown: nothing is claimed
    ],
)
def test_untested_jax_is_said_outside_the_range_only(jax, untested):
    note = untested_jax({"jax": jax})
    assert (note is not None) is untested
    if untested:
        assert f"JAX {jax}" in note and TESTED_JAX[0] in note and TESTED_JAX[1] in note
    assert untested_jax({}) is None


def test_versions_of_a_gpu_capture_come_jax_first():
    meta = {
        "gpu_version": "cuda 13000",
        "jax_version": "0.11.2",
        "cpu_version": "cpu",
        "jaxlib_version": "0.11.2",
        "cuda_driver_version": "13000",
        "process_id": 424,
        "profile_start_time": 1,
    }
    got = capture_versions(meta)
    assert list(got.items()) == [
        ("jax", "0.11.2"),
        ("jaxlib", "0.11.2"),
        ("cpu", "cpu"),
        ("cuda_driver", "13000"),
        ("gpu", "cuda 13000"),
    ]
    assert versions_text(got) == "jax 0.11.2 · jaxlib 0.11.2 · cpu · cuda_driver 13000 · gpu cuda 13000"
    # Kept as written; the terminal shows the control character as text (``esc``), never drops or sends it.
    assert versions_text({"jax": "0.9\x1b[31m"}) == "jax 0.9\x1b[31m"
    assert esc(versions_text({"jax": "0.9\x1b[31m"})) == "jax 0.9\\x1b[31m"


def test_a_real_capture_reports_what_its_metadata_plane_says(cpu_trace_dir):
    import jax

    stats = _metadata_stats(next(cpu_trace_dir.run_dir.glob("*.xplane.pb")))
    r = report(cpu_trace_dir.logdir)
    versions = r.source["versions"]
    if "jax_version" not in stats:  # JAX before 0.9.1 writes no versions: nothing is shown
        assert versions == {} and "made by" not in terminal.render(r)
        return
    assert versions["jax"] == stats["jax_version"] == jax.__version__
    assert versions["jaxlib"] == stats["jaxlib_version"]
    assert versions["cpu"] == stats["cpu_version"]
    assert f"made by: jax {jax.__version__} · jaxlib {stats['jaxlib_version']}" in terminal.render(r, width=200)
    assert f"made by: jax {jax.__version__}" in html.render(r)
    assert json.loads(json_out.render(r))["source"]["versions"] == versions
    assert not any("outside the releases" in n for n in r.notes)  # the installed JAX is a tested one


def test_a_trace_from_an_untested_jax_is_warned_about_in_every_format(tmp_path):
    builder = XSpaceBuilder()
    builder.plane(
        "/host:metadata",
        {"jax_version": "0.13.1", "jaxlib_version": "0.13.1", "cpu_version": "cpu", "gpu_version": "<b>x</b>"},
    )
    builder.plane("/host:CPU", {"process_id": 1})
    builder.line("python3", [Ev("train", 1_000 * i, 900, {"_r": 1, "step_num": i}) for i in range(3)])
    (tmp_path / "h.xplane.pb").write_bytes(builder.serialize())
    r = report(tmp_path)
    assert r.source["versions"] == {"jax": "0.13.1", "jaxlib": "0.13.1", "cpu": "cpu", "gpu": "<b>x</b>"}
    (note,) = [n for n in r.notes if "outside the releases" in n]
    assert note.startswith("this trace was made by JAX 0.13.1, outside the releases jaxdiag is tested with")
    text = terminal.render(r, width=400)
    assert "made by: jax 0.13.1 · jaxlib 0.13.1 · cpu · gpu <b>x</b>" in text and note in text
    page = html.render(r)
    assert "made by: jax 0.13.1" in page and "gpu &lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert note in json.loads(json_out.render(r))["notes"]
