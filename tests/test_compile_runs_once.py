"""Compiling does not run the program again: shape_prop keeps capture's metas, infers the
missing ones, and runs for real only what no rule covers (opaque / data-dependent nodes)."""

from __future__ import annotations

import operator

import numpy as np
import pytest
import tensorplay as tp
import torch

import tensorplay_graph as tpg
from tensorplay_graph.ir.graph import Graph
from tensorplay_graph.ir.graph_module import GraphModule
from tensorplay_graph.library import custom_op
from tensorplay_graph.passes.normalize import normalize
from tensorplay_graph.passes.shape_prop import shape_prop

CALLS = {"torch": 0, "tp": 0, "seed": 0, "nofake": 0}


@custom_op("tpg_runs_once::counted", mutates_args=())
def counted(x: torch.Tensor) -> torch.Tensor:
    CALLS["torch"] += 1  # an undeclared side effect, as logging or a collective would be
    return x * 3


@counted.register_fake
def _(x):
    return torch.empty_like(x)


@custom_op("tpg_runs_once::counted_tp", mutates_args=())
def counted_tp(x: tp.Tensor) -> tp.Tensor:
    CALLS["tp"] += 1
    return x * 3


@counted_tp.register_fake
def _(x):
    return tp.empty_like(x)


def program(x):
    return counted((x * 2).relu()).sum(dim=-1) + 1


def program_tp(x):
    return counted_tp(tp.tanh(x) * 2).sum(dim=-1) + 1


@pytest.fixture(autouse=True)
def _reset():
    for key in CALLS:
        CALLS[key] = 0


@pytest.mark.parametrize("backend", ["reference", "interpreter"])
def test_tpg_compile_runs_the_kernel_once_per_call(backend):
    f = tpg.compile(program, backend=backend)
    for calls in (1, 2, 3):
        x = torch.randn(4, 8)
        torch.testing.assert_close(f(x), (x * 2).relu().mul(3).sum(-1) + 1)
        # Capture uses the fake; before the change shape_prop ran the kernel once more
        # on the first call (the count here was calls + 1).
        assert CALLS["torch"] == calls


def test_tp_compile_runs_the_kernel_once_per_call(monkeypatch):
    import importlib
    importers = importlib.import_module("tensorplay_graph.capture.importers")
    seen = []
    real_import = importers.import_tensorplay_graph

    def spy(source):  # how often TensorPlay's own capture ran the kernel before handing over
        seen.append(CALLS["tp"])
        return real_import(source)

    monkeypatch.setattr(importers, "import_tensorplay_graph", spy)
    f = tp.compile(program_tp, backend="tensorplay_graph", options={"backends": ["reference"]})
    x = tp.randn(4, 8)
    expected = (tp.tanh(x) * 2 * 3).sum(dim=-1) + 1
    np.testing.assert_allclose(f(x).numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    # From our backend on: exactly the program's own run (before the change: + 1 in shape_prop).
    assert len(seen) == 1 and CALLS["tp"] == seen[0] + 1
    f(x)
    assert CALLS["tp"] == seen[0] + 2


def test_shape_prop_on_captured_graph_keeps_eager_metas_without_running():
    x = torch.randn(5, 7)
    gm = normalize(tpg.capture(lambda x: (counted(x.t()) @ x, x.sum(0, keepdim=True)), x))
    node_metas = {n.name: n.meta.get("tensor_meta") for n in gm.graph.nodes}
    shape_prop(gm, x)
    assert CALLS["torch"] == 0
    out = gm.graph.find_nodes(op="output")[0].meta["tensor_meta"]
    eager = ((x.t() * 3) @ x, x.sum(0, keepdim=True))
    assert [(m.shape, m.dtype) for m in out] == [(tuple(e.shape), "float32") for e in eager]
    for node in gm.graph.nodes:
        if node_metas[node.name] is not None:
            assert node.meta["tensor_meta"] == node_metas[node.name], node.name


@pytest.mark.parametrize("fw", ["torch", "tensorplay"])
def test_hand_built_graph_without_metas_gets_them_from_example_inputs(fw):
    m = torch if fw == "torch" else tp
    g = Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    h = g.call_function(m.matmul, (x, w))
    s = g.call_method("sum", (h, -1))
    g.output((g.call_function(operator.mul, (h, 2)), s))
    gm = normalize(GraphModule({}, g))
    xv, wv = m.randn(3, 4), m.randn(4, 6)
    shape_prop(gm, xv, wv)
    assert x.meta["tensor_meta"].shape == (3, 4) and h.meta["tensor_meta"].shape == (3, 6)
    assert s.meta["tensor_meta"].shape == (3,)
    out = g.find_nodes(op="output")[0].meta["tensor_meta"]
    assert [t.shape for t in out] == [(3, 6), (3,)]


def test_only_what_no_rule_covers_runs_for_real():
    g = Graph()
    x = g.placeholder("x")
    c = g.call_function(counted, (x,))               # has a fake: must not run
    nz = g.call_function(torch.nonzero, (x,))        # data-dependent: runs, with its input
    y = g.call_function(operator.add, (nz, 1))       # inferred from the real nonzero
    g.output((c, y))
    gm = normalize(GraphModule({}, g))
    xv = torch.tensor([0.0, 2.0, 0.0, 5.0])
    shape_prop(gm, xv)
    assert CALLS["torch"] == 0
    assert nz.meta["tensor_meta"].shape == (2, 1) and nz.meta["tensor_meta"].dtype == "int64"
    assert y.meta["tensor_meta"].shape == (2, 1) and c.meta["tensor_meta"].shape == (4,)


def test_partial_run_sees_earlier_writes_on_private_copies():
    g = Graph()
    x = g.placeholder("x")
    g.call_method("add_", (x, 1.0))
    nz = g.call_function(torch.nonzero, (x,))      # reads x after the write
    g.output(nz)
    gm = normalize(GraphModule({}, g))
    xv = torch.tensor([-1.0, 0.0, 0.0])
    shape_prop(gm, xv)
    assert nz.meta["tensor_meta"].shape == (2, 1)   # nonzero of [0, 1, 1]
    torch.testing.assert_close(xv, torch.tensor([-1.0, 0.0, 0.0]))  # the caller's x untouched


def test_opaque_op_without_fake_in_captured_graph_runs_once_per_call():
    import tensorplay.library as L

    @L.custom_op("tpg_runs_once::seed_counted", mutates_args=())
    def seed_counted(x: tp.Tensor) -> tp.Tensor:
        CALLS["seed"] += 1
        return x[:, :2] * 1  # shape only a real run reveals: no fake registered

    f = tpg.compile(lambda x: seed_counted(x * 2).exp(), backend="reference")
    x = tp.randn(3, 5)
    out = f(x)
    assert tuple(out.shape) == (3, 2)
    # Capture never runs the body (no fake); the first call is the program's own run,
    # which teaches the metadata (before: shape_prop ran the body once more, count 2).
    assert CALLS["seed"] == 1
    np.testing.assert_allclose(f(x).numpy(), (x[:, :2] * 2).exp().numpy(), rtol=1e-5)
    assert CALLS["seed"] == 2


def test_stale_placeholder_meta_recomputes_downstream():
    gm = normalize(tpg.capture(lambda x: (x * 2).sum(-1), torch.randn(2, 3)))
    shape_prop(gm, torch.randn(5, 3))
    out = gm.graph.find_nodes(op="output")[0]
    assert out.meta["tensor_meta"].shape == (5,)
