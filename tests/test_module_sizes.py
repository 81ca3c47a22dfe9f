"""Rooms along their natural lines: a module over 400 lines says, at its top, why it is one module.

The count is the file's lines (as ``wc -l`` counts them); the reason is a sentence of the
module's docstring that names the "400 lines" it runs past.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jaxdiag"
MOST_LINES = 400


def test_every_module_over_400_lines_says_why_it_is_one() -> None:
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= MOST_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if f"{MOST_LINES} lines" not in " ".join(doc.split()):
            unexplained.append(f"{path.relative_to(PACKAGE.parent)} ({text.count(chr(10))} lines)")
    assert not unexplained, "modules over 400 lines with no reason at their top: " + ", ".join(unexplained)
