"""Every test of reading runs over both backends of the reader contract.

``xspace`` reads with ``contract.reader()``; here each test of this folder runs once with
``ColumnReader`` (the loader's own, where upb is installed and ``_xline`` was built) and once with
``ProfileDataReader`` (jaxlib's, the reference), chosen by ``JAXDIAG_READER``, which worker processes
and the programs a test starts inherit. Outside CI the ``ColumnReader`` runs skip where ``_xline`` was
not built (no C compiler at install); with ``CI`` set they fail, since CI is where it must be seen to build.
"""

from __future__ import annotations

import os

import pytest

from jaxdiag.trace import schema
from jaxdiag.trace.contract import READER_VARIABLE, line_decoder


def needs_line_decoder() -> None:
    """Skip (outside CI) or fail (with ``CI`` set) where ``jaxdiag.trace._xline`` was not built."""
    if line_decoder() is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but jaxdiag.trace._xline was not built: pip install needs a C compiler")
        pytest.skip("jaxdiag.trace._xline was not built (no C compiler at install): the loader reads with ProfileData")


@pytest.fixture(autouse=True, params=["column", "profile_data"])
def trace_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The backend the loader reads with in this test."""
    if request.param == "column":
        if schema.message_classes() is None:
            pytest.skip("protobuf without upb: the loader reads with ProfileDataReader")
        needs_line_decoder()
    monkeypatch.setenv(READER_VARIABLE, request.param)
    return str(request.param)


@pytest.fixture
def xline() -> object:
    """The compiled line decoder, for a test that needs it (see ``needs_line_decoder``)."""
    needs_line_decoder()
    return line_decoder()
