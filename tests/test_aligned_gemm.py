"""Misaligned eager GEMMs (odd output width, misaligned operand rows) go through padded
operands: same values, eager layout."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends import aligned_gemm, aligned_linear  # noqa: E402
from tensorplay_graph.backends.aligned_gemm import (aligned_matmul, gemm_padding,  # noqa: E402
                                                    rewrite_misaligned_gemms)
from tensorplay_graph.backends.aligned_linear import (PaddedRowsWeight, padded_linear,  # noqa: E402
                                                      padded_weight_linear)
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


@pytest.mark.parametrize("n", [45, 50, 44, 17])  # odd, 2 mod 4, 4 mod 8, barely two classes wide
@pytest.mark.parametrize("rows", [1, 5, 37])
@pytest.mark.parametrize("bias", [False, True])
def test_interleaved_linear_writes_eager_layout(n, rows, bias):
    x, w = torch.randn(rows, 16, dtype=torch.float64), torch.randn(n, 16, dtype=torch.float64)
    b = torch.randn(n, dtype=torch.float64) if bias else None
    got = aligned_linear.interleaved_linear(x, w, b, n)
    assert got is not None and got.shape == (rows, n) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, w, b))


def test_interleaved_linear_reads_a_padded_weight_and_keeps_leading_dims():
    x, w = torch.randn(2, 9, 24, dtype=torch.bfloat16), torch.randn(51, 24, dtype=torch.bfloat16)
    padded = F.pad(w, (0, 0, 0, 5))
    got = aligned_linear.interleaved_linear(x, padded, None, 51)
    assert got.shape == (2, 9, 51)
    torch.testing.assert_close(got.float(), F.linear(x.float(), w.float()), rtol=2e-2, atol=2e-1)


def test_interleaved_linear_declines_what_it_cannot_write_in_place():
    interleaved = aligned_linear.interleaved_linear
    assert interleaved(torch.randn(4, 12), torch.randn(21, 12), None, 21) is None  # K unaligned
    assert interleaved(torch.randn(4, 16), torch.randn(16, 16), None, 16) is None  # aligned rows
    assert interleaved(torch.randn(4, 16), torch.randn(13, 16), None, 13) is None  # too narrow
    assert interleaved(torch.randn(16, 4).t(), torch.randn(21, 16), None, 21) is None  # strided a
    w = torch.randn(21, 16, requires_grad=True)
    assert interleaved(torch.randn(4, 16), w, None, 21) is None  # autograd needs the padded way
    got = padded_linear(torch.randn(4, 16), w)  # which still differentiates
    got.sum().backward()
    assert w.grad.shape == w.shape
    with torch.no_grad():
        assert interleaved(torch.randn(4, 16), w, None, 21) is not None


def _as_cuda(node, dtype="bfloat16"):
    meta = node.meta["tensor_meta"]
    node.meta["tensor_meta"] = TensorMeta(meta.shape, dtype, "cuda:0")


def _planned_as_cuda(fn, *args):
    """``fn`` planned on the CPU with every value described as a bf16 CUDA tensor."""
    module = compile_graph(tpg.capture(fn, *args), args, backends=[])
    for node in module.graph.nodes:
        if node.meta.get("tensor_meta") is not None and node.op != "output":
            _as_cuda(node)
    return module


def test_rewrite_targets_only_large_misaligned_half_linears(monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    x, w, w8 = torch.randn(4, 12), torch.randn(13, 12), torch.randn(8, 12)
    module = _planned_as_cuda(lambda x, w, w8: (F.linear(x, w), F.linear(x, w8)), x, w, w8)
    rewrite_misaligned_gemms(module)
    targets = [n.target for n in module.graph.nodes if n.op == "call_function"]
    # 13 outputs with K = 12: padded (the weight is an input: padded once, by a cache);
    # 8 outputs: already aligned
    assert targets.count(padded_weight_linear) == 1
    assert sum(isinstance(t, PaddedRowsWeight) for t in targets) == 1
    got = module(x, w, w8)
    torch.testing.assert_close(got[0], F.linear(x, w))
    torch.testing.assert_close(got[1], F.linear(x, w8))
    with torch.no_grad():
        w.mul_(-2.0)  # in place: the cached padded copy must follow
    torch.testing.assert_close(module(x, w, w8)[0], F.linear(x, w))


def test_rewrite_with_aligned_k_keeps_no_padded_copy(monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    x, w = torch.randn(4, 16), torch.randn(21, 16)
    module = _planned_as_cuda(lambda x, w: F.linear(x, w), x, w)
    rewrite_misaligned_gemms(module)
    targets = [n.target for n in module.graph.nodes if n.op == "call_function"]
    # interleaved_linear reads the weight in place: no cache of a padded copy
    assert padded_linear in targets and not any(isinstance(t, PaddedRowsWeight) for t in targets)
    with torch.no_grad():
        got = module(x, w)
        w.mul_(-2.0)
        again = module(x, w)
    torch.testing.assert_close(got, -0.5 * again)
    torch.testing.assert_close(again, F.linear(x, w))


def test_training_halves_pad_their_weights_per_call(monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    x, w = torch.randn(4, 16), torch.randn(13, 16)
    module = _planned_as_cuda(lambda x, w: F.linear(x, w), x, w)
    rewrite_misaligned_gemms(module, cache_weights=False)
    targets = [n.target for n in module.graph.nodes if n.op == "call_function"]
    assert padded_linear in targets and not any(isinstance(t, PaddedRowsWeight) for t in targets)
    torch.testing.assert_close(module(x, w), F.linear(x, w))


def test_padded_weight_is_cached_and_follows_the_parameter():
    w, x = torch.randn(13, 16), torch.randn(3, 16)
    cache = PaddedRowsWeight()
    with torch.no_grad():
        first = cache(w)
        assert first.shape == (16, 16) and torch.equal(first[:13], w)
        assert not first[13:].any()  # zero rows add nothing to the product
        assert cache(w) is first  # unchanged weight: no copy
        w.add_(1.0)
        again = cache(w)
        assert again.data_ptr() == first.data_ptr() and torch.equal(again[:13], w)  # same buffer
        assert not again[13:].any()
        w.sub_(3.0)
        assert cache.refresh_for_replay() and torch.equal(first[:13], w)  # before a replay
        torch.testing.assert_close(padded_weight_linear(x, cache(w), None, 13), F.linear(x, w))
    trained = torch.randn(13, 16, requires_grad=True)
    out = PaddedRowsWeight()(trained)  # grad mode: a differentiable pad, never cached
    out.sum().backward()
    assert torch.equal(trained.grad, torch.ones_like(trained))


def test_cpu_and_float32_linears_are_left_alone():
    x, w = torch.randn(4, 16), torch.randn(13, 16)
    module = compile_graph(tpg.capture(lambda x, w: F.linear(x, w), x, w), (x, w), backends=[])
    rewrite_misaligned_gemms(module)
    assert not {padded_linear, padded_weight_linear} & {n.target for n in module.graph.nodes}


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    monkeypatch.setenv("TPG_PAD_LINEARS", "0")
    x, w = torch.randn(4, 16), torch.randn(13, 16)
    module = _planned_as_cuda(lambda x, w: F.linear(x, w), x, w)
    rewrite_misaligned_gemms(module)
    assert not {padded_linear, padded_weight_linear} & {n.target for n in module.graph.nodes}


def _operands(case):
    """(a, b) of ``a @ b`` in the layouts a training step hands cuBLAS."""
    g, w, h = torch.randn(2, 3, 13), torch.randn(13, 16), torch.randn(6, 24)
    return {
        "k_odd_rows": (g, w),                            # logits grad @ weight: K = 13
        "transposed_m_odd": (g.reshape(6, 13).t(), h),   # grad^T @ hidden: lda = 13
        "n_odd": (h, torch.randn(24, 13)),               # output rows of 13
        "transposed_b": (h, torch.randn(13, 24).t()),    # b col-major, ld 24, N = 13
        "weight_t": (g.reshape(6, 13)[:, :8].contiguous(), torch.randn(45, 8).t()),  # x @ W.T
        "aligned": (torch.randn(4, 8), torch.randn(8, 16)),
        "sliced_rows": (torch.randn(6, 20)[:, :16], torch.randn(16, 8)),  # stride 20, K 16
    }[case]


@pytest.mark.parametrize("case", ["k_odd_rows", "transposed_m_odd", "n_odd", "transposed_b",
                                  "weight_t", "aligned", "sliced_rows"])
def test_aligned_matmul_equals_matmul_with_eager_layout(case):
    a, b = _operands(case)
    got, want = aligned_matmul(a, b), torch.matmul(a, b)
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got, want)


def test_a_product_with_a_transposed_weight_is_written_in_place(monkeypatch):
    # x @ W.T with N misaligned and K aligned: linear(x, W) into eager's layout, no padded
    # product copied out
    monkeypatch.setattr(aligned_gemm, "first_columns", lambda *a: pytest.fail("copied out"))
    a, b = _operands("weight_t")
    got = aligned_matmul(a, b)
    assert got.is_contiguous()
    torch.testing.assert_close(got, torch.matmul(a, b))


def _aligned_for_cublas(x):
    s0, s1 = x.stride()
    lead = s0 if s1 == 1 else s1 if s0 == 1 else None
    return lead is not None and lead % 8 == 0


@pytest.mark.parametrize("case", ["k_odd_rows", "transposed_m_odd", "n_odd", "transposed_b",
                                  "sliced_rows"])
def test_padding_gives_cublas_aligned_operands_and_output(case):
    a, b = _operands(case)
    a = a.reshape(-1, a.shape[-1])
    pad_m, pad_k, pad_n, copy_a, copy_b = gemm_padding(a, b)
    assert copy_a or copy_b
    lhs = aligned_gemm._padded(a, pad_m, pad_k, a.stride(0) == 1) if copy_a else a
    rhs = aligned_gemm._padded(b, pad_k, pad_n, b.stride(0) == 1) if copy_b else b
    assert _aligned_for_cublas(lhs) and _aligned_for_cublas(rhs)
    assert lhs.shape[1] == rhs.shape[0] and rhs.shape[1] % 8 == 0
    # the transposed operand stays transposed: its copy reads memory in order
    assert (lhs.stride(0) == 1) == (a.stride(0) == 1 and a.stride(1) != 1)


def test_aligned_operands_need_no_padding():
    assert gemm_padding(*_operands("aligned")) is None


def test_rewrite_sends_misaligned_half_matmuls_to_aligned_matmul(monkeypatch):
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    g, w, w8 = torch.randn(4, 13), torch.randn(13, 16), torch.randn(8, 16)
    x8 = torch.randn(4, 8)
    module = _planned_as_cuda(lambda g, w, x8, w8: (g @ w, x8 @ w8), g, w, x8, w8)
    rewrite_misaligned_gemms(module)
    targets = [n.target for n in module.graph.nodes if n.op == "call_function"]
    assert targets.count(aligned_matmul) == 1  # K = 13: padded; 8 x 8 x 16: left alone
    got = module(g, w, x8, w8)
    torch.testing.assert_close(got[0], g @ w)
    torch.testing.assert_close(got[1], x8 @ w8)


def test_rewrite_takes_the_backward_graphs_matmul_method_calls(monkeypatch):
    """VJP rules write ``g.matmul(w)`` (a method call): the LM head's backward GEMMs."""
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    g, w = torch.randn(4, 13), torch.randn(13, 16)
    module = _planned_as_cuda(lambda g, w: (g.matmul(w), g.t().matmul(g)), g, w)
    methods = [n for n in module.graph.nodes if n.op == "call_method" and n.target == "matmul"]
    assert len(methods) == 2, [(n.op, n.target) for n in module.graph.nodes]
    rewrite_misaligned_gemms(module)
    assert [n.target for n in module.graph.nodes].count(aligned_matmul) == 2
    got = module(g, w)
    torch.testing.assert_close(got[0], g @ w)
    torch.testing.assert_close(got[1], g.t() @ g)


