"""Run JAX's own jit tests with ``jax.jit`` and again with ``jaxdiag.jit``, and compare.

``jaxdiag.jit`` promises to return what ``jax.jit`` returns, raise what it raises
and donate what it donates; JAX's ``tests/api_test.py``, ``pjit_test.py``,
``aot_test.py``, ``pickle_test.py`` and ``jax_jit_test.py`` at the installed JAX's
tag define those semantics. Each file set
runs twice in a pytest subprocess, the second time with ``jit_swap_plugin``
swapping ``jax.jit`` for ``jaxdiag.jit``; outcomes are compared test by test, and
each difference is re-run alone in both modes to tell a reproducible one from
an order-dependent or flaky one.

    python tools/run_jax_jit_tests.py [JAX_CHECKOUT] [--json out.json] [-k EXPR]

Exit status: 0 when every difference is in private internals, 1 when one is
"real" or a run stopped early ("unreached"), 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jit_test_diff import Comparison, Outcome, compare  # noqa: E402

TOOLS = Path(__file__).resolve().parent
MIRROR = Path("/work/.mirror/jax-ml+jax/repo")
TEST_FILES = (
    "tests/api_test.py",
    "tests/pjit_test.py",
    "tests/aot_test.py",
    "tests/pickle_test.py",
    "tests/jax_jit_test.py",
)
#: Besides the tests, the files that make pytest run them as JAX's CI does
#: (``filterwarnings = error``, ``--import-mode=importlib``).
CONFIG_FILES = ("pyproject.toml", "conftest.py")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


class InputError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    """One pytest subprocess and what it left."""

    label: str
    outcomes: dict[str, Outcome]
    seconds: float
    returncode: int | None  # None: killed at the timeout
    log: Path
    compiles: int | None = None  # compiles jaxdiag recorded (its run only)
    warnings: tuple[str, ...] = ()  # jaxdiag's warnings, "nodeid: category: message"


def extract_from_mirror(mirror: Path, dest: Path, files: tuple[str, ...]) -> str:
    """Write ``files`` (and pytest config) at tag ``jax-v<installed jax>`` under ``dest``."""
    tag = f"jax-v{metadata.version('jax')}"
    for name in (*files, *CONFIG_FILES):
        shown = subprocess.run(["git", "-C", str(mirror), "show", f"{tag}:{name}"], capture_output=True, check=False)
        if shown.returncode != 0:
            raise InputError(f"{mirror}: no {name} at tag {tag}: {shown.stderr.decode(errors='replace').strip()}")
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(shown.stdout)
    return tag


def checkout_root(folder: Path, files: tuple[str, ...]) -> Path:
    """The folder holding ``tests/``: ``folder`` itself, or its parent when it is ``tests/``."""
    for root in (folder, folder.parent):
        if all((root / name).is_file() for name in files):
            return root
    raise InputError(f"{folder}: not a JAX checkout or tests folder (need {', '.join(files)})")


def run_pytest(
    root: Path,
    files: tuple[str, ...],
    *,
    swap: bool,
    out: Path,
    timeout: float,
    extra: list[str],
    analysis: bool = True,
    scope: str = "tests",
) -> Run:
    """Run ``files`` in one pytest subprocess; outcomes stream to a JSON-lines file.

    With ``swap``, jaxdiag writes its compile log under ``out`` (and, with
    ``analysis``, the cost and memory figures), so its whole recording path runs.
    """
    label = "jaxdiag" if swap else "jax"
    outcomes_file, log, compile_log = out / f"{label}.jsonl", out / f"{label}.log", out / "compile-log"
    outcomes_file.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(TOOLS), os.environ.get("PYTHONPATH", "")) if p))
    # 8 host devices for the pjit tests; the environment may override the rest.
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
    env.setdefault("JAX_NUM_GENERATED_CASES", "1")
    env.setdefault("JAX_PLATFORMS", "cpu")
    if swap:
        shutil.rmtree(compile_log, ignore_errors=True)
        env.update(JAXDIAG_LOG_DIR=str(compile_log), JAXDIAG_COMPILE_ANALYSIS=str(int(analysis)))
    # -P: the checkout's own jax/ folder must not shadow the installed jax.
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "pytest",
        "-q",
        "-rN",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:jaxdiag",
        "-p",
        "no:jaxdiag-checks",
        "-p",
        "jit_swap_plugin",
        "-W",
        "default::jaxdiag.errors.JaxdiagWarning",
        "--outcomes-file",
        str(outcomes_file),
        *(["--swap-jit", scope] if swap else []),
        *extra,
        *files,
    ]
    start = time.monotonic()
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            returncode: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            returncode = None
    compiles = sum(len(f.read_bytes().splitlines()) for f in compile_log.glob("*.jsonl")) if swap else None
    outcomes, warned = read_outcomes(outcomes_file)
    return Run(label, outcomes, time.monotonic() - start, returncode, log, compiles, warned)


def read_outcomes(path: Path) -> tuple[dict[str, Outcome], tuple[str, ...]]:
    """The outcomes file's tests by id, and its jaxdiag warnings."""
    outcomes, warned = {}, []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            if "warning" in d:
                warned.append(f"{d['nodeid']}: {d['category']}: {d['warning']}")
            else:
                outcomes[d["nodeid"]] = Outcome(d["nodeid"], d["outcome"], d.get("message", ""), d.get("line"))
    return outcomes, tuple(warned)


