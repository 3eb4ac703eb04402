"""Triton backend runtime: cache integrity, launcher states, support reasons, triton_op nodes."""

import pytest

torch = pytest.importorskip("torch")

from tensorplay_graph.backends.triton import BACKEND, TritonBackend  # noqa: E402
from tensorplay_graph.backends.triton.cache import KernelCache  # noqa: E402
from tensorplay_graph.backends.triton.launcher import _make_fast_path  # noqa: E402
from triton_regions import build  # noqa: E402

SOURCE = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x_ptr):\n    pass\n"


def test_cache_memory_disk_and_corrupt_entries(tmp_path):
    cache = KernelCache(tmp_path)
    fn = cache.jit_function("k", SOURCE)
    assert cache.stats["writes"] == 1 and cache.jit_function("k", SOURCE) is fn
    (path,) = list(tmp_path.glob("tpg_*.py"))
    fresh = KernelCache(tmp_path)
    fresh.jit_function("k", SOURCE)
    assert fresh.stats["disk_hits"] == 1 and fresh.stats["writes"] == 0
    path.write_text(path.read_text()[:-20])  # a partial write
    again = KernelCache(tmp_path)
    again.jit_function("k", SOURCE)
    assert again.stats["rebuilt"] == 1 and again.stats["writes"] == 1
    assert not list(tmp_path.glob(".tmp_*"))
    text = path.read_text()
    path.write_text(text.replace("pass", "return"))  # checksum no longer matches
    last = KernelCache(tmp_path)
    last.jit_function("k", SOURCE)
    assert last.stats["rebuilt"] == 1 and "pass" in path.read_text()


def test_interpreter_launch_has_no_fast_path():
    assert _make_fast_path(None, (1, 1, 1), []) is None


def test_supports_gives_reasons():
    def prog(b, x):
        return b.call(torch.matmul, x, x) if False else b.call(torch.softmax, x, -1)
    region = build(prog, torch.randn(2, 40000))
    assert BACKEND.supports(region.nodes[0]) is None  # rows past the registers loop
    region = build(lambda b, x: b.call(torch.amax, x, -1), torch.rand(2, 40000) > 0.5)
    reason = BACKEND.supports(region.nodes[0])
    assert "40000" in reason and "bool" in reason
    region = build(lambda b, x: b.call(torch.exp, x), torch.randn(4))
    assert BACKEND.supports(region.nodes[0]) is None


def test_triton_op_node_runs_its_registered_kernel():
    import triton
    import triton.language as tl
    from tensorplay_graph.backends.base import Region
    from tensorplay_graph.ir.graph import Graph
    from tensorplay_graph.library import triton_op, wrap_triton

    @triton.jit
    def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

    @triton_op("tpgtest::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        wrap_triton(double_kernel)[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

    graph = Graph()
    p = graph.placeholder("x")
    node = graph.call_function(double, (p,))
    assert BACKEND.supports(node) is None
    kernel = TritonBackend().compile(Region(0, "triton", [node], [p], [node]))
    x = torch.randn(3000)
    torch.testing.assert_close(kernel(x)[0], x * 2)