def test_gemms_reading_one_matrix_share_one_padded_copy(monkeypatch):
    """The LM head's backward: the logits gradient times the weight, and its transpose times
    the hidden states. One padded copy of the gradient serves both GEMMs."""
    monkeypatch.setattr(aligned_gemm, "MIN_ELEMENTS", 1)
    g, w, h = torch.randn(2, 3, 13), torch.randn(13, 16), torch.randn(6, 24)
    program = lambda g, w, h: (g.matmul(w), g.reshape(6, 13).transpose(0, 1).matmul(h))  # noqa: E731
    module = _planned_as_cuda(program, g, w, h)
    rewrite_misaligned_gemms(module)
    targets = [n.target for n in module.graph.nodes]
    assert targets.count(aligned_matmul) == 2 and targets.count(aligned_gemm.padded_columns) == 1
    copies = []
    padded = aligned_gemm._padded
    monkeypatch.setattr(aligned_gemm, "_padded", lambda x, *a: copies.append(x.shape) or padded(x, *a))
    got = module(g, w, h)
    assert copies == [w.shape]  # only the weight's rows; the gradient's copy is shared
    for got_one, want in zip(got, program(g, w, h)):
        assert got_one.shape == want.shape and got_one.stride() == want.stride()
        torch.testing.assert_close(got_one, want)