def recheck(root: Path, comparison: Comparison, out: Path, timeout: float, **options: Any) -> Comparison:
    """Re-run each difference alone, in both modes; mark whether it shows again."""
    ids = [d.nodeid for d in comparison.differences]
    if not ids:
        return comparison
    alone = out / "alone"
    alone.mkdir(exist_ok=True)
    runs = [
        run_pytest(root, tuple(ids), swap=swap, out=alone, timeout=timeout, extra=[], **options)
        for swap in (False, True)
    ]
    differences = tuple(
        dataclasses.replace(
            d,
            reproduced=(
                d.nodeid in runs[0].outcomes
                and d.nodeid in runs[1].outcomes
                and runs[0].outcomes[d.nodeid].outcome != runs[1].outcomes[d.nodeid].outcome
            ),
        )
        for d in comparison.differences
    )
    return dataclasses.replace(comparison, differences=differences)


def failed_both_messages_differ(a: Run, b: Run) -> list[str]:
    """Tests failing in both runs, but with different messages (addresses aside)."""
    return sorted(
        n
        for n, o in a.outcomes.items()
        if o.outcome in ("failed", "error")
        and n in b.outcomes
        and b.outcomes[n].outcome == o.outcome
        and _ADDRESS.sub("0x?", o.message) != _ADDRESS.sub("0x?", b.outcomes[n].message)
    )


