"""tests/interp runs Triton kernels in Triton's interpreter, which Triton reads from the
environment when it is first imported: the variable must be set before Python starts."""

import os

import pytest

if os.environ.get("TRITON_INTERPRET") != "1":
    raise pytest.UsageError("tests/interp must run with TRITON_INTERPRET=1 set before Python "
                            "starts: TRITON_INTERPRET=1 python -m pytest tests/interp "
                            "(scripts/test.sh does)")


@pytest.fixture
def strict(monkeypatch):
    """``TPG_STRICT_LOWERING``: a region the backend claimed but cannot build or run raises
    instead of running eagerly. Modules opt in: ``pytestmark = pytest.mark.usefixtures("strict")``."""
    monkeypatch.setenv("TPG_STRICT_LOWERING", "1")