def test_a_shared_copy_of_another_matrix_is_not_used():
    g, other, w = torch.randn(6, 13), torch.randn(6, 13), torch.randn(13, 16)
    shared = aligned_gemm.padded_columns(other)
    torch.testing.assert_close(aligned_matmul(g, w, shared), g @ w)
    x = torch.randn(6, 8)
    torch.testing.assert_close(aligned_matmul(g.t(), x, shared), g.t() @ x)
    g.add_(1)  # an in-place write after the copy: the copy is stale and not used
    stale = aligned_gemm.padded_columns(g)
    g.mul_(2)
    torch.testing.assert_close(aligned_matmul(g, w, stale), g @ w)


def test_a_weight_trained_between_calls_is_padded_per_call():
    """Written in place before every call (a training loop with graphs off), the weight would
    be copied into the cache every call anyway: the cache lets its buffer go."""
    w = torch.randn(13, 16)
    cache = PaddedRowsWeight()
    with torch.no_grad():
        buffers = []
        for step in range(4):
            got = cache(w)
            assert torch.equal(got[:13], w) and not got[13:].any(), step
            buffers.append(got)  # kept: no address is reused
            w.add_(1.0)
    assert cache.per_call and cache._copy is None
    # cached, refilled in place once, then a new copy per call
    assert buffers[0] is buffers[1]
    assert buffers[2] is not buffers[1] and buffers[3] is not buffers[2]
    assert cache.refresh_for_replay()  # a graph captured now pads inside itself

    replayed = PaddedRowsWeight()  # a graph reads this one's buffer: it stays
    with torch.no_grad():
        first = replayed(w)
        for _ in range(3):
            w.add_(1.0)
            assert replayed.refresh_for_replay() and torch.equal(first[:13], w)
            assert replayed(w) is first
    assert not replayed.per_call


