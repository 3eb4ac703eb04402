"""torch.compile(fn, backend="tensorplay_graph") through the installed entry point."""

from importlib.metadata import entry_points

import pytest

torch = pytest.importorskip("torch")

from tensorplay_graph.capture.importers import import_fx_graph
from tensorplay_graph.library import custom_op


@custom_op("tpg_torch_backend_test::gate", mutates_args=())
def gate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(y)


@gate.register_fake
def _(x, y):
    return torch.empty_like(x)


@torch.library.custom_op("tpg_torch_backend_test::twice", mutates_args=())
def torch_twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch_twice.register_fake
def _(x):
    return torch.empty_like(x)


def program(x, y):
    h = torch.tanh(x) * 2.0 + y
    g = gate(h, y)                     # our custom op between two fusible chains
    z = torch_twice(torch.relu(g))     # a torch.library op
    return (z - z.mean(dim=-1, keepdim=True)) * 0.5, h.sum()


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def test_entry_point_is_declared_by_the_installed_package():
    names = {ep.name: ep.value for ep in entry_points(group="torch_dynamo_backends")}
    assert names.get("tensorplay_graph") == "tensorplay_graph.compiler:torch_backend"
    assert "tensorplay_graph" in torch._dynamo.list_backends()


@pytest.mark.parametrize("options", [None, {"backends": ["reference"]}])
def test_torch_compile_with_custom_ops_equals_eager(options):
    compiled = torch.compile(program, backend="tensorplay_graph", options=options)
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    for got, want in zip(compiled(x, y), program(x, y)):
        torch.testing.assert_close(got, want)


def test_torch_compile_recompiles_on_new_shape():
    compiled = torch.compile(program, backend="tensorplay_graph", dynamic=False)
    for rows in (2, 5):
        x, y = torch.randn(rows, 8), torch.randn(rows, 8)
        for got, want in zip(compiled(x, y), program(x, y)):
            torch.testing.assert_close(got, want)


def test_torch_module_equals_eager():
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    compiled = torch.compile(net, backend="tensorplay_graph")
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x))


def test_custom_ops_reach_our_backend_as_single_nodes(monkeypatch):
    import importlib
    # the package attribute ``compile`` is the function; the module is in sys.modules
    compile_module = importlib.import_module("tensorplay_graph.compiler")
    imported = []
    build_runner = compile_module.build_runner

    def recording_build_runner(gm, example_inputs, **kwargs):
        imported.append(gm)
        return build_runner(gm, example_inputs, **kwargs)

    monkeypatch.setattr(compile_module, "build_runner", recording_build_runner)
    torch._dynamo.reset()  # earlier compiles of ``program`` in this process would mark dims dynamic
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    torch.compile(program, backend="tensorplay_graph")(x, y)
    assert len(imported) == 1, "the custom ops must not break the Dynamo graph"
    calls = [n for n in imported[0].graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls].count(gate) == 1            # not inlined into its body
    assert [n.target for n in calls].count(torch.ops.tpg_torch_backend_test.twice.default) == 1
    assert all(n.meta["tensor_meta"].shape == (2, 4) for n in calls if n.target is gate)
    for got, want in zip(imported[0](x, y), program(x, y)):
        torch.testing.assert_close(got, want)


def test_symbolic_trace_call_module_is_imported():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    traced = torch.fx.symbolic_trace(net)
    ours = import_fx_graph(traced)
    assert not [n for n in ours.graph.nodes if n.op == "call_module"]
    x = torch.randn(2, 4)
    torch.testing.assert_close(ours(x), net(x))
