"""A GEMM + tanh-GELU rewritten into one cuBLASLt call (``passes/gemm_activation.py``)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.passes.gemm_activation import fuse_gemm_activations  # noqa: E402
from tensorplay_graph.passes.normalize import normalize  # noqa: E402
from tensorplay_graph.passes.shape_prop import shape_prop  # noqa: E402


def gpt2_mlp(b, x, w):  # transformers' Conv1D + NewGELUActivation, then the next Conv1D
    h = torch.addmm(b, x, w).view(4, 8, 24)
    y = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
    return torch.addmm(b[:16], y.view(-1, 24), w.t())


def fast_gelu(b, x, w):  # FastGELUActivation's association of the same formula
    h = torch.addmm(b, x, w)
    return 0.5 * h * (1.0 + torch.tanh(h * 0.7978845608 * (1.0 + 0.044715 * h * h))) @ w.t()


def linear_gelu(x, w, b):
    return F.linear(F.gelu(F.linear(x, w, b), approximate="tanh"), w.t())


def _addmm_args(dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    return tuple(t.to(dtype) for t in (torch.randn(24, generator=g), torch.randn(32, 16, generator=g),
                                       torch.randn(16, 24, generator=g) * 0.3))


def _linear_args(dtype=torch.bfloat16):
    b, x, w = _addmm_args(dtype)
    return x, w.t().contiguous(), b


def _rewritten(fn, args, devices=("cpu",)):
    gm = tpg.capture(fn, *args)
    normalize(gm)
    shape_prop(gm, *args)
    count = fuse_gemm_activations(gm, "torch", devices=devices)
    gm.recompile()
    return gm, count


@pytest.mark.parametrize("fn, make", [(gpt2_mlp, _addmm_args), (fast_gelu, _addmm_args),
                                      (linear_gelu, _linear_args)])
def test_gemm_and_tanh_gelu_become_one_call_with_eagers_values(fn, make):
    args = make()
    gm, count = _rewritten(fn, args)
    assert count == 1
    targets = [n.meta["prim"].name for n in gm.graph.nodes if n.meta.get("prim") is not None]
    assert targets.count("addmm_gelu") == 1 and not {"tanh", "gelu", "pow"} & set(targets)
    got, want = gm(*args), fn(*args)
    assert got.shape == want.shape and got.dtype == want.dtype
    # eager rounds the product and each step of the formula to bfloat16; the epilogue once
    torch.testing.assert_close(got.float(), want.float(), atol=0.05, rtol=0.02)


def erf_gelu(b, x, w):
    return F.gelu(torch.addmm(b, x, w)) @ w.t()


def activation_returned(b, x, w):  # a caller could see eager's -0.0 as +0.0
    return F.gelu(torch.addmm(b, x, w), approximate="tanh")


def activation_added(b, x, w):  # x + (-0.0) and x + 0.0 differ for x = -0.0
    return (F.gelu(torch.addmm(b, x, w), approximate="tanh") + 1) @ w.t()


def activation_as_bias(b, x, w):
    return torch.addmm(F.gelu(torch.addmm(b, x, w), approximate="tanh"), x, w)


def wrong_constant(b, x, w):
    h = torch.addmm(b, x, w)
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.05 * torch.pow(h, 3.0)))) @ w.t()


def product_also_returned(b, x, w):
    h = torch.addmm(b, x, w)
    return F.gelu(h, approximate="tanh") @ w.t(), h


def scaled_addmm(b, x, w):
    return F.gelu(torch.addmm(b, x, w, beta=0.5), approximate="tanh") @ w.t()


def inner_value_reused(b, x, w):
    h = torch.addmm(b, x, w)
    t = torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0)))
    return (0.5 * h * (1.0 + t)) @ w.t(), t


@pytest.mark.parametrize("fn", [erf_gelu, wrong_constant, product_also_returned, scaled_addmm,
                                inner_value_reused, activation_returned, activation_added,
                                activation_as_bias])
def test_what_is_not_exactly_a_gemm_with_a_private_tanh_gelu_stays(fn):
    args = _addmm_args()
    gm, count = _rewritten(fn, args)
    assert count == 0
    assert all(n.meta.get("prim") is None or n.meta["prim"].name != "addmm_gelu"
               for n in gm.graph.nodes)


def test_only_half_precision_on_the_devices_asked_for():
    assert _rewritten(gpt2_mlp, _addmm_args(torch.float32))[1] == 0  # float32: TF32 rules differ
    assert _rewritten(gpt2_mlp, _addmm_args(), devices=("cuda",))[1] == 0  # CPU tensors


def test_explain_planned_for_cuda_shows_the_fused_gemm(monkeypatch):
    args = _addmm_args()
    plan = tpg.explain(gpt2_mlp, *args, backend="triton", assume_device="cuda",
                       compile_kernels=False)
    assert "addmm_gelu" in plan.barriers and "tanh" not in str(plan)
    monkeypatch.setenv("TPG_CUBLASLT_GELU", "0")
    plan = tpg.explain(gpt2_mlp, *args, backend="triton", assume_device="cuda",
                       compile_kernels=False)
    assert "addmm_gelu" not in plan.barriers and any("tanh" in r.nodes for r in plan.regions)
