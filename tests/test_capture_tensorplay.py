"""Capture of TensorPlay programs: graphs run equal to eager, through codegen and the Interpreter."""

import operator

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
import tensorplay.nn as nn  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402

import tensorplay_graph as tpg  # noqa: E402
from helpers import assert_same, check, targets, to_numpy  # noqa: E402
from tensorplay_graph.capture import NO_EXAMPLE, capture_call, capturing, iter_proxies  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.gelu(F.relu(self.fc1(x)) * 2))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x + self.proj(x))


def test_mlp_module_one_linear_per_layer():
    model = MLP()
    gm = check(model, tp.randn(5, 8))
    linears = [t for t in targets(gm) if getattr(t, "__name__", "") == "linear"]
    assert len(linears) == 2
    assert sorted(targets(gm, "get_attr")) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert gm.graph.find_nodes(op="get_attr", target="fc1.weight")[0].meta["tensor_meta"].shape == (16, 8)


def test_residual_layer_norm():
    gm = check(Residual(), tp.randn(3, 16))
    names = [getattr(t, "__name__", t) for t in targets(gm)]
    assert names.count("layer_norm") == 1 and operator.add in targets(gm)


def test_parameters_stay_live_and_module_is_restored():
    model = MLP()
    x = tp.randn(2, 8)
    gm = tpg.capture(model, x)
    assert "weight" not in model.fc1.__dict__  # the patch is gone
    with tp.no_grad():
        model.fc1.weight.mul_(0.5)  # in-place update of the parameter object
    assert_same(gm(x), model(x))


def test_softmax_matmul_reductions():
    def fn(a, b):
        s = F.softmax(a @ b, dim=-1)
        return (s.sum(dim=1, keepdim=True), tp.mean(s, dim=0), s.max(), tp.matmul(a, b).amax(-1),
                tp.sum(s, dim=1, keepdim=True))
    check(fn, tp.randn(4, 6), tp.randn(6, 5))


def test_views_and_indexing():
    def fn(x):
        y = x.reshape(2, 12).permute(1, 0).transpose(0, 1).unsqueeze(0)
        return y[..., 1:5, None], x[1], x[:, ::2], x[-1, 1:3, 0], y.squeeze(0).T, x.flatten(1)
    gm = check(fn, tp.arange(24).reshape(2, 3, 4).float())
    assert operator.getitem in targets(gm)
    assert {"reshape", "permute", "transpose", "unsqueeze"} <= set(targets(gm, "call_method"))


