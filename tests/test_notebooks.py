"""The notebooks run headless, top to bottom, with no cell error (nbclient, kernel ``python3``)."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"


def execute(path: Path, workdir: Path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    # A cell error raises CellExecutionError naming the cell and its traceback.
    NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()
    return nb


def outputs(cell) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") in ("display_data", "execute_result")]


def test_quickstart_runs_and_shows_the_dashboard(tmp_path, monkeypatch):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's tempfile.mkdtemp lands here
    nb = execute(NOTEBOOKS / "quickstart.ipynb", tmp_path)
    assert not list(tmp_path.glob("jaxdiag-quickstart-*"))  # its last cell removes the folder it made
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    report_cell = next(c for c in code if c.source.strip().endswith("report"))
    summary = outputs(report_cell)[0]["data"]["text/html"]
    assert "Findings, by time lost" in summary and "recompiled once, at step 5" in summary
    dash = next(c for c in code if "dashboard(report)" in c.source)
    if any(WIDGET in o.get("data", {}) for o in outputs(dash)):  # ipywidgets installed: the pickers view
        return
    titles = [o["data"][PLOTLY]["layout"]["title"]["text"] for o in outputs(dash) if PLOTLY in o.get("data", {})]
    assert "Where each step's time went" in titles
    assert any(t.startswith("Step ") and "timeline" in t for t in titles)
    assert len(titles) == 8  # six run figures, the step timeline and the step's host waits
    page = next(c for c in code if "render(report)" in c.source)
    assert "report.html" in "".join(o.get("text", "") for o in page.outputs)
