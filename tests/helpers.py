"""Helpers shared by several test files (tests/ is on sys.path: ``from helpers import ...``)."""

import operator

import numpy as np

import tensorplay_graph as tpg


def to_numpy(value):
    return np.asarray(value.detach().numpy())


def is_tensor(value):
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "detach")


def assert_same(got, expected, atol=1e-5):
    """Nested outputs equal: same structure; tensors of the same shape and dtype, close values."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e, atol)
    elif is_tensor(expected):
        assert tuple(got.shape) == tuple(expected.shape) and got.dtype == expected.dtype
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), atol=atol, rtol=1e-5)
    else:
        assert got == expected


def output_metas(gm):
    out = gm.graph.output_node().args[0]
    nodes = out if isinstance(out, (tuple, list)) else (out,)
    return [n.meta.get("tensor_meta") for n in nodes]


def check(fn, *inputs):
    """Capture fn on inputs; gm and Interpreter(gm) must equal eager; output metas match eager."""
    gm = tpg.capture(fn, *inputs)
    expected = fn(*inputs)
    assert_same(gm(*inputs), expected)
    assert_same(tpg.Interpreter(gm).run(*inputs), expected)
    flat = expected if isinstance(expected, (tuple, list)) else (expected,)
    for meta, value in zip(output_metas(gm), flat):
        assert meta.shape == tuple(value.shape) and meta.dtype == str(value.dtype).rsplit(".", 1)[-1]
    gm.graph.lint()
    return gm


def targets(gm, op="call_function"):
    return [n.target for n in gm.graph.nodes if n.op == op]


def chain():
    """``x -> add(x, 1) -> mul(_, 2) -> output``: ``(graph, x, add, mul, output)``."""
    from tensorplay_graph.ir import Graph
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.add, (x, 1))
    b = g.call_function(operator.mul, (a, 2))
    out = g.output(b)
    return g, x, a, b, out