def test_python_scalars_on_both_sides_and_unary():
    def fn(x):
        return (x + 1, 1 + x, x - 2, 2 - x, x * 3, 3 * x, x / 4, 4 / (x.abs() + 1),
                x ** 2, 2 ** x, -x, abs(x), x > 0.5, 0.5 < x, x // 2, x % 3)
    gm = check(fn, tp.randn(3, 4))
    assert operator.sub in targets(gm) and operator.truediv in targets(gm)
    reflected = [n for n in gm.graph.nodes if n.target is operator.sub and n.args[0] == 2]
    assert len(reflected) == 1 and reflected[0].args[1].name == "x"


def test_closure_and_global_tensors_are_read_as_attributes():
    weight = tp.randn(4, 4)

    def fn(x):
        return (weight + x, weight @ x, x * weight, weight < x, weight[x.abs() >= 0], GLOBAL * x,
                weight.add(x))
    gm = check(fn, tp.randn(4, 4))
    method = gm.graph.find_nodes(op="call_method", target="add")[0]  # real tensor's method
    assert method.args[0].target == "c_weight" and method.args[1].name == "x"
    consts = targets(gm, "get_attr")
    assert sorted(consts) == ["c_weight", "g_GLOBAL"]  # one node per distinct tensor, named
    assert gm.graph.find_nodes(op="get_attr", target="c_weight")[0].meta["tensor_meta"].shape == (4, 4)


GLOBAL = tp.randn(4, 4)


def test_tuple_results_are_indexable():
    def fn(x):
        values, indices = tp.max(x, dim=1)
        first, second = tp.split(x, 2, dim=0)
        return values, indices, first, second, tp.chunk(x, 2, 1)[1]
    gm = check(fn, tp.randn(4, 6))
    tuple_nodes = [n for n in gm.graph.nodes if isinstance(n.meta.get("tensor_meta"), tuple)]
    assert len(tuple_nodes) == 3


def test_metadata_queries_use_example_values():
    def fn(x):
        assert x.shape == (3, 4) and x.size(1) == 4 and x.dim() == 2 and x.ndim == 2 and len(x) == 3
        assert x.dtype == tp.float32 and str(x.device) == "cpu"
        return x.view(x.shape[0] * x.size(-1))
    gm = check(fn, tp.randn(3, 4))
    assert targets(gm, "call_method") == ["view"] and gm.graph.find_nodes(op="call_method")[0].args[1] == 12


def test_symbolic_capture_without_examples():
    gm = tpg.capture(lambda x: x.view(x.shape[0], -1).exp())
    assert "tensor_meta" not in gm.graph.find_nodes(op="call_method", target="exp")[0].meta
    x = tp.randn(2, 3, 4)
    assert_same(gm(x), x.view(2, -1).exp())


def test_stack_meta_names_user_line():
    def fn(x):
        return tp.exp(x)  # the recorded line
    gm = tpg.capture(fn, tp.randn(2))
    stack = gm.graph.find_nodes(op="call_function")[0].meta["stack"]
    assert stack.startswith(__file__) and stack.endswith(" in fn")


def test_tracer_seed_signature_and_concrete_args():
    def fn(x, y, scale):
        return x * scale + y
    gm = tpg.Tracer(concrete_args={"scale": 3.0}).trace(fn, sample_inputs={"x": tp.ones(2)})
    assert [n.target for n in gm.graph.nodes if n.op == "placeholder"] == ["x", "y"]
    assert gm.graph.find_nodes(op="placeholder", target="y")[0].meta.get("tensor_meta") is None
    assert_same(gm(tp.ones(2), tp.ones(2)), tp.full((2,), 4.0))


def test_inplace_ops_and_setitem_do_not_touch_inputs():
    def fn(x):
        y = x * 1
        y += 2
        y[0] = 0.0
        return y
    x = tp.randn(3)
    before = to_numpy(x).copy()
    gm = check(fn, x)
    np.testing.assert_array_equal(to_numpy(x), before)
    assert operator.iadd in targets(gm) and operator.setitem in targets(gm)


def test_hooks_restored_after_capture():
    import tensorplay.functional as tf
    import tensorplay.graph as tg

    tpg.capture(lambda x: tp.add(x, 1), tp.ones(2))
    with pytest.raises(tpg.GraphCaptureError):
        tpg.capture(lambda x: x if x.sum() > 0 else -x, tp.ones(2))  # fails mid-trace
    assert tf._capture_call is tg.capture_call and tf._capturing is tg.capturing
    with pytest.raises(TypeError):
        tp.ones(2) + object()
    assert not capturing()


def test_tensorplay_library_custom_op_is_one_node():
    ran = []

    @tp.library.custom_op("tpg_test::scale_tp", mutates_args=())
    def scale(x: tp.Tensor, s: float) -> tp.Tensor:
        ran.append(1)
        return x * s

    @scale.register_fake
    def _(x, s):
        return tp.empty_like(x)

    gm = tpg.capture(lambda x: scale(x + 1, 2.0).relu(), tp.randn(3, 2))
    assert not ran  # the body never runs during capture
    op_nodes = gm.graph.find_nodes(op="call_function", target=scale)
    assert len(op_nodes) == 1 and op_nodes[0].meta["tensor_meta"].shape == (3, 2)
    x = tp.randn(3, 2)
    assert_same(gm(x), ((x + 1) * 2.0).relu())


def test_capture_call_api_for_custom_ops():
    def my_op(x):
        raise AssertionError("body must not run during capture")

    def traced(x):
        assert capturing() and list(iter_proxies((x, [x], {"k": x}))) == [x, x, x]
        y = capture_call(my_op, (x,), {}, example_fn=lambda v: v * 2)
        z = capture_call(my_op, (y,), {})  # no example_fn: no example value
        assert capture_call(my_op, (1,), {}) is None
        return y, z
    gm = tpg.capture(traced, tp.ones(2))
    nodes = gm.graph.find_nodes(op="call_function", target=my_op)
    assert len(nodes) == 2 and nodes[0].meta["tensor_meta"].shape == (2,)
    assert "tensor_meta" not in nodes[1].meta
    assert NO_EXAMPLE is not None and capture_call(my_op, (tp.ones(1),), {}) is None


def test_native_calls_replay_exactly():
    def fn(x):
        return tp._C.exp(x), tp.where(x > 0, x, tp.zeros_like(x)), tp.cat([x, x], 0), x.matmul(x.T)
    check(fn, tp.randn(3, 3))
