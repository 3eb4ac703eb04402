"""Registered ops are captured as exactly one call_function node whose body never runs."""

from __future__ import annotations

import pytest

from tensorplay_graph import library as L
from tensorplay_graph.capture import capture
from tensorplay_graph.errors import GraphCaptureError
from test_library_helpers import fresh_ns, fw  # noqa: F401 - fixture


def _calls(gm):
    return [node for node in gm.graph.nodes if node.op == "call_function"]


def _counting_op(definer=L.custom_op, fake=True):
    calls = []

    def body(x, scale=2.0):
        calls.append(1)
        return x * scale

    op = definer(f"{fresh_ns()}::scale", body, mutates_args=())
    if fake:
        op.register_fake(lambda x, scale=2.0: x.new_empty(x.shape))
    return op, calls


@pytest.mark.parametrize("definer", [L.custom_op, L.triton_op, L.tile_lang_op])
def test_one_node_and_the_body_never_runs(fw, definer):
    op, calls = _counting_op(definer)

    def program(x):
        return op(x.relu(), scale=3.0) + 1

    x = fw.tensor([-1.0, 2.0])
    gm = capture(program, x)
    nodes = [n for n in _calls(gm) if n.target is op]
    assert len(nodes) == 1 and calls == []
    assert nodes[0].kwargs == {"scale": 3.0}
    meta = nodes[0].meta["tensor_meta"]
    assert tuple(meta.shape) == (2,) and meta.dtype == "float32"
    assert fw.np(gm(x)).tolist() == fw.np(program(x)).tolist() == [1.0, 7.0]


@pytest.mark.parametrize("definer", [L.custom_op, L.triton_op, L.tile_lang_op])
def test_without_fake_the_body_never_runs_and_the_meta_is_unknown(fw, definer):
    op, calls = _counting_op(definer, fake=False)
    gm = capture(lambda x: op(x) * 2, fw.tensor([1.0]))
    assert len([n for n in _calls(gm) if n.target is op]) == 1
    assert calls == []  # before: once, on the example value (a real kernel launch)
    assert all("tensor_meta" not in n.meta for n in _calls(gm))
    assert fw.np(gm(fw.tensor([1.0]))).tolist() == [4.0] and len(calls) == 1


def test_mutating_op_capture_keeps_examples_intact(fw):
    def add_into(x, out):
        out.add_(x)

    op = L.custom_op(f"{fresh_ns()}::add_into", add_into, mutates_args=("out",))

    def program(x, out):
        op(x, out)
        return out * 1

    x, out = fw.tensor([1.0]), fw.tensor([10.0])
    gm = capture(program, x, out)
    assert fw.np(out).tolist() == [10.0]  # capture ran the kernel on copies
    assert len([n for n in _calls(gm) if n.target is op]) == 1
    result = gm(x, out)
    assert fw.np(result).tolist() == [11.0] and fw.np(out).tolist() == [11.0]


def test_autograd_op_captured_and_replayed(fw):
    op, _ = _counting_op()
    op.register_autograd(lambda ctx, g: (g * 2.0, None))
    gm = capture(lambda x: op(x), fw.tensor([1.0]))
    leaf = fw.tensor([1.0, 2.0], requires_grad=True)
    gm(leaf).sum().backward()
    assert fw.np(leaf.grad).tolist() == [2.0, 2.0]


def test_raw_launches_under_capture_raise(fw):
    class Launcher:
        def __getitem__(self, grid):
            return lambda *args: None

    class TileKernel:
        _tilelang_kernel = True

        def __call__(self, *args):
            return args[0]

    triton_kernel = L.wrap_triton(Launcher())
    tile_kernel = L.wrap_tilelang(TileKernel())
    with pytest.raises(GraphCaptureError, match="triton_op"):
        capture(lambda x: triton_kernel[(1,)](x, 4), fw.tensor([1.0]))
    with pytest.raises(GraphCaptureError, match="tile_lang_op"):
        capture(lambda x: tile_kernel(x), fw.tensor([1.0]))


def test_tensorplay_tracer_and_compile_capture_one_node():
    tp = pytest.importorskip("tensorplay")
    from tensorplay.graph import Tracer

    op, calls = _counting_op()

    def program(x):
        return op(x.relu()) + 1

    gm = Tracer().trace(program, sample_inputs={"x": tp.ones(3)})
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"].count(op) == 1
    assert calls == []
    seen = []

    def backend(graph_module, example_inputs, **kwargs):
        seen.append(graph_module)
        return graph_module

    compiled = tp.compile(program, backend=backend)
    x = tp.tensor([-1.0, 2.0])
    assert compiled(x).tolist() == program(x).tolist() == [1.0, 5.0]
    assert seen and [n.target for n in seen[0].graph.nodes].count(op) == 1
