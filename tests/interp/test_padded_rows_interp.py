"""A generated kernel writes the misaligned GEMMs' shared operand straight into padded rows
(``backends/padded_rows.py``), in Triton's interpreter: no padded copy, the GEMMs read the
kernel's output through its aligned row pitch, values and the program's results as eager's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends import aligned_gemm  # noqa: E402
from tensorplay_graph.backends.padded_rows import padded_strides, rows_layout, trailing_split  # noqa: E402
from tensorplay_graph.ir.meta import TensorMeta  # noqa: E402
from tensorplay_graph.passes.pipeline import compile_graph  # noqa: E402

pytestmark = pytest.mark.usefixtures("strict")


def _as_cuda(module):
    for node in module.graph.nodes:
        meta = node.meta.get("tensor_meta")
        if isinstance(meta, TensorMeta) and node.op != "output":
            node.meta["tensor_meta"] = TensorMeta(meta.shape, "bfloat16", "cuda:0", meta.stride)


def _pointwise(g, w, h):  # the gradient: one pointwise kernel, read by two GEMMs
    grad = (g * 2.0).exp() - 1.0
    return grad.matmul(w), grad.reshape(6, 13).transpose(0, 1).matmul(h)


def _indexed(g, w, h):  # through a view inside the region: an indexed kernel
    grad = (g.reshape(2, 3, 13) * 2.0).exp() - g.reshape(2, 3, 13).sin()
    return grad.matmul(w), grad.reshape(6, 13).transpose(0, 1).matmul(h)


@pytest.mark.parametrize("program", [_pointwise, _indexed], ids=["pointwise", "indexed"])
def test_the_producing_kernel_writes_padded_rows_and_no_copy_is_made(program, monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    torch.manual_seed(0)
    g, w, h = torch.randn(6, 13), torch.randn(13, 16), torch.randn(6, 24)
    module = compile_graph(tpg.capture(program, g, w, h), (g, w, h), backends=["triton"])
    _as_cuda(module)
    aligned_gemm.rewrite_misaligned_gemms(module)
    targets = [n.target for n in module.graph.nodes]
    assert aligned_gemm.padded_columns not in targets and targets.count(aligned_gemm.aligned_matmul) == 2
    seen, copies = [], []
    matmul, padded = aligned_gemm.aligned_matmul, aligned_gemm._padded
    monkeypatch.setattr(aligned_gemm, "_padded", lambda x, *a: copies.append(x.shape) or padded(x, *a))
    for node in module.graph.nodes:
        if node.target is matmul:
            node.target = lambda a, b, *rest: seen.append(a.stride()) or matmul(a, b, *rest)
    module.recompile()
    got = module(g, w, h)
    for got_one, want in zip(got, program(g, w, h)):
        torch.testing.assert_close(got_one, want, rtol=1e-4, atol=1e-4)
    # the gradient's rows lie 16 elements apart (13 padded to 8's multiple), read in place
    pitches = sorted(st[-2] if st[-1] == 1 else st[-1] for st in seen)
    assert pitches == [16, 16] and sorted(st[-1] for st in seen) == [1, 16], seen
    assert copies == [w.shape] or copies == [], copies  # never the gradient


def test_a_kernel_output_read_by_other_ops_keeps_its_layout(monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    g, w, h = torch.randn(6, 13), torch.randn(13, 16), torch.randn(6, 24)

    def program(g, w, h):
        grad = (g * 2.0).exp()
        return grad.matmul(w), grad.transpose(0, 1).matmul(h), grad.sum()
    module = compile_graph(tpg.capture(program, g, w, h), (g, w, h), backends=["triton"])
    _as_cuda(module)
    aligned_gemm.rewrite_misaligned_gemms(module)
    assert aligned_gemm.padded_columns in [n.target for n in module.graph.nodes]
    for got_one, want in zip(module(g, w, h), program(g, w, h)):
        torch.testing.assert_close(got_one, want, rtol=1e-4, atol=1e-4)


def test_row_layout_arithmetic():
    assert trailing_split((64, 29, 1733), 50257) == 1
    assert trailing_split((4, 6), 5) is None and trailing_split((4, 6), 24) == 0
    assert padded_strides((64, 29, 1733), 1, 50264) == (50264, 1733, 1)
    assert padded_strides((2, 3, 13), 2, 16) == (48, 16, 1)
    assert rows_layout((2, 3, 13), (39, 13, 1), 13, 16) == (2, (48, 16, 1))
    assert rows_layout((2, 3, 13), (1, 2, 6), 13, 16) is None  # not row-major: declined
    assert rows_layout((39,), (1,), 39, 40) is None  # one row: nothing to pad
