"""Terminal, JSON and HTML renderers format the same Report, and nothing else."""

from __future__ import annotations

import json
import re

from jaxdiag.render import html, json_out, terminal
from report_builders import make_report


def test_terminal_lists_findings_by_time_lost():
    text = terminal.render(make_report(), width=120)
    assert "Findings (by time lost)" in text
    assert text.index("train_step recompiled at step 3") < text.index("waited on load_batch")
    assert "pad batches" in text
    assert "80.00" in text  # steps/s
    assert "\x1b[" not in text  # no colour codes unless asked for


def test_json_is_the_contract():
    data = json.loads(json_out.render(make_report()))
    assert [f["kind"] for f in data["findings"]] == ["recompile", "host_wait"]
    assert data["recompiles"][0]["cause"] == "args[1] axis 0: 8 -> 9"


def test_html_is_self_contained_and_escaped():
    report = make_report(notes=("<script>alert(1)</script>",))
    page = html.render(report)
    assert page.startswith("<!DOCTYPE html>")
    assert "<script>alert" not in page
    assert not re.search(r"<(script|link|img)\b[^>]*\b(src|href)=['\"]?https?://", page)
    assert "train_step recompiled at step 3" in page


def test_a_program_that_counted_samples_reads_samples_per_second(tmp_path):
    import jax.numpy as jnp

    import jaxdiag
    from jaxdiag.render import figures

    step = jaxdiag.jit(lambda w, x: w - 0.01 * (x.T @ (x @ w)))
    w = jnp.eye(32)
    with jaxdiag.capture(tmp_path, skip=1, take=4) as cap:
        for _ in range(5):
            x = jnp.ones((16, 32))
            with cap.step(samples=x.shape[0]):
                w = step(w, x)
                float(w[0, 0])
    report = jaxdiag.report(tmp_path)
    assert report.throughput.count_unit == "samples" and report.throughput.tokens_per_s > 0
    text = terminal.render(report, width=200)
    assert "samples/s" in text and "tokens/s" not in text
    page = html.render(report)
    assert "steady samples/s" in page and "tokens/s" not in page
    assert figures.throughput(report).layout.yaxis.title.text == "samples/s"


def test_terminal_step_table_tells_the_compile_wait_from_the_host_compile_time():
    step = {
        "step": 7,
        "wall_ms": 50.0,
        "device_busy_ms": 1.0,
        "host_wait_ms": 40.0,
        "compile_wait_ms": 30.0,
        "compile_ms": 45.0,
        "collective_ms": 0.0,
        "exposed_collective_ms": 0.0,
        "tokens": None,
    }
    text = terminal.render(make_report(steps=[step]), width=200)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "host wait" in line and "wall" in line)
    assert re.search(r"host wait\W+of it compile\W+host compile", lines[header])
    row = next(line for line in lines[header:] if line.split()[:1] == ["7"])
    assert re.search(r"40\.0+\W+30\.0+\W+45\.0+", row)
