"""``lower``: regions become kernel calls; order, mutation, errors, ops run alone."""

import operator

import pytest

from tensorplay_graph.backends.base import Kernel
from tensorplay_graph.errors import LoweringError
from tensorplay_graph.ir import Graph, GraphModule
from tensorplay_graph.passes.barriers import Barrier
from tensorplay_graph.passes.lower import lower
from tensorplay_graph.passes.partition import partition


def opaque(v):
    return v * 100 + 7


def opaque2(v):
    return v - 3


class ByTarget:
    """Claims call_function nodes whose target is in ``targets``; runs the subgraph."""

    def __init__(self, name="fake", targets=(operator.add, operator.mul, operator.neg),
                 fail=False):
        self.name, self.targets, self.fail, self.compiled = name, targets, fail, []

    def supports(self, node):
        return None if node.target in self.targets else f"{node.target} not mine"

    def compile(self, region):
        if self.fail:
            raise RuntimeError("boom")
        from tensorplay_graph.passes.lower import region_subgraph
        sub = GraphModule({}, region_subgraph(region))
        self.compiled.append(region)
        return Kernel(f"{self.name}_{region.id}", self.name, lambda *a: tuple(sub(*a)),
                      source=sub.code)


def build_interleaved():
    """x -> a=x+1 -> u=opaque(a); w=opaque2(x); c=a*w. Order x, a, u, w, c: the kernel
    {a, c} must move after w and before u."""
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.add, (x, 1))
    u = g.call_function(opaque, (a,))
    w = g.call_function(opaque2, (x,))
    c = g.call_function(operator.mul, (a, w))
    g.output((u, c))
    return GraphModule({}, g)


def test_region_with_interleaved_outside_nodes_is_reordered():
    gm = build_interleaved()
    expected = gm(5)
    backend = ByTarget()
    regions = partition(gm, [backend])
    assert [r.names for r in regions] == [["add", "mul"]]
    assert [n.name for n in regions[0].inputs] == ["x", "opaque2"]
    assert [n.name for n in regions[0].outputs] == ["add", "mul"]
    lower(gm, backends=[backend])
    gm.graph.lint()
    assert gm(5) == expected
    order = [n.name for n in gm.graph.nodes]
    assert order.index("opaque2") < order.index("fake_region0") < order.index("opaque")
    call = next(n for n in gm.graph.nodes if n.name == "fake_region0")
    assert call.meta["kernel"].backend == "fake" and call.meta["region"] == 0
    assert [n.op for n in call.meta["subgraph"].nodes].count("placeholder") == 2


def test_getitems_keep_output_names():
    gm = build_interleaved()
    backend = ByTarget()
    partition(gm, [backend])
    lower(gm, backends=[backend])
    items = [n for n in gm.graph.nodes if n.target is operator.getitem]
    assert [n.name for n in items] == ["add", "mul"]


def test_fence_keeps_every_node_on_its_side():
    # Without the fence, both adds would fuse into one kernel placed before append,
    # and len(x) after it would read the list before the mutation.
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.add, (g.call_function(len, (x,)), 1))
    m = g.call_method("append", (x, a))
    m.meta["barrier"] = Barrier("mutation", "list.append mutates x", fence=True)
    b = g.call_function(operator.add, (g.call_function(len, (x,)), 2))
    g.output((a, b))
    gm = GraphModule({}, g)
    backend = ByTarget()
    regions = partition(gm, [backend])
    assert [r.names for r in regions] == [["add"], ["add_1"]]
    lower(gm, backends=[backend])
    order = [n.name for n in gm.graph.nodes]
    assert order.index("fake_region0") < order.index("append") < order.index("fake_region1")
    assert gm([0]) == (2, 4)


def test_compile_failure_names_region_backend_and_fix_when_strict():
    gm = build_interleaved()
    backend = ByTarget(fail=True)
    partition(gm, [backend])
    with pytest.raises(LoweringError, match=r"backend 'fake' accepted region 0 \(add, mul\).*boom"):
        lower(gm, backends=[backend], strict=True)


def test_compile_failure_runs_the_region_eagerly_with_a_warning(caplog, monkeypatch):
    monkeypatch.delenv("TPG_STRICT_LOWERING", raising=False)
    gm = build_interleaved()
    expected = gm(5)
    backend = ByTarget(fail=True)
    partition(gm, [backend])
    with caplog.at_level("WARNING", logger="tensorplay_graph.passes.lower"):
        lower(gm, backends=[backend])
    assert gm(5) == expected
    assert not any(isinstance(n.target, Kernel) for n in gm.graph.nodes)
    assert any("region 0" in r.message and "boom" in r.message and r.levelname == "WARNING"
               for r in caplog.records)
    add = next(n for n in gm.graph.nodes if n.name == "add")
    assert "boom" in add.meta["lowering_fallback"] and "region" not in add.meta


