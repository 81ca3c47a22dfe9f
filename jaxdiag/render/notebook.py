"""The Jupyter dashboard: the findings table, then the figures, with step/host/device pickers.

    from jaxdiag.render.notebook import dashboard
    dashboard(report)          # the last expression of a cell

Pickers need ipywidgets; without it the dashboard is the same figures for one
step, shown once, with a line saying how to get the pickers. Plotly's own
interaction works either way: zoom, hover, and clicking a device in a timeline's
legend to hide it. ``Report._repr_html_`` stays the light summary (no JavaScript),
so that merely showing a report does not put megabytes into a notebook.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from jaxdiag.reporting.model import Report

#: Figures of the selected step, drawn under the pickers; every other figure of the
#: report's sections (``reporting.sections``) is about the whole run and is shown once.
SELECTION_FIGURES = ("step_timeline",)
_ALL_DEVICES = "all devices"


@dataclasses.dataclass(frozen=True)
class Dashboard:
    """A report's figures for one selection of step, host and devices.

    Attributes:
      report: the report shown.
      step: the step drawn on the timeline (``None``: ``figures.default_step``).
      host: the host drawn (``None``: the one where the step took longest).
      devices: device planes drawn (``None``: all).
    """

    report: "Report"
    step: int | None = None
    host: str | None = None
    devices: tuple[str, ...] | None = None

    def select(
        self, *, step: int | None = None, host: str | None = None, devices: Sequence[str] | None = None
    ) -> "Dashboard":
        """The same report for this step, host and devices (each ``None``: its default)."""
        return dataclasses.replace(self, step=step, host=host, devices=None if devices is None else tuple(devices))

    def run_figures(self) -> dict[str, "go.Figure"]:
        """Figures of the whole run: every section's figures (``reporting.sections``) but the step timeline."""
        from jaxdiag.render import figures

        return {name: getattr(figures, name)(self.report) for name in run_figure_names()}

    def selection_figures(self) -> dict[str, "go.Figure"]:
        """Figures of the selected step: its timeline and its host waits."""
        from jaxdiag.render import figures

        step = self.step if self.step is not None else figures.default_step(self.report)
        return {
            "step_timeline": figures.step_timeline(self.report, step, host=self.host, devices=self.devices),
            "step_host_waits": figures.host_wait_waterfall(self.report, step),
        }

    def choices(self) -> dict[str, list[Any]]:
        """What the pickers offer (``step``, ``host``, ``device``), and ``default_step`` (empty without steps)."""
        from jaxdiag.render import figures

        source = self.report.source
        steps = [s.step for s in self.report.steps]
        hosts = [str(h) for h in source.get("hosts") or []]
        devices = [d for d in source.get("devices") or [] if self.host is None or d.get("host") == self.host]
        planes = list(dict.fromkeys(str(d.get("plane")) for d in devices))
        default = figures.default_step(self.report)
        return {
            "step": steps,
            "host": hosts,
            "device": planes,
            "default_step": [default] if default is not None else [],
        }

    def static_parts(self) -> list[Any]:
        """What the static view displays, in order: HTML and figures."""
        from IPython.display import HTML

        from jaxdiag.render.html import render_summary_html

        parts: list[Any] = [HTML(render_summary_html(self.report))]
        parts += list(self.run_figures().values())
        parts += list(self.selection_figures().values())
        return parts

    def widget(self) -> "DashboardWidget | None":
        """The dashboard with step/host/device pickers; ``None`` when ipywidgets is not installed."""
        try:
            import ipywidgets  # noqa: F401
        except ImportError:
            return None
        return DashboardWidget(self)

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        view = self.widget()
        if view is not None:
            display(view.box)
            return
        parts = self.static_parts()
        display(parts[0])
        display(HTML("<p class='meta'>Static view: install ipywidgets to pick the step, host and device.</p>"))
        for part in parts[1:]:
            display(part)


class DashboardWidget:
    """A ``Dashboard`` under ipywidgets pickers: changing one redraws the step's figures.

    Attributes:
      current: the ``Dashboard`` of the present selection.
      pickers: the ``step``, ``host`` and ``device`` dropdowns.
      selected: the output area holding the selection figures.
      box: the whole widget.
    """

    def __init__(self, dash: Dashboard) -> None:
        import ipywidgets as widgets

        from jaxdiag.render.html import render_summary_html

        self.current = dash
        choices = dash.choices()
        start = dash.step if dash.step is not None else (choices["default_step"] or [None])[0]
        self.pickers = {
            "step": widgets.Dropdown(
                description="step",
                options=[(str(s), s) for s in choices["step"]] or [("none", None)],
                value=start if start in choices["step"] else None,
            ),
            "host": widgets.Dropdown(
                description="host",
                value=dash.host if dash.host in choices["host"] else None,
                options=[("slowest", None)] + [(h, h) for h in choices["host"]],
            ),
            "device": widgets.Dropdown(
                description="device",
                options=[_ALL_DEVICES] + choices["device"],
                value=dash.devices[0] if dash.devices and dash.devices[0] in choices["device"] else _ALL_DEVICES,
            ),
        }
        self.selected = widgets.Output()
        run = widgets.Output()
        run.outputs = tuple(_output(fig) for fig in dash.run_figures().values())
        for picker in self.pickers.values():
            picker.observe(self.redraw, names="value")
        self.redraw()
        self.box = widgets.VBox(
            [
                widgets.HTML(render_summary_html(dash.report)),
                run,
                widgets.HBox(list(self.pickers.values())),
                self.selected,
            ]
        )

    def redraw(self, _change: Any = None) -> None:
        """Draw the selection figures for the pickers' values."""
        device = self.pickers["device"].value
        self.current = self.current.select(
            step=self.pickers["step"].value,
            host=self.pickers["host"].value,
            devices=None if device == _ALL_DEVICES else [device],
        )
        self.selected.outputs = tuple(_output(fig) for fig in self.current.selection_figures().values())

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)


def run_figure_names() -> list[str]:
    """The names of the figures about the whole run, in the sections' order."""
    from jaxdiag.render.registry import figure_names

    return [name for name in figure_names() if name not in SELECTION_FIGURES]


def _output(fig: "go.Figure") -> dict[str, Any]:
    """A display output holding ``fig`` as plotly's mime type (rendered by JupyterLab, Notebook 7, VS Code)."""
    import plotly.io as pio

    from jaxdiag.render.html import PLOTLY_CONFIG

    bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    bundle["application/vnd.plotly.v1+json"]["config"] = dict(PLOTLY_CONFIG)
    bundle["text/plain"] = f"<plotly figure: {fig.layout.title.text}>"
    return {"output_type": "display_data", "data": bundle, "metadata": {}}


def dashboard(
    report: "Report", *, step: int | None = None, host: str | None = None, devices: Sequence[str] | None = None
) -> Dashboard:
    """The dashboard of ``report``: show it as a cell's last expression, or with ``display``.

    Args:
      report: from ``jaxdiag.report(path)`` or ``Report.open(file)``; a saved report
        keeps the events of a typical step and of the slowest one, so its timeline
        of another step says so.
      step, host, devices: the first selection (default: a typical step, the host
        where it took longest, every device).
    """
    return Dashboard(report).select(step=step, host=host, devices=devices)
