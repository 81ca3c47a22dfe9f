"""Check thresholds: percent strings, the pyproject table, flags over the table, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxdiag import config
from jaxdiag.checks import thresholds as T
from jaxdiag.checks.thresholds import CheckThresholds, load_thresholds
from jaxdiag.errors import ConfigError, JaxdiagWarning


@pytest.mark.parametrize(
    "value, expected",
    [
        ("5%", 0.05),
        (" 12.5% ", 0.125),
        (0.05, 0.05),
        ("0.3", 0.3),
        (0, 0.0),
        ("150%", 1.5),
        ("off", None),
        ("None", None),
        (False, None),
        (None, None),
    ],
)
def test_parse_fraction(value, expected) -> None:
    got = T.parse_fraction(value)
    assert got is None if expected is None else got == pytest.approx(expected)


@pytest.mark.parametrize(
    "value, message",
    [
        ("five", "is not a share"),
        (5, 'ambiguous; write "5%" or 0.05'),
        ("-3%", "non-negative"),
        (True, "is not a share"),
        ("nan", "non-negative"),
    ],
)
def test_parse_fraction_errors(value, message) -> None:
    with pytest.raises(ValueError, match=message):
        T.parse_fraction(value)


def test_replace_parses_and_names_the_threshold() -> None:
    th = CheckThresholds().replace(step_time_regression="10%", max_steady_recompiles="off", min_steady_steps=5)
    assert (th.step_time_regression, th.max_steady_recompiles, th.min_steady_steps) == (0.1, None, 5)
    with pytest.raises(ConfigError, match="min_steady_steps: expected a non-negative whole number, got 2.5"):
        CheckThresholds().replace(min_steady_steps=2.5)
    with pytest.raises(ConfigError, match="unknown check threshold 'step_time'"):
        CheckThresholds().replace(step_time="5%")


def _pyproject(folder: Path, table: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text('[project]\nname = "x"\n\n[tool.jaxdiag.check]\n' + table)
    return path


def test_table_is_read_from_the_nearest_pyproject_and_flags_win(tmp_path: Path) -> None:
    path = _pyproject(
        tmp_path,
        'max_steady_recompiles = 0\nstep_time_regression = "5%"\n'
        'tokens_per_s_drop = "3%"\nhost_wait_share = "10%"\nmin_steady_steps = 5\n',
    )
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    th, used = load_thresholds({"step_time_regression": "8%", "small_op_share": None}, search_from=deep)
    assert used == path
    assert th == CheckThresholds(
        max_steady_recompiles=0,
        step_time_regression=0.08,
        tokens_per_s_drop=0.03,
        host_wait_share=0.1,
        min_steady_steps=5,
    )


def test_no_table_keeps_the_defaults(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert load_thresholds(search_from=tmp_path) == (T.DEFAULT_CHECK_THRESHOLDS, None)


@pytest.mark.parametrize(
    "table, message",
    [
        ('step_time = "5%"\n', r"pyproject.toml \[tool.jaxdiag.check\]: unknown check threshold 'step_time'"),
        ("host_wait_share = 10\n", r"\[tool.jaxdiag.check\]: host_wait_share: 10 is ambiguous"),
        ("max_steady_recompiles = -1\n", "max_steady_recompiles: expected a non-negative whole number"),
        ("step_time_regression = [\n", "not valid TOML"),
    ],
)
def test_bad_tables_name_the_file_and_key(tmp_path: Path, table: str, message: str) -> None:
    path = _pyproject(tmp_path, table)
    with pytest.raises(ConfigError, match=message) as info:
        load_thresholds(pyproject=path)
    assert str(path) in str(info.value)


def test_bad_flag_is_named_as_a_flag() -> None:
    with pytest.raises(ConfigError, match=r"^--tokens-per-s-drop: 'lots' is not a share"):
        load_thresholds({"tokens_per_s_drop": "lots"}, pyproject=None, search_from="/")


def test_without_a_toml_reader_the_file_is_skipped_with_a_warning(tmp_path: Path, monkeypatch) -> None:
    # What Python 3.10 without tomli does.
    path = _pyproject(tmp_path, 'step_time_regression = "50%"\n')
    monkeypatch.setattr(config, "_toml_loads", lambda: None)
    with pytest.warns(JaxdiagWarning, match="needs `pip install tomli`"):
        th, used = load_thresholds(pyproject=path)
    assert (th, used) == (T.DEFAULT_CHECK_THRESHOLDS, None)
