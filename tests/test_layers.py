"""The package flows one way: every import of a jaxdiag module points to its own layer or one below.

Layers, lowest first (each subpackage, or top-level module, in exactly one):

0. foundation: ``errors``, ``files``, ``processes`` (reading workers), ``config`` (``Settings``), ``version``,
   ``jax_internals`` (what JAX exposes).
1. recording and capture: ``recording``, ``capturing``, ``sharding`` (what a compile placed where),
   ``monitoring`` (a long run watched step by step).
2. trace: ``trace`` (a capture read into frames).
3. analyses: ``analyses``, and ``xprof_tools`` (XProf's converters, run as analyses).
4. reporting: ``reporting`` (one ``Report``).
5. render and checks: ``render``, ``checks``.
6. interfaces: ``cli``, ``__main__``, and the package's own ``__init__`` (the public API, loaded lazily).

Imports are read from the source (``ast``), wherever they are written (inside functions too), and so
are module paths written as strings (``"jaxdiag.render.terminal:_top_ops"``): a registry that names a
module imports it as surely as an ``import`` does.

The one allowed exception: ``jaxdiag.reporting.model`` -> ``render``. Jupyter asks an object to show
itself, so the ``Report`` hands itself to the notebook renderers (``Report.dashboard``,
``Report._repr_html_``), importing them when called. Any other arrow up fails.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jaxdiag"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "files", "processes", "config", "version", "jax_internals"}),
    frozenset({"recording", "capturing", "sharding", "monitoring"}),
    frozenset({"trace"}),
    frozenset({"analyses", "xprof_tools"}),
    frozenset({"reporting"}),
    frozenset({"render", "checks"}),
    frozenset({"cli", "__main__", "__init__"}),
)
#: ``(importing module, imported part)``: the one arrow up the design allows (see the module docstring).
ALLOWED = frozenset({("jaxdiag.reporting.model", "render")})
_MODULE_STRING = re.compile(r"^jaxdiag(\.[A-Za-z_]\w*)+(:\w+)?$")


def _part(module: str) -> str:
    """The layer part of a dotted module name: its subpackage or top-level module, ``__init__`` for the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _parts() -> set[str]:
    return {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, parts: set[str], package_dir: Path = PACKAGE) -> set[tuple[str, int]]:
    """``(imported module, line)`` of every jaxdiag module ``path`` imports, by statement or by name in a string."""
    module = _module_name(path, package_dir)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base == "jaxdiag":  # ``from jaxdiag import config``: the submodule; else the package's API
                found.update((f"jaxdiag.{a.name}" if a.name in parts else "jaxdiag", node.lineno) for a in node.names)
            else:
                found.add((base, node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_STRING.match(node.value):
            name = node.value.partition(":")[0]
            if _part(name) in parts:  # a module's path, not another dotted name (``jaxdiag.check``, a marker)
                found.add((name, node.lineno))
    return {(name, line) for name, line in found if name == "jaxdiag" or name.startswith("jaxdiag.")}


def up_arrows() -> dict[tuple[str, str], list[str]]:
    """Every import that points to a higher layer: ``(importing module, imported part)`` -> where."""
    layer_of = {part: level for level, layer in enumerate(LAYERS) for part in layer}
    parts = _parts()
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        mine = _part(module) if module != "jaxdiag" else "__init__"
        for name, line in sorted(imports(path, parts)):
            theirs = _part(name)
            if layer_of[theirs] > layer_of[mine]:
                found.setdefault((module, theirs), []).append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    return found


def test_every_part_of_the_package_has_a_layer() -> None:
    named = set().union(*LAYERS)
    assert _parts() - {"py.typed"} <= named, sorted(_parts() - named)
    assert sum(map(len, LAYERS)) == len(named), "a part is in two layers"


def test_no_import_points_up_but_the_one_allowed() -> None:
    found = up_arrows()
    new = {arrow: where for arrow, where in found.items() if arrow not in ALLOWED}
    assert not new, f"imports that point up a layer: {new}"
    assert set(ALLOWED) <= set(found), "the allowed exception is gone: update ALLOWED and the docstring"


def test_an_arrow_up_is_found(tmp_path: Path) -> None:
    """The reader of imports sees statements anywhere, relative imports and module names in strings."""
    source = tmp_path / "jaxdiag" / "trace" / "mod.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "def f():\n"
        "    from jaxdiag.reporting import build\n"
        "    from ..analyses import base\n"
        "    from jaxdiag import config, report\n"
        "SECTION = 'jaxdiag.render.terminal:_rows'\n"
    )
    got = imports(source, {"config", "reporting", "analyses", "render", "trace"}, tmp_path / "jaxdiag")
    assert {name for name, _ in got} == {
        "jaxdiag.reporting",
        "jaxdiag.analyses",
        "jaxdiag.config",
        "jaxdiag",
        "jaxdiag.render.terminal",
    }
