"""A real TileLang kernel (target "c", compiled and run on CPU) inside a tile_lang_op."""

# No `from __future__ import annotations`: TileLang evaluates T.Tensor annotations itself.
import os
import tempfile
import uuid

import numpy as np
import pytest

# TileLang reads its cache location at import time.
os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tpg-tilelang-"))

tilelang = pytest.importorskip("tilelang")
torch = pytest.importorskip("torch")
import tilelang.language as T  # noqa: E402

from tensorplay_graph import library as L  # noqa: E402
from tensorplay_graph.capture import capture  # noqa: E402
from tensorplay_graph.errors import GraphCaptureError  # noqa: E402

N = 1000
BLOCK = 256


def _add_program(n: int, block: int = BLOCK, dtype: str = "float32"):
    # CPU ("c" target): serial loops over local indices, no fragments or shared memory.
    @T.prim_func
    def add(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=1) as bx:
            for i in T.serial(block):
                if bx * block + i < n:
                    C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return add


@pytest.fixture(scope="module")
def kernels():
    """The same program compiled twice: writing into C, and allocating C (out_idx)."""
    into = tilelang.compile(_add_program(N), target="c")
    allocating = tilelang.compile(_add_program(N), out_idx=[2], target="c")
    return L.wrap_tilelang(into), L.wrap_tilelang(allocating)


def _inputs(framework: str):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(N).astype("float32"), rng.standard_normal(N).astype("float32")
    if framework == "torch":
        return torch.from_numpy(a), torch.from_numpy(b), a + b
    tp = pytest.importorskip("tensorplay")
    return tp.tensor(a.tolist(), dtype=tp.float32), tp.tensor(b.tolist(), dtype=tp.float32), a + b


def _define(kernels):
    into, allocating = kernels

    @L.tile_lang_op(f"tl_{uuid.uuid4().hex[:6]}::add", mutates_args=())
    def add(a, b):
        out = a.new_empty(a.shape)
        into(a, b, out)
        return out

    add.register_fake(lambda a, b: a.new_empty(a.shape))

    @L.tile_lang_op(f"tl_{uuid.uuid4().hex[:6]}::add_alloc", mutates_args=())
    def add_alloc(a, b):
        return allocating(a, b)

    add_alloc.register_fake(lambda a, b: a.new_empty(a.shape))
    return add, add_alloc


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_tile_lang_op_runs_on_cpu(kernels, framework):
    add, add_alloc = _define(kernels)
    a, b, want = _inputs(framework)
    for op in (add, add_alloc):
        out = op(a, b)
        assert type(out) is type(a)  # outputs cross back to TensorPlay through DLPack
        np.testing.assert_allclose(np.asarray(out.tolist()), want, rtol=1e-6)


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_tile_lang_op_captured_as_one_node(kernels, framework):
    add, _ = _define(kernels)
    a, b, want = _inputs(framework)

    def program(x, y):
        return add(x, y) * 2

    gm = capture(program, a, b)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is add]
    assert len(nodes) == 1 and add.is_tile_lang_op
    np.testing.assert_allclose(np.asarray(gm(a, b).tolist()), 2 * want, rtol=1e-6)


def test_raw_tilelang_launch_under_capture_raises(kernels):
    _, allocating = kernels
    a, b, _ = _inputs("torch")
    with pytest.raises(GraphCaptureError, match="tile_lang_op"):
        capture(lambda x, y: allocating(x, y), a, b)


def test_wrap_tilelang_inputs(kernels):
    into, _ = kernels
    assert L.wrap_tilelang(into) is into
    with pytest.raises(TypeError, match="plain callable"):
        L.wrap_tilelang(lambda a: a)
    with pytest.raises(TypeError, match="callable"):
        L.wrap_tilelang(42)


def test_wrap_tilelang_lazy_factory_compile():
    @tilelang.jit(target="c", out_idx=[2])
    def factory(n):
        return _add_program(n, block=128)

    wrapped = L.wrap_tilelang(factory)
    bound = wrapped.compile(256)
    a, b = torch.randn(256), torch.randn(256)
    np.testing.assert_allclose(bound(a, b).numpy(), (a + b).numpy(), rtol=1e-6)
