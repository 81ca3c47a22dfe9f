"""Which frames are the program's own code: the ones a step is called from, and a hang is told in.

A frame is a library's when its file lies in the standard library, in an installed
package (a ``site-packages`` or ``dist-packages`` folder on ``sys.path``), or in
jaxdiag; every other file (the script, the user's modules, ``<string>``) is the
program's.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig


@functools.lru_cache(maxsize=1)
def library_folders() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folders = {paths.get("stdlib"), paths.get("purelib"), paths.get("platlib"), here}
    folders.update(p for p in sys.path if "site-packages" in p or "dist-packages" in p)
    return tuple(sorted(f for f in folders if f)) + ("<frozen",)


def is_library(filename: str) -> bool:
    return filename.startswith(library_folders())
