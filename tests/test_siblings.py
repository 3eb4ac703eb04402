"""Horizontal fusion of sibling regions (``passes/siblings.py``), planned as on CUDA.

The values of merged regions run through Triton's interpreter in
``tests/interp/test_sibling_regions.py``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402


def _plan(fn, *args):
    return tpg.explain(fn, *args, backend="triton")


def _args():
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 32, generator=g), torch.randn(32, 32, generator=g)


def two_readers(x, w):
    y = x @ w  # a barrier both regions read
    return torch.relu(y) * 2, torch.sigmoid(y) + 1


def two_shapes(x, w):
    y = x @ w
    return torch.relu(y) * 2, (torch.sigmoid(y) + 1).sum(-1)


def joined_by_a_path(x, w):
    y = x @ w
    a = torch.relu(y) * 2
    return a, torch.sigmoid(y) + (a @ w)  # the second region reads the first through a GEMM


def fenced(x, w):
    y = x @ w
    a = torch.relu(y) * 2
    x.add_(1)  # a mutation between them: nothing moves across it
    return a, torch.sigmoid(y) + x


def test_regions_reading_one_value_and_writing_one_shape_merge():
    plan = _plan(two_readers, *_args())
    assert len(plan.regions) == 1
    assert {"relu", "mul", "sigmoid", "add"} <= set(plan.regions[0].nodes)


@pytest.mark.parametrize("fn", [two_shapes, joined_by_a_path, fenced])
def test_siblings_stay_apart_when_shapes_differ_a_path_joins_them_or_a_fence_divides(fn):
    plan = _plan(fn, *_args())
    relu, sigmoid = plan.region_of("relu"), plan.region_of("sigmoid")
    assert relu is not None and sigmoid is not None and relu is not sigmoid
