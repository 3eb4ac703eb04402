"""tensorplay.compile(fn, backend="tensorplay_graph") through the installed entry point."""

from importlib.metadata import entry_points

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")

import tensorplay.library as tp_library
from tensorplay_graph.capture.importers import import_tensorplay_graph
from tensorplay_graph.library import custom_op


@custom_op("tpg_tp_backend_test::gate", mutates_args=())
def gate(x: tp.Tensor, y: tp.Tensor) -> tp.Tensor:
    return x * tp.sigmoid(y)


@gate.register_fake
def _(x, y):
    return tp.empty_like(x)


@tp_library.custom_op("tpg_tp_backend_test::native_twice", mutates_args=())
def native_twice(x: tp.Tensor) -> tp.Tensor:
    return x * 2


@native_twice.register_fake
def _(x):
    return tp.empty_like(x)


def program(x, y):
    h = tp.tanh(x) * 2.0 + y
    g = gate(h, y)                  # our custom op between two fusible chains
    z = native_twice(g.relu())      # TensorPlay's own custom op
    return (z - z.mean(dim=-1, keepdim=True)) * 0.5, h.sum()


def close(a, b, tol=1e-5):
    if isinstance(b, tuple):
        for u, v in zip(a, b):
            close(u, v, tol)
        return
    assert tuple(a.shape) == tuple(b.shape)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def test_entry_point_is_declared_by_the_installed_package():
    names = {ep.name: ep.value for ep in entry_points(group="tensorplay_compiler_backends")}
    assert names.get("tensorplay_graph") == "tensorplay_graph.compiler:tensorplay_backend"
    assert "tensorplay_graph" in tp.compiler.list_backends()


@pytest.mark.parametrize("options", [None, {"backends": ["reference"]}, {"backends": ["interpreter"]}])
def test_tp_compile_with_custom_ops_equals_eager(options):
    compiled = tp.compile(program, backend="tensorplay_graph", options=options)
    x, y = tp.randn(4, 16), tp.randn(4, 16)
    close(compiled(x, y), program(x, y))
    close(compiled(x, y), program(x, y))


def test_tp_compile_recompiles_on_new_shape():
    compiled = tp.compile(program, backend="tensorplay_graph")
    for rows in (2, 5):
        x, y = tp.randn(rows, 8), tp.randn(rows, 8)
        close(compiled(x, y), program(x, y))


def test_imported_graph_keeps_custom_ops_as_single_nodes():
    seen = {}

    def spy(gm, example_inputs, **kwargs):
        seen["gm"] = gm
        return gm

    tp.compile(program, backend=spy)(tp.randn(2, 4), tp.randn(2, 4))
    ours = import_tensorplay_graph(seen["gm"])
    calls = [n for n in ours.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls].count(gate) == 1
    assert [n.target for n in calls].count(native_twice) == 1
    gate_node = next(n for n in calls if n.target is gate)
    assert gate_node.meta["tensor_meta"].shape == (2, 4)
    assert gate_node.meta["tensor_meta"].dtype == "float32"
    x, y = tp.randn(2, 4), tp.randn(2, 4)
    close(ours(x, y), program(x, y))


def test_custom_op_nodes_are_barriers_after_the_pipeline():
    from tensorplay_graph.compiler import copy_graph_module, lower_graph
    seen = {}

    def spy(gm, example_inputs, **kwargs):
        seen["gm"], seen["inputs"] = gm, example_inputs
        return gm

    tp.compile(program, backend=spy)(tp.randn(2, 4), tp.randn(2, 4))
    ours = import_tensorplay_graph(seen["gm"])
    lowered = lower_graph(copy_graph_module(ours), seen["inputs"], ["reference"], {})
    custom = [n for n in lowered.graph.nodes if n.target in (gate, native_twice)]
    assert len(custom) == 2
    assert all(n.meta.get("barrier") for n in custom)
    x, y = tp.randn(2, 4), tp.randn(2, 4)
    close(lowered(x, y), program(x, y))


def test_imported_module_keeps_parameters_by_reference():
    seen = {}

    def spy(gm, example_inputs, **kwargs):
        seen["gm"] = gm
        return gm

    net = tp.nn.Linear(4, 3)
    tp.compile(net, backend=spy)(tp.randn(2, 4))
    ours = import_tensorplay_graph(seen["gm"])
    attrs = [n for n in ours.graph.nodes if n.op == "get_attr"]
    values = [getattr(ours, n.target) for n in attrs]
    assert any(v is net.weight for v in values)
    x = tp.randn(2, 4)
    close(ours(x), net(x))


def test_strict_native_is_refused_with_a_clear_error():
    with pytest.raises(Exception, match="strict_native"):
        tp.compile(program, backend="tensorplay_graph", strict_native=True)(
            tp.randn(2, 4), tp.randn(2, 4))


def test_dynamic_true_lowers_each_size_on_its_own(monkeypatch):
    """tp.compile(dynamic=True) hands one graph for every size: a size-specialized kernel
    (TileLang's C target here) must not be reused for another size."""
    pytest.importorskip("tilelang")
    from tensorplay_graph.backends.tilelang import backend as tilelang_backend
    monkeypatch.setattr(tilelang_backend, "CPU_MIN_CHAIN", 1)
    f = lambda x: ((x * 2.0 + 1.0) * x - 3.0).abs()  # noqa: E731
    compiled = tp.compile(f, backend="tensorplay_graph", dynamic=True,
                          options={"backends": ["tilelang"]})
    for n in (1 << 16, 1 << 17):
        x = tp.randn(n)
        out = compiled(x)
        assert tuple(out.shape) == (n,) and tp.allclose(out, f(x), atol=1e-5)
