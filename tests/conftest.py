"""Suite-wide settings: every captured graph is linted, and so is the graph after every pass.

Outside tests lint runs only in debug mode (``TPG_LINT=1`` or a ``debug_dir``), since on
big programs it costs about as much as the planning passes; here it must catch every
broken invariant a change introduces.
"""

import os

os.environ["TPG_LINT"] = "1"

import importlib
import importlib.util

import pytest

#: The frameworks installed here (the GPU machine has no TensorPlay; a machine may lack torch).
FRAMEWORK_NAMES = [name for name in ("torch", "tensorplay") if importlib.util.find_spec(name)]


class Framework:
    """One framework for tests that run the same program in each: ``name``, ``mod`` (the
    top-level module), ``F`` (its ``nn.functional``) and comparison helpers."""

    def __init__(self, name):
        self.name = name
        self.mod = importlib.import_module(name)
        self.F = importlib.import_module(f"{name}.nn.functional")

    @staticmethod
    def numpy(t):
        return t.detach().numpy() if hasattr(t, "detach") else t.numpy()

    def assert_close(self, got, want, tol=1e-4):
        """Same shape and dtype, values within ``tol`` (compared in float64)."""
        assert tuple(got.shape) == tuple(want.shape) and str(got.dtype) == str(want.dtype)
        diff = abs(self.numpy(got).astype("float64") - self.numpy(want).astype("float64"))
        assert diff.max() <= tol if diff.size else True

    def __repr__(self):
        return self.name


@pytest.fixture(params=FRAMEWORK_NAMES)
def fw(request):
    """Each installed framework in turn (a :class:`Framework`)."""
    return Framework(request.param)


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches cleared before and after the test (compiles elsewhere in the process
    would otherwise mark dims dynamic or reuse graphs)."""
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
