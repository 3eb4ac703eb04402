"""Parameters changed behind the program's back: ``model.double()`` / ``.half()`` / ``.to()``
and ``p.data = other`` keep each parameter object (the identity guards hold) but change its
dtype or move its memory. A graph planned for the old dtype recompiles; a CUDA graph, which
reads its constants at the addresses it was captured with, captures again."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.autograd_regions import graph_constants  # noqa: E402

from test_cuda_graphs import CpuGraphs, plan_on_cpu  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, ids):
        return self.lin(self.emb(ids)).relu() * 2


class AddressGraphs(CpuGraphs):
    """The stand-in, stricter: a replay reads the constants at their captured addresses, so
    one whose constant moved returns what stale memory would (NaN here)."""

    @staticmethod
    def capture(fn, args, pool=None):
        graph, out = CpuGraphs.capture(fn, args, pool)
        constants = graph_constants(fn) if hasattr(fn, "graph") else []
        graph["constants"] = [(t, t.data_ptr()) for t in constants]
        return graph, out

    @staticmethod
    def replay(graph):
        CpuGraphs.replay(graph)
        if any(t.data_ptr() != ptr for t, ptr in graph["constants"]):
            for out in graph["outs"]:
                out.fill_(float("nan"))


@pytest.mark.parametrize("change", ["double", "data"])
@torch.no_grad()
def test_generated_kernels_follow_a_parameter_changed_in_place(change):
    torch.manual_seed(0)
    model, ids = Net(), torch.randint(0, 10, (4,))
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    for _ in range(3):
        compiled(ids)
    if change == "double":
        model.double()  # parameter.data = parameter.data.double(), same objects
    else:
        model.lin.weight.data = torch.randn(8, 8)
    for _ in range(2):
        got, want = compiled(ids), model(ids)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    if change == "double":
        assert "dtype, device, shape or strides" in compiled.recompile_reasons[-1]


@pytest.mark.parametrize("early_launch", [True, False])
@torch.no_grad()
def test_a_cuda_graph_captures_again_when_a_parameter_moves(monkeypatch, early_launch):
    torch.manual_seed(0)
    model, ids = Net(), torch.randint(0, 10, (4,))
    plan_on_cpu(monkeypatch, AddressGraphs)
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    for _ in range(4):
        torch.testing.assert_close(compiled(ids), model(ids))
    runner = next(iter(compiled.specializations.values())).runner._lowered
    assert "graph" in runner.cuda_graphs and runner.captures == 1
    runner.speculative = early_launch
    model.lin.weight.data = torch.randn(8, 8)  # same object, new memory
    for _ in range(2):
        torch.testing.assert_close(compiled(ids), model(ids))
    assert runner.captures == 2


@torch.no_grad()
def test_both_graphs_of_a_loop_keeping_its_result_follow_a_moved_parameter(monkeypatch):
    torch.manual_seed(0)
    model, ids = Net(), torch.randint(0, 10, (4,))
    plan_on_cpu(monkeypatch, AddressGraphs)
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    out = compiled(ids)
    for step in range(12):
        if step == 7:  # both graphs recorded by now; each read the old memory
            runner = next(iter(compiled.specializations.values())).runner._lowered
            assert "a second graph" in runner.cuda_graphs
            model.lin.weight.data = torch.randn(8, 8)
        previous, value = out, out.clone()
        out = compiled(ids)  # the last result alive during the call
        torch.testing.assert_close(out, model(ids))
        assert torch.equal(previous, value)
