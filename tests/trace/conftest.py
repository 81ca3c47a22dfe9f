"""Every test of reading runs over both backends of the reader contract.

``xspace`` reads with ``contract.reader()``; here each test of this folder runs once with
``ColumnReader`` (the loader's own, where upb is installed) and once with ``ProfileDataReader``
(jaxlib's, the reference), chosen by ``JAXDIAG_READER``, which worker processes and the
programs a test starts inherit.
"""

from __future__ import annotations

import pytest

from jaxdiag.trace import schema
from jaxdiag.trace.contract import READER_VARIABLE


@pytest.fixture(autouse=True, params=["column", "profile_data"])
def trace_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The backend the loader reads with in this test."""
    if request.param == "column" and schema.message_classes() is None:
        pytest.skip("protobuf without upb: the loader reads with ProfileDataReader")
    monkeypatch.setenv(READER_VARIABLE, request.param)
    return str(request.param)
