"""Capture of torch CPU programs: graphs run equal to eager, through codegen and the Interpreter."""

import operator

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tensorplay_graph as tpg  # noqa: E402
from helpers import assert_same, check, targets  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(16, 4)
        self.register_buffer("scale", torch.full((4,), 0.5))

    def forward(self, x):
        return self.fc2(self.act(F.relu(self.fc1(x)))) * self.scale


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x + self.proj(x))


def test_mlp_module_one_linear_per_layer():
    gm = check(MLP(), torch.randn(5, 8))
    assert targets(gm).count(F.linear) == 2
    assert sorted(targets(gm, "get_attr")) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "scale"]
    linear = gm.graph.find_nodes(op="call_function", target=F.linear)[0]
    assert [a.target for a in linear.args[1:]] == ["fc1.weight", "fc1.bias"]


def test_residual_layer_norm():
    gm = check(Residual(), torch.randn(3, 16))
    assert targets(gm).count(F.layer_norm) == 1 and operator.add in targets(gm)


def test_softmax_matmul_reductions():
    def fn(a, b):
        s = F.softmax(a @ b, dim=-1)
        return (s.sum(dim=1, keepdim=True), torch.mean(s, dim=0), s.max(), torch.matmul(a, b).amax(-1),
                s.sum((0, 1), keepdim=True), torch.max(s, dim=1).values, s.max(1)[1])
    gm = check(fn, torch.randn(4, 6), torch.randn(6, 5))
    assert F.softmax in targets(gm) and operator.matmul in targets(gm)


def test_views_and_indexing():
    def fn(x):
        y = x.reshape(2, 12).permute(1, 0).transpose(0, 1).unsqueeze(0)
        return y[..., 1:5, None], x[1], x[:, ::2], x[-1, 1:3, 0], y.squeeze(0).T, x.flatten(1)
    gm = check(fn, torch.arange(24.0).reshape(2, 3, 4))
    assert {"reshape", "permute", "transpose", "unsqueeze"} <= set(targets(gm, "call_method"))


def test_python_scalars_on_both_sides_and_unary():
    def fn(x):
        return (x + 1, 1 + x, x - 2, 2 - x, x * 3, 3 * x, x / 4, 4 / (x.abs() + 1),
                x ** 2, 2 ** x, -x, abs(x), x > 0.5, 0.5 < x, x // 2, x % 3)
    gm = check(fn, torch.randn(3, 4))
    reflected = [n for n in gm.graph.nodes if n.target is operator.pow and n.args[0] == 2]
    assert len(reflected) == 1 and reflected[0].args[1].name == "x"


def test_closure_and_global_tensors_are_read_as_attributes():
    weight = torch.randn(4, 4)

    def fn(x):
        return weight + x, weight @ x, weight < x, weight[x.abs() >= 0], x * GLOBAL
    gm = check(fn, torch.randn(4, 4))
    assert sorted(targets(gm, "get_attr")) == ["c_weight", "g_GLOBAL"]
    # the closure tensor is a proxy while tracing: `weight + x` is recorded on its get_attr node
    add = gm.graph.find_nodes(op="call_function", target=operator.add)[0]
    assert add.args[0].op == "get_attr" and add.args[0].target == "c_weight"
    assert len(gm.graph.find_nodes(op="call_function", target=operator.getitem)) == 1


GLOBAL = torch.randn(4, 4)


def test_tuple_results_are_indexable():
    def fn(x):
        values, indices = torch.max(x, dim=1)
        first, second = torch.split(x, 2, dim=0)
        return values, indices, first, second, torch.chunk(x, 2, 1)[1], x.sort(dim=-1).indices
    gm = check(fn, torch.randn(4, 6))
    assert sum(isinstance(n.meta.get("tensor_meta"), tuple) for n in gm.graph.nodes) == 4


def test_metadata_queries_use_example_values():
    def fn(x):
        assert x.shape == (3, 4) and x.size(1) == 4 and x.dim() == 2 and x.ndim == 2 and len(x) == 3
        assert x.dtype == torch.float32 and x.device.type == "cpu"
        return x.view(x.shape[0] * x.size(-1))
    gm = check(fn, torch.randn(3, 4))
    assert targets(gm, "call_method") == ["view"]


def test_dtype_and_factory_arguments():
    def fn(x):
        return x.to(torch.float64) * 2, torch.zeros_like(x, dtype=torch.int32), x.softmax(-1, torch.float64)
    check(fn, torch.randn(2, 3))


def test_symbolic_capture_without_examples():
    gm = tpg.capture(lambda x: x.view(x.shape[0], -1).exp())
    x = torch.randn(2, 3, 4)
    assert_same(gm(x), x.view(2, -1).exp())


def test_stack_meta_names_user_line():
    model = Residual()
    gm = tpg.capture(model, torch.randn(2, 16))
    node = gm.graph.find_nodes(op="call_function", target=F.layer_norm)[0]
    assert node.meta["stack"].startswith(__file__) and node.meta["stack"].endswith("in forward")


def test_torch_custom_op_reaches_one_node():
    @torch.library.custom_op("tpg_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @twice.register_fake
    def _(x):
        return torch.empty_like(x)

    gm = check(lambda x: twice(x.relu()) + 1, torch.randn(3))
    assert sum(1 for n in gm.graph.nodes if n.op == "call_function" and "twice" in str(n.target)) == 1


def test_sequential_numeric_submodule_names_become_identifier_attrs():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
    x = torch.randn(2, 8)
    gm = tpg.capture(model, x)
    attrs = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    assert attrs == ["_0.weight", "_0.bias", "_2.weight", "_2.bias"]
    torch.testing.assert_close(gm(x), model(x))