def report(runs: list[Run], comparison: Comparison, message_diffs: list[str]) -> str:
    lines = []
    for run in runs:
        status = "timed out" if run.returncode is None else f"exit {run.returncode}"
        recorded = "" if run.compiles is None else f"; {run.compiles} compiles recorded"
        lines.append(
            f"with {run.label}.jit: {len(run.outcomes)} tests in {run.seconds:.0f} s "
            f"({status}{recorded}; log {run.log})"
        )
    same = ", ".join(f"{n} {k}" for k, n in sorted(comparison.same.items()))
    lines.append(f"{comparison.total} tests; same outcome: {sum(comparison.same.values())} ({same})")
    by_class = ", ".join(f"{n} {k}" for k, n in sorted(comparison.by_class().items()))
    lines.append(f"differences: {len(comparison.differences)} ({by_class or 'none'})")
    for d in comparison.differences:
        shown = {None: "", True: "; reproduced alone", False: "; NOT reproduced alone"}
        lines.append(
            f"\n[{d.kind}] {d.nodeid}{shown[d.reproduced]}\n"
            f"  jax.jit: {d.with_jax.outcome}  jaxdiag.jit: {d.with_jaxdiag.outcome}\n"
            f"  why: {d.reason}"
        )
        for side in (d.with_jax, d.with_jaxdiag):
            if side.message:
                lines.append("  " + side.outcome + ": " + side.message.strip()[:800].replace("\n", "\n    "))
    for run in runs:
        if run.warnings:
            lines.append(f"\njaxdiag warned in the {run.label}.jit run ({len(run.warnings)}):")
            lines += [f"  {w[:400]}" for w in run.warnings]
    if message_diffs:
        lines.append(f"\nfailed in both with different messages ({len(message_diffs)}):")
        lines += [f"  {n}" for n in message_diffs]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "jax_tests",
        nargs="?",
        type=Path,
        help=f"a JAX checkout (or its tests/ folder); default: extract the installed JAX's tag from {MIRROR}",
    )
    parser.add_argument(
        "--files",
        nargs="+",
        default=list(TEST_FILES),
        help="test files, relative to the checkout (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds each pytest run may take (default: %(default)s)"
    )
    parser.add_argument("--out", type=Path, help="folder for logs and outcomes (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="write the comparison here as JSON")
    parser.add_argument(
        "--swap",
        choices=("tests", "all"),
        default="tests",
        help="where jax.jit becomes jaxdiag.jit: where the tests reach it, or "
        "also inside JAX (eager jnp and primitive dispatch) (default: %(default)s)",
    )
    parser.add_argument("--no-recheck", action="store_true", help="do not re-run differences alone")
    parser.add_argument(
        "--no-analysis", action="store_true", help="leave jaxdiag's cost/memory analysis of each compile off"
    )
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, to run a subset")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return _main(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    files = tuple(args.files)
    out = args.out or Path(tempfile.mkdtemp(prefix="jax-jit-tests-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.jax_tests is not None:
        if not args.jax_tests.is_dir():
            raise InputError(f"{args.jax_tests}: no such folder")
        root, source = checkout_root(args.jax_tests.resolve(), files), str(args.jax_tests)
    elif MIRROR.is_dir():
        root = out / "jax"
        source = f"{MIRROR} at {extract_from_mirror(MIRROR, root, files)}"
    else:
        raise InputError(f"give a JAX checkout folder ({MIRROR} does not exist)")
    extra = ["-k", args.keyword] if args.keyword else []
    print(f"JAX tests from {source}; output in {out}", flush=True)
    runs = []
    for swap in (False, True):
        runs.append(
            run_pytest(
                root,
                files,
                swap=swap,
                out=out,
                timeout=args.timeout,
                extra=extra,
                analysis=not args.no_analysis,
                scope=args.swap,
            )
        )
        print(f"  {runs[-1].label}.jit run: {len(runs[-1].outcomes)} tests, {runs[-1].seconds:.0f} s", flush=True)
    comparison = compare(runs[0].outcomes, runs[1].outcomes, root)
    if not args.no_recheck:
        comparison = recheck(root, comparison, out, args.timeout, analysis=not args.no_analysis, scope=args.swap)
    message_diffs = failed_both_messages_differ(*runs)
    print(report(runs, comparison, message_diffs))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "source": source,
                    "files": files,
                    "runs": [
                        {
                            "jit": r.label,
                            "tests": len(r.outcomes),
                            "seconds": round(r.seconds, 1),
                            "returncode": r.returncode,
                            "compiles_recorded": r.compiles,
                            "jaxdiag_warnings": list(r.warnings),
                        }
                        for r in runs
                    ],
                    "total": comparison.total,
                    "same": comparison.same,
                    "differences": [d.to_json() for d in comparison.differences],
                    "failed_both_messages_differ": message_diffs,
                },
                indent=1,
            )
        )
    classes = comparison.by_class()
    return 1 if classes.get("real") or classes.get("unreached") else 0


if __name__ == "__main__":
    sys.exit(main())
