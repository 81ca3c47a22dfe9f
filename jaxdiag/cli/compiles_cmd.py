"""``jaxdiag compiles LOG``: every compile per function, why it happened, and what to change.

Reads JSONL compile logs and the compile records a capture's sidecars hold
(``jaxdiag-*.json`` in a run folder, see ``capturing.sidecar``), so a logdir or
run folder of ``jaxdiag.profile`` works as well as a log; it never imports jax.
A record in both (a log written into the run folder) is shown once.
"""

from __future__ import annotations

import dataclasses

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.cli.options import check_width
from jaxdiag.errors import CompileLogError
from jaxdiag.render.terminal_text import plain

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.recording.log_reader import CompileLog


@app.command("compiles")
def compiles_command(
    log_path: Path = typer.Argument(
        ...,
        metavar="LOG_OR_RUN_DIR",
        help="A jaxdiag compile log (.jsonl), or a folder of them or of captures (logs and sidecars read recursively).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (schema jaxdiag.compiles/1) instead of a table."),
    function: Optional[str] = typer.Option(
        None, "--function", help="Only this function (its name or its module.qualname)."
    ),
    width: Optional[int] = typer.Option(None, help="Terminal width for the table."),
) -> None:
    """List compiles per function with their causes and advice (padding buckets, typing, hoisting).

    Exit status: 0 success, 2 bad input (one line naming the file and the problem).
    """
    width = check_width(width)
    from jaxdiag.recording.advice import advise, with_explanations

    log = read_records(log_path)
    _warn_skipped(log_path, log.skipped_lines)
    records = with_explanations(log.records)
    if function is not None:
        records = tuple(r for r in records if function in (r.function, r.qualname))
        if not records:
            seen = sorted({r.function for r in log.records})
            shown = ", ".join(seen[:10]) + (", ..." if len(seen) > 10 else "")
            raise CompileLogError(f"{log_path}: no compiles of function {function!r}; functions in the log: {shown}")
    log = dataclasses.replace(log, records=records)
    advice = advise(records)
    from jaxdiag.render.compiles_table import render, write_json

    if json_out:
        write_json(log, advice, sys.stdout.write)
        return
    color = sys.stdout.isatty()
    typer.echo(render(log, advice, width=width, color=color), nl=False, color=color)


def read_records(path: Path) -> "CompileLog":
    """The compile records of ``path``: its JSONL logs and, in a folder, its capture sidecars.

    Raises:
      CompileLogError: nothing there holds a compile record (naming what was looked at),
        or a log file is compressed or binary.
    """
    from jaxdiag.recording.log_reader import CompileLog, read_compile_log

    if path.is_file():
        _refuse_binary(path)
        return read_compile_log(path)
    if not path.is_dir():
        return read_compile_log(path)  # its own message for a missing path
    side, side_files, side_skipped = _sidecar_records(path)
    try:
        log = read_compile_log(path)
    except CompileLogError:
        if not side:
            if side_files:
                raise CompileLogError(
                    f"{path}: no compile log (*.jsonl) and no compile record in its "
                    f"{len(side_files)} capture sidecar(s)"
                ) from None
            raise
        log = CompileLog((), ())
    seen = {_identity(r) for r in log.records}
    extra = [r for r in side if _identity(r) not in seen]
    records = sorted((*log.records, *extra), key=lambda r: r.time_unix)
    return dataclasses.replace(
        log, records=tuple(records), files=(*log.files, *side_files), skipped_lines=(*log.skipped_lines, *side_skipped)
    )


def _sidecar_records(root: Path) -> tuple[list, tuple[str, ...], list[tuple[str, int, str]]]:
    """Compile records of every capture sidecar under ``root``, the sidecars read, and what was skipped."""
    from jaxdiag.capturing.sidecar import SIDECAR_GLOB, read_sidecars
    from jaxdiag.recording.log_reader import records_from_dicts

    try:
        folders = sorted({p.parent for p in root.rglob(SIDECAR_GLOB) if p.is_file()})
    except OSError as exc:
        raise CompileLogError(f"{root}: cannot list folder ({exc.strerror or exc})") from None
    records: list = []
    files: list[str] = []
    skipped: list[tuple[str, int, str]] = []
    for folder in folders:
        facts = read_sidecars(folder)
        if facts is None:
            continue
        found, bad = records_from_dicts(list(facts.compile_log), f"{folder}/{SIDECAR_GLOB}")
        records += found
        skipped += [(src, n, f"compile record {n} of the sidecars: {why}") for src, n, why in bad]
        files += facts.files
    return records, tuple(files), skipped


def _identity(r: Any) -> tuple[Any, ...]:
    return (r.qualname, r.compile_index, round(float(r.time_unix), 6), r.function)


def _refuse_binary(path: Path) -> None:
    """``CompileLogError`` for a compressed or binary file, which would read as lines of noise."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise CompileLogError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if head.startswith(b"\x1f\x8b"):
        raise CompileLogError(f"{path}: gzip-compressed; expected a compile log (JSONL text): decompress it first")
    nul = head.find(b"\x00")
    if nul >= 0:
        raise CompileLogError(f"{path}: binary data (a NUL byte at offset {nul}); expected a compile log (JSONL text)")


def _warn_skipped(path: Path, skipped: tuple[tuple[str, int, str], ...]) -> None:
    if skipped:
        file, line, reason = skipped[0]
        typer.echo(
            plain(  # the reason may quote the file: shown, never acted on
                f"jaxdiag: warning: skipped {len(skipped)} corrupt or unknown line(s) in {path} "
                f"(first: {file}:{line}: {reason})",
            ),
            err=True,
        )
