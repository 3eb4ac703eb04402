"""A Triton kernel never reads a tensor without storage: such calls run the region eagerly."""

import logging

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.passes.pipeline import compile_graph  # noqa: E402


def program(x, y):
    return torch.sigmoid(x * y + 1.0) * 2.0


def _lowered():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    gm = compile_graph(tpg.capture(program, x, y), (x, y), backends=["triton"])
    kernels = [n for n in gm.graph.nodes if getattr(n.target, "backend", None) == "triton"]
    assert kernels, "the pointwise chain must become a Triton kernel"
    return gm


def test_batched_operands_run_the_region_eagerly_with_a_warning(caplog):
    gm = _lowered()
    x, y = torch.randn(3, 4, 8), torch.randn(3, 4, 8)
    with caplog.at_level(logging.WARNING, logger="tensorplay_graph.backends.triton.plan"):
        got = torch.vmap(gm)(x, y)  # the kernel sees batched tensors
    torch.testing.assert_close(got, torch.vmap(program)(x, y))
    assert any("runs eagerly" in r.getMessage() and "without storage" in r.getMessage()
               for r in caplog.records)
    plain = torch.randn(4, 8), torch.randn(4, 8)  # the kernel still serves ordinary calls
    torch.testing.assert_close(gm(*plain), program(*plain))


def test_dynamo_graph_with_vmap_runs_on_triton(fresh_dynamo):

    def f(x, y):
        mask = torch.vmap(lambda a, b: a * b + 1.0)(x, y)
        return torch.sigmoid(mask) * 2.0 + x

    compiled = torch.compile(f, backend="tensorplay_graph", options={"backends": ["triton"]})
    x, y = torch.randn(3, 8), torch.randn(3, 8)
    torch.testing.assert_close(compiled(x, y), f(x, y))
