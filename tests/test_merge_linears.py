"""Linear layers reading one input merged into one GEMM (``passes/merge_linears.py``).

The rewrite is for CUDA; here it runs on CPU tensors (``devices`` / ``sm_count`` stand-ins),
and every rewritten program is compared with eager.
"""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorplay_graph as tpg  # noqa: E402
import tensorplay_graph.passes.decompose as decompose_module  # noqa: E402
from tensorplay_graph.passes.merge_linears import (ConcatenatedWeights,  # noqa: E402
                                                   merge_sibling_linears)
from tensorplay_graph.passes.normalize import normalize  # noqa: E402
from tensorplay_graph.passes.shape_prop import shape_prop  # noqa: E402

BF = torch.bfloat16


class Attention(torch.nn.Module):
    """Llama's projections: three linears of one input, viewed into heads; rope on q."""

    def __init__(self, bias=False, width=64, heads=4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (torch.nn.Linear(width, width, bias=bias) for _ in range(3))

    def split(self, y):
        b, t, _ = y.shape
        return y.view(b, t, self.heads, -1).transpose(1, 2)

    def forward(self, x):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        half = q.shape[-1] // 2
        q = q * 0.5 + torch.cat((-q[..., half:], q[..., :half]), -1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(x.shape)


def _rewritten(fn, args, sm_count=132):
    gm = tpg.capture(fn, *args)
    normalize(gm)
    shape_prop(gm, *args)
    count = merge_sibling_linears(gm, "torch", devices=("cpu",), sm_count=sm_count)
    gm.recompile()
    return gm, count


def _prims(gm):
    return [n.meta["prim"].name for n in gm.graph.nodes if n.meta.get("prim") is not None]


def _input(width=64, seed=0):
    return torch.randn(2, 8, width, generator=torch.Generator().manual_seed(seed)).to(BF)


@pytest.mark.parametrize("bias", [False, True])
def test_projections_become_one_gemm_with_eagers_values(bias):
    torch.manual_seed(0)
    model, x = Attention(bias=bias).to(BF).eval(), _input()
    gm, count = _rewritten(model, (x,))
    assert count == 1 and _prims(gm).count("linear") == 1
    merged = [n for n in gm.graph.nodes if isinstance(n.target, ConcatenatedWeights)]
    assert len(merged) == (2 if bias else 1)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x), atol=2e-2, rtol=2e-2)
    # the views of each slice carry the strides the slice gives them
    view = next(n for n in gm.graph.nodes if n.op == "call_method" and n.target == "view")
    assert view.meta["tensor_meta"].stride[1] == 3 * 64


def _sm_count_patch(monkeypatch, sm_count=132):
    original = merge_sibling_linears
    monkeypatch.setattr(decompose_module, "merge_sibling_linears",
                        lambda gm, fw: original(gm, fw, devices=("cpu", "cuda"), sm_count=sm_count))


def test_compiled_program_reads_a_weight_written_in_place_or_replaced(monkeypatch):
    _sm_count_patch(monkeypatch)
    torch.manual_seed(0)
    model, x = Attention().to(BF).eval(), _input()
    compiled = tpg.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=2e-2, rtol=2e-2)
        model.k.weight.mul_(-2.0)      # in place: the concatenation is refreshed
        torch.testing.assert_close(compiled(x), model(x), atol=2e-2, rtol=2e-2)
        model.v.weight = torch.nn.Parameter(torch.randn_like(model.v.weight))   # replaced
        torch.testing.assert_close(compiled(x), model(x), atol=2e-2, rtol=2e-2)
    assert "concatenated for one GEMM" in str(tpg.explain(model, x))


def test_concatenation_is_refreshed_in_its_buffer_before_a_replay():
    weights = [torch.randn(4, 3) for _ in range(3)]
    cache = ConcatenatedWeights()
    first = cache(*weights)
    assert torch.equal(first, torch.cat(weights)) and cache(*weights) is first
    weights[1].add_(1.0)
    assert cache.refresh_for_replay() and torch.equal(first, torch.cat(weights))
    del weights[2]
    gc.collect()
    assert not cache.refresh_for_replay()   # a weight is gone: the program must run again


def returns_a_projection(x, wq, wk):
    return F.linear(x, wq), F.linear(x, wk) * 2


def writes_a_projection(x, wq, wk):
    q = F.linear(x, wq)
    q.mul_(2)
    return q.sum(-1) + F.linear(x, wk).sum(-1)


class StateLinears(torch.nn.Module):
    def __init__(self, fn, widths=(64, 64)):
        super().__init__()
        self.fn = fn
        self.wq, self.wk = (torch.nn.Parameter(torch.randn(w, 64) * 0.1) for w in widths)

    def forward(self, x):
        return self.fn(x, self.wq, self.wk)


@pytest.mark.parametrize("fn", [returns_a_projection, writes_a_projection])
def test_a_projection_returned_or_written_keeps_its_own_gemm(fn):
    model, x = StateLinears(fn).to(BF), _input()
    gm, count = _rewritten(model, (x,))
    assert count == 0 and _prims(gm).count("linear") == 2
    with torch.no_grad():
        got, want = gm(x), model(x)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, w)


def read_by_sum(x, wq, wk):
    return F.linear(x, wq).sum(-1) + F.linear(x, wk).sum(-1)


def test_gemms_of_more_than_one_wave_stay_apart():
    model, x = StateLinears(read_by_sum).to(BF), _input()
    # 16 rows x 64 outputs is one 128 x 256 tile: with no SM to spare, nothing merges
    assert _rewritten(model, (x,), sm_count=0)[1] == 0
    assert _rewritten(model, (x,), sm_count=1)[1] == 1


def test_layers_of_different_inputs_or_bias_kinds_stay_apart():
    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(64, 32, bias=True)
            self.b = torch.nn.Linear(64, 32, bias=False)

        def forward(self, x):
            return self.a(x).sum(-1) + self.b(x).sum(-1) + self.b(x * 2).sum(-1)

    model, x = Mixed().to(BF), _input()
    gm, count = _rewritten(model, (x,))
    assert count == 0
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x))
