"""TileLang backend on CPU: fused C-target pointwise kernels vs eager, support reasons, tile_lang_op."""

import os
import tempfile
import uuid

import numpy as np
import pytest

os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tpg-tilelang-"))

tilelang = pytest.importorskip("tilelang")
tp = pytest.importorskip("tensorplay")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.tilelang import TileLangBackend  # noqa: E402
from tensorplay_graph.backends.tilelang.pointwise import (  # noqa: E402
    PointwiseDesc, PwInput, PwOutput, PwStep, _index_expr, compile_pointwise)
from tensorplay_graph.passes.pipeline import compile_graph  # noqa: E402


def _np(t):
    return np.from_dlpack(t)


def _kernel_nodes(gm):
    return [n for n in gm.graph.nodes if n.meta.get("kernel") is not None]


def chain(x, y):
    a = x * y + 1.0
    b = a.relu() * 0.5 - x
    c = (b * b).clamp(max=3.0)
    return c + y, (c * 2.0).exp()


def test_chain_fuses_into_one_c_kernel_and_matches_eager():
    x, y = tp.randn(256, 512), tp.randn(512)
    gm = compile_graph(tpg.capture(chain, x, y), (x, y), backends=["tilelang"])
    kernels = _kernel_nodes(gm)
    assert len(kernels) == 1
    kernel = kernels[0].meta["kernel"]
    assert kernel.backend == "tilelang"
    assert "@T.prim_func" in kernel.source and "# source nodes:" in kernel.source
    assert "y[(idx % 512)]" in kernel.source  # broadcast of y along rows
    for got, want in zip(gm(x, y), chain(x, y)):
        np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-5)


def test_transcendental_declined_on_cpu_with_reason():
    x, y = tp.randn(256, 512), tp.randn(512)
    gm = compile_graph(tpg.capture(chain, x, y), (x, y), backends=["tilelang"])
    exp = [n for n in gm.graph.nodes if n.name == "exp"]
    assert exp and "libm" in exp[0].meta["declined"]["tilelang"]


def test_small_or_short_chains_are_declined():
    def short(x):
        return x * 2.0

    x = tp.randn(512, 512)
    gm = compile_graph(tpg.capture(short, x), (x,), backends=["tilelang"])
    assert not _kernel_nodes(gm)
    small = tp.randn(8, 8)
    gm = compile_graph(tpg.capture(lambda a: ((a * 2.0) + 1.0).relu() - a, small), (small,),
                       backends=["tilelang"])
    assert not _kernel_nodes(gm)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert "too small" in node.meta["declined"]["tilelang"]


def test_torch_program_c_kernel_matches_eager():
    torch = pytest.importorskip("torch")

    def f(x, r):
        h = torch.where(x > 0.25, x * 3.0, x - r)
        return torch.clamp(h + r, min=-1.0, max=2.0) * r

    x, r = torch.randn(64, 2048), torch.randn(64, 1)
    gm = compile_graph(tpg.capture(f, x, r), (x, r), backends=["tilelang"])
    assert len(_kernel_nodes(gm)) == 1
    out = gm(x, r)
    out = out[0] if isinstance(out, tuple) else out
    torch.testing.assert_close(out, f(x, r))


def test_descriptor_kernel_multiple_outputs_and_tensorplay_inputs():
    desc = PointwiseDesc(
        shape=(32, 300),
        inputs=(PwInput("x", (32, 300), "float32"), PwInput("c", (32, 1), "float32")),
        steps=(PwStep("s", "(x_v * c_v)"), PwStep("t", "T.if_then_else((s_v > 0.0), s_v, (0.1 * s_v))")),
        outputs=(PwOutput("t", "float32"), PwOutput("s", "float32")))
    kernel = compile_pointwise(desc, "c")
    x, c = np.random.default_rng(0).standard_normal((2, 32, 300)).astype("float32")
    c = c[:, :1].copy()
    t, s = kernel(tp.from_dlpack(x), tp.from_dlpack(c))
    np.testing.assert_allclose(_np(s), x * c, rtol=1e-6)
    np.testing.assert_allclose(_np(t), np.where(x * c > 0, x * c, 0.1 * x * c), rtol=1e-6)
    assert "#pragma omp parallel for" in kernel.c_source


@pytest.mark.parametrize("in_shape,out_shape", [((4, 1, 6), (3, 4, 5, 6)), ((5, 1), (3, 4, 5, 6)),
                                                ((1,), (7, 3)), ((7, 3), (7, 3))])
def test_broadcast_index_expression(in_shape, out_shape):
    expr = _index_expr(in_shape, out_shape)
    src = np.arange(int(np.prod(in_shape))).reshape(in_shape)
    want = np.broadcast_to(src, out_shape).reshape(-1)
    got = [eval(expr, {"idx": idx}) for idx in range(want.size)]
    assert got == list(want)


def test_supports_reasons_name_the_problem():
    backend = TileLangBackend()
    torch = pytest.importorskip("torch")
    x = torch.randn(128, 128)
    gm = tpg.capture(lambda a, b: torch.matmul(a, b).sum(), x, x)
    from tensorplay_graph.passes.normalize import normalize
    from tensorplay_graph.passes.shape_prop import shape_prop
    gm = shape_prop(normalize(gm), x, x)
    reasons = {n.name: backend.supports(n) for n in gm.graph.nodes if n.op.startswith("call_")}
    assert "CUDA" in reasons["matmul"]
    assert "reduction" in reasons["sum_"]
    cuda = TileLangBackend(device="cuda")
    assert "bfloat16" in cuda.supports(next(n for n in gm.graph.nodes if n.name == "matmul"))


def test_tile_lang_op_node_runs_through_backend():
    torch = pytest.importorskip("torch")
    import tilelang.language as T
    from tensorplay_graph import library as L
    n, block = 1000, 256

    @T.prim_func
    def add(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=1) as bx:
            for i in T.serial(block):
                if bx * block + i < n:
                    C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    launch = L.wrap_tilelang(tilelang.compile(add, target="c"))

    @L.tile_lang_op(f"tl_{uuid.uuid4().hex[:6]}::add", mutates_args=())
    def op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(a)
        launch(a, b, out)
        return out

    a, b = torch.randn(n), torch.randn(n)
    gm = compile_graph(tpg.capture(lambda x, y: op(x, y) * 2.0, a, b), (a, b), backends=["tilelang"])
    kernels = [k.meta["kernel"] for k in _kernel_nodes(gm)]
    assert any(k.name.startswith("tilelang_ops_") for k in kernels)
    out = gm(a, b)
    out = out[0] if isinstance(out, tuple) else out
    torch.testing.assert_close(out, (a + b) * 2.0)
