"""Misaligned eager linears (odd output width) go through a padded weight: same values, eager layout."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends import aligned_gemm  # noqa: E402
from tensorplay_graph.backends.aligned_gemm import padded_linear, rewrite_misaligned_linears  # noqa: E402
from tensorplay_graph.ir.meta import TensorMeta  # noqa: E402
from tensorplay_graph.passes.pipeline import compile_graph  # noqa: E402


@pytest.mark.parametrize("bias", [False, True])
def test_padded_linear_equals_linear_with_eager_layout(bias):
    x, w = torch.randn(2, 5, 16), torch.randn(13, 16)
    b = torch.randn(13) if bias else None
    got = padded_linear(x, w, b)
    want = F.linear(x, w, b)
    assert got.shape == want.shape and got.is_contiguous()
    torch.testing.assert_close(got, want)


def _as_cuda(node, dtype="bfloat16"):
    meta = node.meta["tensor_meta"]
    node.meta["tensor_meta"] = TensorMeta(meta.shape, dtype, "cuda:0")


def test_rewrite_targets_only_large_misaligned_half_linears(monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    x, w, w8 = torch.randn(4, 16), torch.randn(13, 16), torch.randn(8, 16)
    module = compile_graph(tpg.capture(lambda x, w, w8: (F.linear(x, w), F.linear(x, w8)),
                                       x, w, w8), (x, w, w8), backends=[])
    for node in module.graph.nodes:
        if node.meta.get("tensor_meta") is not None and node.op != "output":
            _as_cuda(node)
    rewrite_misaligned_linears(module)
    targets = [n.target for n in module.graph.nodes if n.op == "call_function"]
    assert targets.count(padded_linear) == 1  # 13 outputs: padded; 8: already aligned
    got = module(x, w, w8)
    torch.testing.assert_close(got[0], F.linear(x, w))
    torch.testing.assert_close(got[1], F.linear(x, w8))


def test_cpu_and_float32_linears_are_left_alone():
    x, w = torch.randn(4, 16), torch.randn(13, 16)
    module = compile_graph(tpg.capture(lambda x, w: F.linear(x, w), x, w), (x, w), backends=[])
    rewrite_misaligned_linears(module)
    assert padded_linear not in [n.target for n in module.graph.nodes]


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    monkeypatch.setenv("TPG_PAD_LINEARS", "0")
    x, w = torch.randn(4, 16), torch.randn(13, 16)
    module = compile_graph(tpg.capture(lambda x, w: F.linear(x, w), x, w), (x, w), backends=[])
    for node in module.graph.nodes:
        if node.meta.get("tensor_meta") is not None and node.op != "output":
            _as_cuda(node)
    rewrite_misaligned_linears(module)
    assert padded_linear not in [n.target for n in module.graph.nodes]
