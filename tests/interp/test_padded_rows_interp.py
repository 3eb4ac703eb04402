"""A generated kernel writes the misaligned GEMMs' shared operand straight into padded rows
(``backends/padded_rows.py``), in Triton's interpreter: no padded copy, the GEMMs read the
kernel's output through its aligned row pitch, values and the program's results as eager's."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends import aligned_gemm  # noqa: E402
from tensorplay_graph.backends.triton.cache import KernelCache  # noqa: E402
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


def _indexed_rows(g, w, h):  # a per-row operand (each row's first element): walked by rows
    rows = g.reshape(2, 3, 13)
    grad = (rows * rows[:, :, :1] * 2.0).exp() - rows.sin()
    return grad.matmul(w), grad.reshape(6, 13).transpose(0, 1).matmul(h)


@pytest.mark.parametrize("program", [_pointwise, _indexed, _indexed_rows],
                         ids=["pointwise", "indexed", "indexed_rows"])
def test_the_producing_kernel_writes_padded_rows_and_no_copy_is_made(program, monkeypatch):
    from tensorplay_graph.backends.triton import codegen_indexed
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(codegen_indexed, "ROW_WALK_MIN", 8)  # rows of 13 are walked as rows
    torch.manual_seed(0)
    g, w, h = torch.randn(6, 13), torch.randn(13, 16), torch.randn(6, 24)
    module = compile_graph(tpg.capture(program, g, w, h), (g, w, h), backends=["triton"])
    _as_cuda(module)
    aligned_gemm.rewrite_misaligned_gemms(module)
    targets = [n.target for n in module.graph.nodes]
    assert aligned_gemm.padded_columns not in targets and targets.count(aligned_gemm.aligned_matmul) == 2
    assert targets.count(aligned_gemm.padded_base) == 1
    seen, copies, bases = [], [], []
    matmul, padded, base = aligned_gemm.aligned_matmul, aligned_gemm._padded, aligned_gemm.padded_base
    monkeypatch.setattr(aligned_gemm, "_padded", lambda x, *a: copies.append(x.shape) or padded(x, *a))
    monkeypatch.setattr(aligned_gemm, "padded_columns", lambda x: pytest.fail("gradient copied"))
    for node in module.graph.nodes:
        if node.target is matmul:
            node.target = lambda a, b, *rest: seen.append(a.stride()) or matmul(a, b, *rest)
        elif node.target is base:
            node.target = lambda x: bases.append((x, base(x))) or bases[-1][1]
    module.recompile()
    sources, jit_function = [], KernelCache.jit_function
    monkeypatch.setattr(KernelCache, "jit_function",
                        lambda self, name, text: sources.append(text) or jit_function(self, name, text))
    got = module(g, w, h)
    for got_one, want in zip(got, program(g, w, h)):
        torch.testing.assert_close(got_one, want, rtol=1e-4, atol=1e-4)
    # the gradient's rows lie 16 elements apart (13 padded to 8's multiple), read in place
    pitches = sorted(st[-2] if st[-1] == 1 else st[-1] for st in seen)
    assert pitches == [16, 16] and sorted(st[-1] for st in seen) == [1, 16], seen
    # the buffer both GEMMs take: the gradient's rows, zeros after them; only W is padded
    (x, buffer), = bases
    assert buffer.shape == (6, 16) and buffer.data_ptr() == x.data_ptr()
    assert torch.equal(buffer[:, :13], x.reshape(6, 13)) and not buffer[:, 13:].any()
    assert copies == [w.shape], copies
    if program is _indexed_rows:  # a row starts at its padded offset and runs along cols,
        # the pitch a run-time argument Triton does not specialize on (rows of 13 are off 16)
        walked = [s for s in sources if "row = pid // blocks" in s]
        assert any(re.search(r"\* \w+_out_stride1 \+ cols", s) and "do_not_specialize=[" in s
                   for s in walked), sources


def test_a_kernel_output_read_by_other_ops_keeps_its_layout(monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    g, w, h = torch.randn(6, 13), torch.randn(13, 16), torch.randn(6, 24)

    def program(g, w, h):
        grad = (g * 2.0).exp()
        return grad.matmul(w), grad.transpose(0, 1).matmul(h), grad.sum()
    module = compile_graph(tpg.capture(program, g, w, h), (g, w, h), backends=["triton"])
    _as_cuda(module)
    aligned_gemm.rewrite_misaligned_gemms(module)
    targets = [n.target for n in module.graph.nodes]
    assert aligned_gemm.padded_columns in targets and aligned_gemm.padded_base not in targets
    for got_one, want in zip(module(g, w, h), program(g, w, h)):
        torch.testing.assert_close(got_one, want, rtol=1e-4, atol=1e-4)


def test_a_padded_base_of_a_dense_matrix_is_a_zero_padded_copy():
    g = torch.randn(2, 3, 13)
    buffer = aligned_gemm.padded_base(g)
    assert buffer.shape == (6, 16) and buffer.data_ptr() != g.data_ptr()
    assert torch.equal(buffer[:, :13], g.reshape(6, 13)) and not buffer[:, 13:].any()


def test_gemms_take_the_padded_buffer_for_aligned_rows_of_odd_extent():
    """An operand in aligned rows but K (or M) odd still goes to cuBLAS padded when the
    padded buffer is at hand."""
    buffer = torch.zeros(6, 16)
    buffer[:, :13] = torch.randn(6, 13)
    buffer.tpg_source = None
    g = buffer[:, :13]
    shared = aligned_gemm.padded_base(g)
    assert aligned_gemm.gemm_padding(g, torch.randn(13, 8)) is None
    assert aligned_gemm.gemm_padding(g, torch.randn(13, 8), pad_a=True) == (0, 3, 0, True, True)
    assert aligned_gemm.gemm_padding(g.t(), torch.randn(6, 8), pad_a=True) == (3, 0, 0, True, False)
    w, h = torch.randn(13, 8), torch.randn(6, 8)
    calls = []
    mm = torch.mm
    try:
        torch.mm = lambda x, y: calls.append((x.shape, y.shape)) or mm(x, y)
        torch.testing.assert_close(aligned_gemm.aligned_matmul(g, w, shared), g @ w)
        torch.testing.assert_close(aligned_gemm.aligned_matmul(g.t(), h, shared), g.t() @ h)
    finally:
        torch.mm = mm
    assert calls == [((6, 16), (16, 8)), ((16, 6), (6, 8))], calls


def test_row_layout_arithmetic():
    assert trailing_split((64, 29, 1733), 50257) == 1
    assert trailing_split((4, 6), 5) is None and trailing_split((4, 6), 24) == 0
    assert padded_strides((64, 29, 1733), 1, 50264) == (50264, 1733, 1)
    assert padded_strides((2, 3, 13), 2, 16) == (48, 16, 1)
    assert rows_layout((2, 3, 13), (39, 13, 1), 13, 16) == (2, (48, 16, 1))
    assert rows_layout((2, 3, 13), (1, 2, 6), 13, 16) is None  # not row-major: declined
    assert rows_layout((39,), (1,), 39, 40) is None  # one row: nothing to pad
