"""``tools/run_jax_jit_tests.py``: the classifier on hand-written tests, and the swap end to end."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import jit_test_diff  # noqa: E402
import run_jax_jit_tests  # noqa: E402
from jit_test_diff import Outcome  # noqa: E402

SOURCE = textwrap.dedent("""\
    class T:
      def test_counter(self):
        with jtu.count_pjit_cpp_cache_miss() as count:
          f(1)
        self.assertEqual(count(), 1)

      def test_cache_size(self):
        self.assertEqual(f._cache_size(), 2)

      def test_compiles_on_exit(self):
        with jtu.assert_num_jit_and_pmap_compilations(1):
          f(1)

      def test_value(self):
        count = 3
        with jtu.count_jit_tracing_cache_miss() as traces:
          out = f(1)
        self.assertEqual(out, count)

      def test_traces(self):
        with jtu.count_jit_tracing_cache_miss() as count:
          f(1)
        self.assertEqual(count(), 1)
    """)


@pytest.mark.parametrize(
    ("line", "kind", "reason"),
    [
        (5, "private internals", "count_pjit_cpp_cache_miss:"),
        (23, "private internals", "count_jit_tracing_cache_miss:"),
        (8, "private internals", "_cache_size"),
        (11, "private internals", "assert_num_jit_and_pmap_compilations"),
        (12, "real", "f(1)"),  # inside the counted block: the function itself failed
        (18, "real", "self.assertEqual(out, count)"),
        (None, "real", "outside the test file"),
    ],
)
def test_classify(tmp_path, line, kind, reason):
    (tmp_path / "t_test.py").write_text(SOURCE)
    got_kind, why = jit_test_diff.classify("t_test.py::T::x", Outcome("x", "failed", "", line), tmp_path)
    assert (got_kind, reason in why) == (kind, True), why


def test_compare_pairs_outcomes_and_counts_missing(tmp_path):
    a = {n: Outcome(n, o) for n, o in [("a", "passed"), ("b", "failed"), ("c", "passed"), ("d", "skipped")]}
    b = {n: Outcome(n, o) for n, o in [("a", "passed"), ("b", "passed"), ("d", "skipped")]}
    result = jit_test_diff.compare(a, b, tmp_path)
    assert result.total == 4 and result.same == {"passed": 1, "skipped": 1}
    assert [(d.nodeid, d.with_jaxdiag.outcome, d.kind) for d in result.differences] == [
        ("b", "passed", "real"),
        ("c", "missing", "unreached"),
    ]


SWAPPED = textwrap.dedent("""\
    import functools
    import jax
    from jax import jit
    from jax._src import api

    def test_from_import():
        def by_import(x):
            return x + 1
        assert jit(by_import)(1) == 2

    def test_api_jit():
        def by_api(x):
            return x * 2
        assert api.jit(by_api)(2) == 4

    def test_jax_jit_factory():
        import inspect
        if inspect.signature(jax.jit).parameters["fun"].default is inspect.Parameter.empty:
            factory = functools.partial(jax.jit, static_argnums=1)  # JAX 0.8: no jit(static_argnums=...)
        else:
            factory = jax.jit(static_argnums=1)
        @factory
        def by_attr(x, n):
            return x - n
        assert by_attr(2, 1) == 1

    def test_only_with_jax_jit():
        assert jax.jit is jax._src.api.jit  # the real module: swapped for the tests only

    def test_fails_in_both():
        assert jit(lambda x: x)(1) == 2

    def test_jaxdiag_warning_is_reported():
        import warnings
        from jaxdiag.errors import JaxdiagWarning
        warnings.warn("seen", JaxdiagWarning)
    """)


@pytest.mark.slow
def test_swap_end_to_end(tmp_path):
    """Both runs in subprocesses: the swap reaches every entry point, and only it differs."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "swap_test.py").write_text(SWAPPED)
    out = tmp_path / "out"
    out.mkdir()
    runs = [
        run_jax_jit_tests.run_pytest(
            tmp_path, ("tests/swap_test.py",), swap=swap, out=out, timeout=600, extra=[], analysis=False
        )
        for swap in (False, True)
    ]
    result = jit_test_diff.compare(runs[0].outcomes, runs[1].outcomes, tmp_path)
    assert result.same == {"passed": 4, "failed": 1}
    assert [run.warnings for run in runs] == [
        ("tests/swap_test.py::test_jaxdiag_warning_is_reported: JaxdiagWarning: seen",)
    ] * 2
    [difference] = result.differences
    assert difference.nodeid.endswith("test_only_with_jax_jit")
    assert difference.kind == "real" and "jax.jit is jax._src.api.jit" in difference.reason
    records = [json.loads(line) for f in (out / "compile-log").glob("*.jsonl") for line in f.read_text().splitlines()]
    assert {"by_import", "by_api", "by_attr"} <= {r["function"] for r in records}
    assert runs[1].compiles == len(records)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: tmp / "absent", "absent: no such folder"),
        (lambda tmp: tmp, "not a JAX checkout or tests folder"),
    ],
)
def test_bad_folder_is_one_line_and_exit_2(tmp_path, capsys, make, expected):
    assert run_jax_jit_tests.main([str(make(tmp_path)), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
