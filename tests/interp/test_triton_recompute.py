"""A Triton region computes again, from its producer's inputs, the cheap values it would read
from another region (``passes/recompute.py``): GPT-2's gelu backward reads the gelu's pieces.
Planned and run in Triton's interpreter, against eager."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tensorplay_graph as tpg  # noqa: E402


def gelu_backward_like(x, w):
    half, t = x * 0.5, torch.tanh(x * 0.79788456)
    y = half * (1 + t)  # the activation: a GEMM operand, written by the first region
    dy = y @ w          # a barrier for Triton: one region before it, one after
    return dy * half * (1 - t * t) + dy * (1 + t) * 0.5


def _inputs():
    torch.manual_seed(0)
    return torch.randn(16, 32), torch.randn(32, 32)


def test_the_reading_region_recomputes_the_pieces_from_the_input():
    plan = tpg.explain(gelu_backward_like, *_inputs(), backend="triton", compile_kernels=False)
    first, second = plan.regions
    assert first.outputs == [first.nodes[-1]]  # only the activation is written
    assert "x" in second.inputs and not set(second.inputs) & set(first.nodes)
    assert any(n.startswith("tanh") for n in second.nodes)


def test_results_equal_eager():
    inputs = _inputs()
    compiled = tpg.compile(gelu_backward_like, backend="triton")
    torch.testing.assert_close(compiled(*inputs), gelu_backward_like(*inputs),
                               rtol=1e-5, atol=1e-5)


def test_programs_that_write_in_place_are_left_alone():
    def program(x, w, seen):
        seen.add_(1)  # a write into an input stays in the graph
        return gelu_backward_like(x, w)
    plan = tpg.explain(program, *_inputs(), torch.zeros(1), backend="triton",
                       compile_kernels=False)
    first, second = [r for r in plan.regions if len(r.nodes) > 1]
    assert len(first.outputs) > 1 and set(second.inputs) & set(first.nodes)
    inputs, seen = _inputs(), torch.zeros(1)
    torch.testing.assert_close(tpg.compile(program, backend="triton")(*inputs, seen),
                               gelu_backward_like(*inputs), rtol=1e-5, atol=1e-5)
    assert seen.item() == 1
