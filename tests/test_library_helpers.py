"""Shared helpers for the custom-op library tests: one API over TensorPlay and torch."""

from __future__ import annotations

import itertools
import uuid

import numpy as np
import pytest

_counter = itertools.count()


def fresh_ns() -> str:
    """A namespace no other test uses (the registry is process-wide)."""
    return f"t{uuid.uuid4().hex[:6]}_{next(_counter)}"


class Framework:
    """The few framework calls the tests need, spelled once."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "tensorplay":
            import tensorplay as module
        else:
            import torch as module
        self.module = module

    def tensor(self, data, dtype: str = "float32", requires_grad: bool = False):
        return self.module.tensor(data, dtype=getattr(self.module, dtype), requires_grad=requires_grad)

    def randn(self, *shape, requires_grad: bool = False):
        data = np.random.default_rng(len(shape)).standard_normal(shape).astype("float32")
        return self.tensor(data.tolist(), requires_grad=requires_grad)

    def dtype(self, name: str):
        return getattr(self.module, name)

    def np(self, tensor) -> np.ndarray:
        return np.asarray(tensor.detach().tolist())

    def no_grad(self):
        return self.module.no_grad()

    def autocast(self, dtype: str):
        return self.module.autocast("cpu", dtype=getattr(self.module, dtype))

    def profile(self):
        return self.module.profiler.profile()

    def tensor_class(self):
        return self.module.Tensor

    def __repr__(self) -> str:
        return self.name


FRAMEWORKS = ("tensorplay", "torch")


@pytest.fixture(params=FRAMEWORKS)
def fw(request) -> Framework:
    return Framework(request.param)


def assert_close(actual, expected, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(np.asarray(actual, dtype="float64"),
                               np.asarray(expected, dtype="float64"), atol=atol, rtol=1e-5)