def test_a_replay_pads_the_weight_passed_in_this_call():
    """A weight passed as an argument moves every call: the runner copies it into its private
    buffer before the replay, and the cached padded copy must be refreshed from that buffer
    after the copy (before it, each replay read the previous call's weight)."""
    from tensorplay_graph.backends.cuda_graphs import CudaGraphRunner
    cache = PaddedRowsWeight()
    captured = {}

    def program(x, w):
        return padded_weight_linear(x, cache(w), None, 13)

    class Graphs:  # a stand-in whose replay runs the captured GEMM, never the cache
        is_tensor = staticmethod(lambda v: isinstance(v, torch.Tensor))
        warm_up = staticmethod(lambda fn, args, pool=None: fn(*args))
        storage_uses = staticmethod(lambda t: 1)

        @staticmethod
        def capture(fn, args, pool=None):
            out = fn(*args)
            captured.update(x=args[0], padded=cache._copy, out=out)
            return captured, out

        @staticmethod
        def replay(graph):
            graph["out"].copy_(F.linear(graph["x"], graph["padded"])[:, :13])

    runner = CudaGraphRunner(program, ops=Graphs)
    runner._refresh = [cache]
    x = torch.randn(3, 16)
    with torch.no_grad():
        for step in range(5):  # warm-up, warm-up again (w moved), capture, two replays
            w = torch.randn(13, 16)  # a new tensor each call: copied in
            torch.testing.assert_close(runner(x, w), F.linear(x, w), msg=f"call {step}")
    assert runner.captures == 1 and runner.replays == 3
