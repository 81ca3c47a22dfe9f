"""Compare two runs of JAX's tests test by test, and sort each difference into a class.

A difference whose ``jaxdiag.jit`` side fails at a statement that reads JAX's
private jit internals (the C++ cache's size or misses, ``jtu.count_*`` counters
of traces, lowerings and compiles) is classed ``"private internals"``: those
count what JAX does internally, which a wrapper may change without changing what
the function returns, raises or donates. A test one run never reached (it timed
out or crashed first) is ``"unreached"``. Everything else is ``"real"``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path
from typing import Any

PASSING = frozenset({"passed", "xfailed", "skipped"})

#: Text in a failing statement that marks it as reading JAX's private jit internals.
PRIVATE_MARKERS: dict[str, str] = {
    "_cache_size": "counts the entries of JAX's C++ jit cache",
    "count_pjit_cpp_cache_miss": "counts misses of JAX's C++ jit fast path",
    "_cache_miss": "counts misses of JAX's C++ jit fast path",
    "count_jit_tracing_cache_miss": "counts JAX's internal trace-cache misses",
    "count_jit_compilation_cache_miss": "counts JAX's internal compilation-cache misses",
    "count_jit_and_pmap_lowerings": "counts JAX's internal lowerings",
    "assert_num_jit_and_pmap_compilations": "counts JAX's internal compiles",
    "count_subjaxpr_to_hlo_conversion": "counts JAX's internal jaxpr-to-HLO conversions",
    "count_primitive_compiles": "counts JAX's internal primitive compiles",
    "count_device_put": "counts JAX's internal device_put calls",
    "count_internal_device_puts": "counts JAX's internal device_put calls",
    "_cpp_pjit_cache": "reads JAX's C++ jit cache",
    # JAX's traceback-size regression tests: jaxdiag.jit's trace-time wrapper is one more
    # Python frame while the function is traced (never on cache hits; left out of
    # JAX's filtered tracebacks).
    "cur_depth()": "counts Python stack frames while tracing, which jaxdiag.jit's trace-time wrapper adds one to",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """One test's outcome in one run."""

    nodeid: str
    outcome: str  # passed failed error skipped xfailed xpassed missing
    message: str = ""
    line: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Difference:
    """A test whose outcome under ``jax.jit`` and under ``jaxdiag.jit`` differ."""

    nodeid: str
    with_jax: Outcome
    with_jaxdiag: Outcome
    kind: str  # "private internals", "real" or "unreached"
    reason: str
    reproduced: bool | None = None  # None: not re-run

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "class": self.kind,
            "reason": self.reason,
            "reproduced": self.reproduced,
            "with_jax": dataclasses.asdict(self.with_jax),
            "with_jaxdiag": dataclasses.asdict(self.with_jaxdiag),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Comparison:
    """Test-by-test comparison of the two runs."""

    total: int
    same: dict[str, int]  # outcome -> tests with that outcome in both runs
    differences: tuple[Difference, ...]

    def by_class(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for d in self.differences:
            counts[d.kind] = counts.get(d.kind, 0) + 1
        return counts


def compare(with_jax: dict[str, Outcome], with_jaxdiag: dict[str, Outcome], root: Path) -> Comparison:
    """Pair the runs' outcomes by test id; tests one run never reached count as ``missing``."""
    same: dict[str, int] = {}
    differences = []
    for nodeid in sorted(with_jax.keys() | with_jaxdiag.keys()):
        a = with_jax.get(nodeid) or Outcome(nodeid, "missing")
        b = with_jaxdiag.get(nodeid) or Outcome(nodeid, "missing")
        if a.outcome == b.outcome:
            same[a.outcome] = same.get(a.outcome, 0) + 1
            continue
        if "missing" in (a.outcome, b.outcome):
            side = "jax.jit" if a.outcome == "missing" else "jaxdiag.jit"
            kind, reason = "unreached", f"the {side} run stopped before it (timeout or crash)"
        elif b.outcome in PASSING:
            kind, reason = "real", "passes with jaxdiag.jit only"
        else:
            kind, reason = classify(nodeid, b, root)
        differences.append(Difference(nodeid, a, b, kind, reason))
    return Comparison(len(with_jax.keys() | with_jaxdiag.keys()), same, tuple(differences))


def classify(nodeid: str, failed: Outcome, root: Path) -> tuple[str, str]:
    """``("private internals", why)`` when the failing statement reads a private counter."""
    path = root / nodeid.split("::", 1)[0]
    text = _statement_text(path, failed.line) if failed.line else None
    if text is None:
        return "real", "failure outside the test file's own lines"
    for marker, why in sorted(PRIVATE_MARKERS.items(), key=lambda item: -len(item[0])):
        if marker in text:  # longest first: count_pjit_cpp_cache_miss before _cache_miss
            return "private internals", f"asserts on {marker}: {why}"
    return "real", "fails at: " + " ".join(text.split())[:160]


def _statement_text(path: Path, line: int) -> str | None:
    """The failing statement's text, with the text bound to any name it reads.

    ``with jtu.count_jit_tracing_cache_miss() as count: ...`` then
    ``self.assertEqual(count(), 1)`` fails at a line that names only ``count``,
    so names bound in the same function are followed back to what they hold.
    """
    parsed = _parse(path)
    if parsed is None:
        return None
    source, tree = parsed
    function = stmt = None
    for node in ast.walk(tree):
        if not (hasattr(node, "lineno") and node.lineno <= line <= (node.end_lineno or 0)):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if function is None or node.lineno >= function.lineno:
                function = node
        elif isinstance(node, ast.stmt) and (stmt is None or node.lineno >= stmt.lineno):
            stmt = node
    if stmt is None:
        return None
    text = ast.get_source_segment(source, _header(stmt, line)) or ""
    bound = _bindings(function, source) if function is not None else {}
    read = {n.id for n in ast.walk(_header(stmt, line)) if isinstance(n, ast.Name)}
    return "\n".join([text, *(bound[name] for name in sorted(read & bound.keys()))])


def _header(stmt: ast.stmt, line: int) -> ast.AST:
    """A compound statement failing on its own line failed in its header (a ``with``'s exit)."""
    if isinstance(stmt, (ast.With, ast.AsyncWith)) and stmt.lineno == line:
        return ast.Tuple(
            elts=[item.context_expr for item in stmt.items],
            ctx=ast.Load(),
            lineno=stmt.lineno,
            col_offset=stmt.col_offset,
            end_lineno=stmt.items[-1].context_expr.end_lineno,
            end_col_offset=stmt.items[-1].context_expr.end_col_offset,
        )
    return stmt


def _bindings(function: ast.AST, source: str) -> dict[str, str]:
    bound: dict[str, str] = {}
    for node in ast.walk(function):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if isinstance(item.optional_vars, ast.Name):
                    bound[item.optional_vars.id] = ast.get_source_segment(source, item.context_expr) or ""
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bound[name.id] = ast.get_source_segment(source, node.value) or ""
    return bound


@functools.cache
def _parse(path: Path) -> tuple[str, ast.Module] | None:
    try:
        source = path.read_text(encoding="utf-8")
        return source, ast.parse(source)
    except (OSError, SyntaxError):
        return None
