"""Imports every command module so each registers itself on ``app``."""

from jaxdiag.cli import compiles_cmd  # noqa: F401
from jaxdiag.cli import report_cmd  # noqa: F401
from jaxdiag.cli import baseline_cmd  # noqa: F401
from jaxdiag.cli import check_cmd  # noqa: F401
from jaxdiag.cli import diff_cmd  # noqa: F401
from jaxdiag.cli import run_cmd  # noqa: F401
from jaxdiag.cli import sharding_cmd  # noqa: F401
from jaxdiag.cli import open_cmd  # noqa: F401
from jaxdiag.cli import monitor_cmd  # noqa: F401
