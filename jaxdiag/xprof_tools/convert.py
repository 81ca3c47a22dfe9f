"""Run XProf's converters (``xprof.convert.raw_to_tool_data``) on a run's host files.

The converters cache what they compute in files beside the ``.xplane.pb`` they
read (``ALL_HOSTS.op_stats_v2.pb``, ...), which would write into the user's
trace folder (or fail on a read-only one). Each call therefore reads links to
the host files from a private temporary folder, removed afterwards; several
tools on the same files share one (``private_links``), so that XProf's cached
op statistics serve them all.

Tables come back as Google-visualization JSON (``cols`` with ids, ``rows`` of
``c`` cells); ``table_rows`` turns one into plain dicts keyed by column id, so
callers read columns by id and never by position.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from jaxdiag.errors import JaxdiagError

#: The converters jaxdiag reads, and what each gives it (see the README's dependency table).
TOOLS = ("hlo_stats", "roofline_model", "memory_profile", "kernel_stats", "op_profile", "framework_op_stats")


class XprofError(JaxdiagError):
    """XProf is missing, or could not convert a trace."""


def tool_data(files: Sequence[str | Path], tool: str, *, private: bool = False) -> Any:
    """The parsed JSON XProf's ``tool`` gives for these host files.

    ``memory_profile`` reads one host at a time: pass one file. ``private``: the
    files are links in a folder of ours (``private_links``), where XProf may keep
    what it computed for the next tool (its op statistics serve several).

    Raises:
      XprofError: xprof cannot be imported, or the conversion failed.
    """
    if tool not in TOOLS:
        raise XprofError(f"unknown XProf tool {tool!r}; jaxdiag reads {', '.join(TOOLS)}")
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError as exc:  # pragma: no cover - xprof is a dependency
        raise XprofError(f"XProf is not installed ({exc}); pip install xprof") from None
    with (
        contextlib.nullcontext([str(f) for f in files]) if private else private_links(files) as linked,
        _native_log_quiet(),
    ):
        try:
            data, _ = raw_to_tool_data.xspace_to_tool_data(linked, tool, {"use_saved_result": private})
        except Exception as exc:  # noqa: BLE001 - a native converter can raise anything
            raise XprofError(f"XProf's {tool} could not convert {_names(files)}: {exc}") from None
    if data is None:
        raise XprofError(f"XProf's {tool} gave nothing for {_names(files)}")
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    try:
        return json.loads(data)
    except (TypeError, ValueError) as exc:
        raise XprofError(f"XProf's {tool} gave output that is not JSON for {_names(files)} ({exc})") from None


def table_rows(table: Any) -> list[dict[str, Any]]:
    """The rows of one Google-visualization table as dicts by column id; ``[]`` for anything else."""
    if not isinstance(table, dict):
        return []
    cols = [c.get("id") if isinstance(c, dict) else None for c in table.get("cols") or ()]
    rows = []
    for row in table.get("rows") or ():
        cells = row.get("c") if isinstance(row, dict) else None
        if not isinstance(cells, list):
            continue
        rows.append({col: (cell.get("v") if isinstance(cell, dict) else None) for col, cell in zip(cols, cells) if col})
    return rows


def table_properties(table: Any) -> dict[str, Any]:
    """A table's properties (``p``): XProf puts device peaks there."""
    props = table.get("p") if isinstance(table, dict) else None
    return dict(props) if isinstance(props, dict) else {}


@contextlib.contextmanager
def _native_log_quiet() -> Iterator[None]:
    """Send what XProf's native code logs on stderr (a few dozen lines a call) to nowhere."""
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (a notebook kernel may have none): nothing to hide
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def private_links(files: Sequence[str | Path]) -> Iterator[list[str]]:
    """Links to ``files`` in a fresh temporary folder (copies where links are refused), removed after."""
    folder = tempfile.mkdtemp(prefix="jaxdiag-xprof-")
    try:
        linked = []
        for f in files:
            source = Path(f).resolve()
            target = Path(folder) / source.name
            try:
                os.symlink(source, target)
            except OSError:
                shutil.copyfile(source, target)
            linked.append(str(target))
        yield linked
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _names(files: Sequence[str | Path]) -> str:
    return ", ".join(str(f) for f in files) or "no files"
