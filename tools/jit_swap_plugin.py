"""pytest plugin for ``run_jax_jit_tests.py``: one JSON line per test, and ``jax.jit`` swapped on demand.

Loaded with ``-p jit_swap_plugin`` (``tools/`` on ``PYTHONPATH``), so it is
registered before any test module is imported. ``--outcomes-file PATH`` writes each
test's outcome as it finishes, flushed per line, so a run cut short by its
timeout still leaves what it got through, and each warning jaxdiag gives (JAX's
pytest config turns warnings into errors, which ``jaxdiag``'s own warnings
never raise, so the runner asks for them with ``-W default::...``).

``--swap-jit=tests`` gives the tests ``jaxdiag.jit`` wherever they reach jit:
``jax.jit`` and ``from jax import jit`` (``jax.jit`` is replaced before the test
modules import), ``api.jit`` (each test module's ``api`` becomes a view of
``jax._src.api`` whose ``jit`` is swapped) and ``jtu.JIT_IMPLEMENTATION``.
JAX's own modules call ``jax._src.api.jit`` for eager ``jnp`` and primitive
dispatch, which no user routes through ``jaxdiag.jit``: ``--swap-jit=all``
replaces that too, as a stress test. ``jax._src.pjit.pjit`` stays JAX's: it is
jit with ``use_resource_env=True``, which ``jaxdiag.jit`` has no way to ask for.
"""

from __future__ import annotations

import functools
import json
import threading
from typing import Any

import pytest

_NOT_GIVEN: Any = object()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jit-swap")
    group.addoption(
        "--swap-jit",
        choices=("tests", "all"),
        default=None,
        help="replace jax.jit by jaxdiag.jit in the tests, or in all of JAX",
    )
    group.addoption("--outcomes-file", default=None, help="append one JSON line per test outcome to this file")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    scope = config.getoption("--swap-jit")
    if scope is not None:
        config.pluginmanager.register(_Swap(everywhere=scope == "all"), "jit-swap")
    path = config.getoption("--outcomes-file")
    if path:
        config.pluginmanager.register(_OutcomeWriter(path), "jit-swap-outcomes")


def swap_jit(everywhere: bool = False) -> Any:
    """Make ``jax.jit`` (and, if ``everywhere``, ``jax._src.api.jit``) be ``jaxdiag.jit``.

    ``jaxdiag.jit`` itself calls ``jax.jit``; a thread-local flag sends that
    inner call to the original, so the swap does not recurse. Returns the
    swapped-in function.
    """
    import jax
    from jax._src import api

    import jaxdiag

    original = api.jit
    inside = threading.local()

    @functools.wraps(original)
    def jit(fun: Any = _NOT_GIVEN, /, **kwargs: Any) -> Any:
        if getattr(inside, "active", False):
            return original(fun, **kwargs) if fun is not _NOT_GIVEN else original(**kwargs)
        if fun is _NOT_GIVEN:  # decorator factory: jit(static_argnums=...)(f)
            return functools.partial(jit, **kwargs)
        inside.active = True
        try:
            return jaxdiag.jit(fun, **kwargs)
        finally:
            inside.active = False

    jit.__jaxdiag_swapped__ = original  # type: ignore[attr-defined]
    jax.jit = jit
    if everywhere:
        api.jit = jit
    return jit


class _Swap:
    """Swaps jit as the first test module is collected, and gives each module its ``api`` view.

    Not earlier: jax, and ``jax._src.test_util`` (whose ``capture_stdout`` binds
    ``sys.stdout`` at import), must first import under pytest's output capture,
    as they do in the run without the swap.
    """

    def __init__(self, everywhere: bool) -> None:
        self._everywhere = everywhere
        self._jit: Any = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> None:
        # Runs inside pytest's capture, just before a module is imported.
        if self._jit is not None or not isinstance(collector, pytest.Module):
            return
        self._jit = swap_jit(self._everywhere)
        from jax._src import test_util  # JIT_IMPLEMENTATION holds api.jit, bound at import

        self._jit._name = "jit"
        test_util.JIT_IMPLEMENTATION = (self._jit, *test_util.JIT_IMPLEMENTATION[1:])

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from jax._src import api

        for module in {id(m): m for m in (getattr(i, "module", None) for i in items) if m}.values():
            if getattr(module, "api", None) is api:
                module.api = _ModuleView(api, jit=self._jit)


class _ModuleView:
    """Reads and writes go to ``module``, except the names given as overrides."""

    def __init__(self, module: Any, **overrides: Any) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_overrides", overrides)

    def __getattr__(self, name: str) -> Any:
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, "_module"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_module"), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(object.__getattribute__(self, "_module"), name)


class _OutcomeWriter:
    """Folds each test's setup/call/teardown reports into one outcome line."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 -- closed at session end
        self._seen: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self._seen.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed"})
        if report.when == "call" and hasattr(report, "wasxfail"):
            entry["outcome"] = "xpassed" if report.passed else "xfailed"
        elif report.skipped:
            entry["outcome"] = "skipped"
            entry["message"] = _skip_reason(report)
        elif report.failed:
            entry["outcome"] = "failed" if report.when == "call" else "error"
            entry.setdefault("message", _crash_message(report))
            entry.setdefault("line", _test_file_line(report))
            entry.setdefault("when", report.when)
        entry["seconds"] = round(entry.get("seconds", 0.0) + report.duration, 3)
        if report.when == "teardown":
            self._file.write(json.dumps(self._seen.pop(report.nodeid)) + "\n")
            self._file.flush()

    def pytest_warning_recorded(self, warning_message: Any, when: str, nodeid: str) -> None:
        if warning_message.category.__module__.startswith("jaxdiag"):
            self._file.write(
                json.dumps(
                    {
                        "warning": str(warning_message.message),
                        "nodeid": nodeid,
                        "category": warning_message.category.__name__,
                    }
                )
                + "\n"
            )
            self._file.flush()

    def pytest_sessionfinish(self) -> None:
        for entry in self._seen.values():  # interrupted mid-test
            self._file.write(json.dumps(entry) + "\n")
        self._file.close()


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)[:500]


def _crash_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    return str(report.longrepr)[-2000:]


def _test_file_line(report: pytest.TestReport) -> int | None:
    """The line of the test's own file where the failure went through last (1-based)."""
    test_file = report.location[0].replace("\\", "/")
    traceback = getattr(report.longrepr, "reprtraceback", None)
    for entry in reversed(getattr(traceback, "reprentries", [])):
        loc = getattr(entry, "reprfileloc", None)
        if loc is not None and str(loc.path).replace("\\", "/").endswith(test_file):
            return int(loc.lineno)
    return None