def test_kernel_failing_on_first_call_runs_the_region_eagerly(caplog, monkeypatch):
    monkeypatch.delenv("TPG_STRICT_LOWERING", raising=False)
    gm = build_interleaved()
    expected = gm(5)

    class LaunchFails(ByTarget):
        def compile(self, region):
            kernel = super().compile(region)
            kernel.fn = lambda *a: (_ for _ in ()).throw(RuntimeError("launch boom"))
            return kernel

    backend = LaunchFails()
    partition(gm, [backend])
    lower(gm, backends=[backend])
    with caplog.at_level("WARNING", logger="tensorplay_graph.passes.lower"):
        assert gm(5) == expected
    assert gm(5) == expected
    assert any("launch boom" in r.message for r in caplog.records)


def test_no_regions_leaves_graph_untouched():
    gm = build_interleaved()
    before = [n.name for n in gm.graph.nodes]
    partition(gm, [ByTarget(targets=())])
    lower(gm)
    assert [n.name for n in gm.graph.nodes] == before


def test_triton_op_style_node_runs_alone_through_its_backend():
    torch = pytest.importorskip("torch")
    import tensorplay_graph as tpg
    from tensorplay_graph.library import triton_op
    from tensorplay_graph.passes.barriers import barriers
    from tensorplay_graph.passes.normalize import normalize

    @triton_op("tpg_lower_test::inc", mutates_args=())
    def inc(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    inc.register_fake(lambda x: torch.empty_like(x))

    class RunsTritonOps:
        name = "opsonly"

        def supports(self, node):
            return None if getattr(node.target, "is_triton_op", False) else "only triton_op"

        def compile(self, region):
            op = region.nodes[0].target
            return Kernel("inc_kernel", self.name, lambda x: (op(x),), source="# inc")

    backend = RunsTritonOps()
    f = lambda x: inc(x * 2) * 3  # noqa: E731
    x = torch.randn(3)
    gm = tpg.capture(f, x)
    normalize(gm)
    barriers(gm, [backend])
    assert partition(gm, [backend]) == []
    node = next(n for n in gm.graph.nodes
                if getattr(n.meta.get("barrier"), "code", None) == "triton_op")
    assert node.meta["backend"] == "opsonly" and "region" not in node.meta
    lower(gm, backends=[backend])
    calls = [n for n in gm.graph.nodes if n.meta.get("kernel") is not None]
    assert len(calls) == 1 and calls[0].meta["barrier"].code == "triton_op"
    torch.testing.assert_close(gm(x), f(x))


def _captured_program():
    torch = pytest.importorskip("torch")
    import tensorplay_graph as tpg

    x = torch.randn(4, 8)
    gm = tpg.capture(lambda x: (torch.cumsum(x.exp() * 2, 0) + 1).relu().transpose(0, 1).sum(0), x)
    return gm, x, torch


def test_subgraph_is_compact_and_builds_the_region_graph():
    from tensorplay_graph.passes.lower import RegionGraph, region_subgraph
    from tensorplay_graph.passes.pipeline import build_passes

    gm, x, torch = _captured_program()
    passes = dict(build_passes((x,), ["reference"]))
    for name in ("normalize", "shape_prop", "barriers"):
        passes[name](gm)
    regions = partition(gm, ["reference"])
    want = [region_subgraph(r) for r in regions]
    passes["lower"](gm)
    calls = [n for n in gm.graph.nodes if "subgraph" in n.meta]
    assert len(calls) == len(want) >= 2
    for call, expected in zip(calls, want):
        sub = call.meta["subgraph"]
        assert isinstance(sub, RegionGraph) and sub.names == [n.name for n in expected.nodes
                                                              if n.op == "call_function" or
                                                              n.op == "call_method"]
        built = sub.graph()
        assert str(built) == str(expected) and built.python_code() == expected.python_code()
        built.lint()
        for node, old in zip(built.nodes, expected.nodes):  # meta kept, refs point inside
            assert node.meta.get("tensor_meta") == old.meta.get("tensor_meta")
            args = node.meta.get("prim_args", {})
            assert all(v.graph is built for v in args.values() if hasattr(v, "graph"))
    assert torch.allclose(gm(x), (torch.cumsum(x.exp() * 2, 0) + 1).relu().transpose(0, 1).sum(0))


def test_lowered_module_does_not_keep_the_old_graph_alive():
    import gc
    import weakref

    from tensorplay_graph.passes.pipeline import compile_graph

    gm, x, torch = _captured_program()
    old = [weakref.ref(n) for n in gm.graph.nodes]
    compiled = compile_graph(gm, (x,), backends=["reference"])
    gm = None
    gc.collect()
    alive = [r() for r in old if r() is not None]
    assert not alive, [n.name for n in alive]
    assert torch.allclose(compiled(x), (torch.cumsum(x.exp() * 2, 0) + 1).relu().transpose(0, 1).sum(0))
