"""Interpreter == GraphModule call == eager; overrides; value freeing; error re-raising."""

import operator

import numpy as np
import pytest

from tensorplay_graph.errors import TensorPlayGraphError
from tensorplay_graph.interpreter import Interpreter, NodeExecutionError
from tensorplay_graph.ir import Graph, GraphModule

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")


def mlp_graph(lib, functional):
    g = Graph()
    x = g.placeholder("x")
    w1, b1, w2 = g.get_attr("fc1.weight"), g.get_attr("fc1.bias"), g.get_attr("w2")
    h = g.call_function(functional.linear, (x, w1, b1))
    h = g.call_method("relu", (h,))
    y = g.call_function(operator.matmul, (h, w2))
    s = g.call_function(lib.softmax, (y,), {"dim": -1})
    first = g.call_function(operator.getitem, (s, (slice(None), slice(0, 2))))
    g.output({"probs": s, "first": first, "scaled": [g.call_function(operator.mul, (y, 0.5))]})
    return g


def eager_mlp(x, params, lib, functional):
    y = functional.linear(x, params["fc1.weight"], params["fc1.bias"]).relu() @ params["w2"]
    s = lib.softmax(y, dim=-1)
    return {"probs": s, "first": s[:, 0:2], "scaled": [y * 0.5]}


@pytest.mark.parametrize("framework", ["tensorplay", "torch"])
def test_interpreter_equals_graph_module_equals_eager(framework):
    lib = tp if framework == "tensorplay" else torch
    functional = lib.nn.functional
    rng = np.random.default_rng(1)

    def rand(*shape):
        data = rng.standard_normal(shape).astype("float32")
        return tp.from_numpy(data) if lib is tp else torch.from_numpy(data)

    params = {"fc1.weight": rand(16, 8), "fc1.bias": rand(16), "w2": rand(16, 4)}
    gm = GraphModule(params, mlp_graph(lib, functional))
    x = rand(5, 8)
    want = eager_mlp(x, params, lib, functional)
    for got in (gm(x), Interpreter(gm).run(x), Interpreter(gm, garbage_collect_values=False).run(x)):
        for key in ("probs", "first"):
            np.testing.assert_allclose(np.asarray(got[key].numpy()), np.asarray(want[key].numpy()),
                                       rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(got["scaled"][0].numpy()),
                                   np.asarray(want["scaled"][0].numpy()), rtol=1e-5, atol=1e-6)


def test_overrides_and_value_freeing():
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.add, (x, 1))
    b = g.call_function(operator.mul, (a, 2))
    c = g.call_method("bit_length", (b,))
    g.output((b, c))
    gm = GraphModule({}, g)

    class Tracing(Interpreter):
        def __init__(self, module):
            super().__init__(module)
            self.seen = []
            self.env_sizes = []

        def run_node(self, n):
            self.seen.append(n.name)
            self.env_sizes.append(len(self.env))
            return super().run_node(n)

        def call_function(self, target, args, kwargs):
            if target is operator.mul:
                return target(*args, **kwargs) + 100
            return super().call_function(target, args, kwargs)

    interp = Tracing(gm)
    assert interp.run(3) == (108, (108).bit_length())
    assert interp.seen == ["x", "add", "mul", "bit_length", "output"]
    assert interp.env_sizes == [0, 1, 1, 1, 2]  # x freed after add, add freed after mul
    assert interp.user_to_last_uses[b] == [a]


def test_placeholder_defaults_initial_env_and_missing_input():
    g = Graph()
    x = g.placeholder("x")
    y = g.placeholder("y", default_value=10)
    s = g.call_function(operator.add, (x, y))
    g.output(s)
    gm = GraphModule({}, g)
    assert Interpreter(gm).run(1) == gm(1) == 11
    assert Interpreter(gm).run(1, 2) == gm(1, 2) == 3
    assert Interpreter(gm).run(initial_env={x: 5, y: 6}) == 11
    with pytest.raises(NodeExecutionError, match="missing input for placeholder 'x'"):
        Interpreter(gm).run()


def test_errors_name_node_target_and_user_line():
    g = Graph()
    x = g.placeholder("x")
    w = g.get_attr("w")
    bad = g.call_function(tp.matmul, (x, w), name="proj")
    bad.meta["stack"] = "model.py:7 in forward"
    g.output(bad)
    gm = GraphModule({"w": tp.ones(3, 2)}, g)
    with pytest.raises(NodeExecutionError) as info:
        Interpreter(gm).run(tp.ones(4, 5))
    err = info.value
    assert isinstance(err, TensorPlayGraphError)
    message = str(err)
    assert "node proj" in message and "tensorplay" in message and "matmul" in message
    assert "model.py:7 in forward" in message
    assert err.__cause__ is err.original and err.node is bad
    eager_error = None
    try:
        tp.matmul(tp.ones(4, 5), tp.ones(3, 2))
    except Exception as exc:
        eager_error = exc
    assert type(err.original) is type(eager_error)


def test_missing_attribute_is_clear():
    g = Graph()
    g.output(g.get_attr("a.b"))
    gm = GraphModule({"a.b": 1}, g)
    del gm.a.b
    with pytest.raises(NodeExecutionError, match="get_attr 'a.b': a has no attribute 'b'"):
        Interpreter(gm).run()
