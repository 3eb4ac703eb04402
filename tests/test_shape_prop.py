"""shape_prop: meta rules alone agree with a real run; shape queries; custom ops via
register_fake (ours and TensorPlay's); errors name the node and the fix."""

from __future__ import annotations

import builtins
import operator

import pytest
import tensorplay as tp
import torch
import torch.nn.functional as TF

from tensorplay_graph.errors import ShapeError
from tensorplay_graph.frameworks import tensor_meta
from tensorplay_graph.ir.graph import Graph
from tensorplay_graph.ir.graph_module import GraphModule
from tensorplay_graph.ir.meta import TensorMeta
from tensorplay_graph.passes.normalize import normalize
from tensorplay_graph.passes.shape_prop import shape_prop


def _program(fw):
    """(x + r) -> layer_norm -> gelu -> linear -> softmax, with a view by x.size(0) and a cast."""
    F = TF if fw == "torch" else tp.nn.functional
    m = torch if fw == "torch" else tp
    g = Graph()
    x, r, w = g.placeholder("x"), g.placeholder("r"), g.placeholder("w")
    h = g.call_function(operator.add, (x, r))
    h = g.call_function(F.layer_norm, (h, (8,)))
    h = g.call_function(F.gelu, (h,))
    h = g.call_function(F.linear, (h, w))
    n = g.call_method("size", (h, 0))
    half = g.call_function(operator.floordiv, (n, 2))
    v = g.call_method("reshape", (h, half, -1))
    s = g.call_function(m.softmax, (v, -1))
    c = g.call_method("half", (s,))
    mx = g.call_function(m.amax, (c, 1, True))
    g.output((c, mx))
    return GraphModule({}, g)


def _inputs(fw):
    m = torch if fw == "torch" else tp
    return m.randn(4, 3, 8), m.randn(8), m.randn(5, 8)


@pytest.mark.parametrize("fw", ["torch", "tensorplay"])
def test_symbolic_matches_example_run(fw):
    inputs = _inputs(fw)
    real = normalize(_program(fw))
    shape_prop(real, *inputs)
    sym = normalize(_program(fw))
    for node, value in zip(sym.graph.find_nodes(op="placeholder"), inputs):
        node.meta["tensor_meta"] = tensor_meta(value)
    shape_prop(sym)
    for a, b in zip(real.graph.nodes, sym.graph.nodes):
        ma, mb = a.meta.get("tensor_meta"), b.meta.get("tensor_meta")
        if isinstance(ma, TensorMeta):
            assert (ma.shape, ma.dtype) == (mb.shape, mb.dtype), a.name
        else:
            assert [(m.shape, m.dtype) for m in ma or ()] == [(m.shape, m.dtype) for m in mb or ()], a.name
    out = sym.graph.find_nodes(op="output")[0].meta["tensor_meta"]
    assert out[0].shape == (2, 30) and out[0].dtype == "float16" and out[1].shape == (2, 1)


def test_placeholder_val_and_shape_attribute():
    g = Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.zeros(2, 6)
    shape = g.call_function(builtins.getattr, (x, "shape"))
    rows = g.call_function(operator.getitem, (shape, 0))
    y = g.call_method("view", (x, rows, 3, 2))
    g.output(y)
    gm = normalize(GraphModule({}, g))
    shape_prop(gm)
    assert y.meta["tensor_meta"].shape == (2, 3, 2)
    assert "tensor_meta" not in rows.meta  # ints carry no tensor_meta


def test_custom_op_of_ours_through_register_fake():
    from tensorplay_graph.library import custom_op

    @custom_op("tsp_test::rowsum", mutates_args=())
    def rowsum(x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the real kernel must not run during shape_prop")

    @rowsum.register_fake
    def _(x):
        return x.new_empty(x.shape[:-1], dtype=torch.float64)

    g = Graph()
    x = g.placeholder("x")
    x.meta["tensor_meta"] = TensorMeta((3, 7), "float32", device="cuda:0")
    y = g.call_function(rowsum, (x,))
    z = g.call_function(torch.exp, (y,))
    g.output(z)
    shape_prop(normalize(GraphModule({}, g)))
    assert y.meta["tensor_meta"].shape == (3,) and y.meta["tensor_meta"].dtype == "float64"
    assert y.meta["tensor_meta"].device == "cuda:0"
    assert z.meta["tensor_meta"].dtype == "float64"


def test_tensorplay_custom_op_through_register_fake():
    import tensorplay.library as L

    @L.custom_op("tsp_test::firstcol", mutates_args=())
    def firstcol(x: tp.Tensor) -> tp.Tensor:
        raise AssertionError("the real kernel must not run during shape_prop")

    @firstcol.register_fake
    def _(x):
        return tp.empty([x.shape[0], 1], dtype=x.dtype)

    g = Graph()
    x = g.placeholder("x")
    x.meta["val"] = tp.zeros(5, 4)
    y = g.call_function(firstcol, (x,))
    g.output(y)
    shape_prop(normalize(GraphModule({}, g)))
    assert y.meta["tensor_meta"].shape == (5, 1)


def test_missing_rule_names_node_op_and_fix():
    g = Graph()
    x = g.placeholder("x")
    x.meta["tensor_meta"] = TensorMeta((3,), "float32")
    y = g.call_function(torch.nonzero, (x,))
    g.output(y)
    with pytest.raises(ShapeError, match=r"nonzero.*no meta rule.*example inputs"):
        shape_prop(normalize(GraphModule({}, g)))


def test_missing_placeholder_meta():
    g = Graph()
    x = g.placeholder("x")
    g.output(g.call_function(torch.exp, (x,)))
    with pytest.raises(ShapeError, match=r"placeholder x .*example inputs"):
        shape_prop(normalize(GraphModule({}, g)))


def test_meta_rule_error_names_node():
    g = Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    a.meta["tensor_meta"] = TensorMeta((2, 3), "float32")
    b.meta["tensor_meta"] = TensorMeta((4, 5), "float32")
    g.output(g.call_function(torch.matmul, (a, b), name="mm_bad"))
    with pytest.raises(ShapeError, match=r"mm_bad.*matmul.*inner sizes"):
        shape_prop(normalize(GraphModule({}, g)))
