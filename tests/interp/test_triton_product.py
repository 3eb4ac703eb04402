"""The product path with the Triton backend: tensorplay_graph.compile(fn, backend="triton").

Programs are captured from torch AND TensorPlay, run through normalize ->
shape_prop -> barriers -> partition -> lower -> cleanup, and their generated
kernels run in Triton's interpreter (TRITON_INTERPRET=1, see scripts/test.sh).
Every test also checks the lowered graph, so a program that silently fell
back to eager would fail.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest


import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph import library as L  # noqa: E402
from triton_regions import lowered_module, lowered_summary  # noqa: E402

FRAMEWORKS = ["torch", "tensorplay"]


def _fw(name):
    """(namespace, functional, nn, tensor from torch) of a framework."""
    if name == "torch":
        return torch, torch.nn.functional, torch.nn, lambda t: t
    tp = pytest.importorskip("tensorplay")
    return tp, tp.nn.functional, tp.nn, lambda t: tp.from_dlpack(t.contiguous())


def _np(value):
    if isinstance(value, torch.Tensor):
        return value.detach().float().numpy()
    return np.asarray(value.tolist(), dtype="float64")


def _check(compiled, fn, args, atol=1e-5, rtol=1e-5):
    got, want = compiled(*args), fn(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w) and tuple(g.shape) == tuple(w.shape)
        np.testing.assert_allclose(_np(g), _np(w), atol=atol, rtol=rtol)
    return lowered_summary(compiled)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_pointwise_chain_with_broadcasting_and_scalars(framework):
    ns, F, _, conv = _fw(framework)

    def chain(x, col, row):
        a = x * col + 1.0
        b = ns.sigmoid(a) * row - 0.5
        c = ns.where(b > 0, b, a * 2)
        return ns.relu(c) * 3 + x / 2.0

    args = [conv(_randn(33, 40, seed=1)), conv(_randn(33, 1, seed=2)), conv(_randn(40, seed=3))]
    summary = _check(tpg.compile(chain, backend="triton"), chain, args)
    assert summary == {"kernels": ["triton_region_0"], "eager": []}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_softmax_and_log_softmax(framework):
    ns, F, _, conv = _fw(framework)

    def soft(x):
        return F.softmax(x * 2.0, dim=-1), F.log_softmax(x, dim=0)

    compiled = tpg.compile(soft, backend="triton")
    summary = _check(compiled, soft, [conv(_randn(37, 300))])
    # one region (siblings: both read x and write its shape), a rows kernel per reduced dim
    launched = [name for n in lowered_module(compiled).graph.nodes if "kernel" in n.meta
                for name in n.meta["kernel"].launch["kernels"]]
    assert len(launched) == 2 and summary["eager"] == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_residual_layer_norm_gelu_is_one_kernel(framework):
    ns, F, _, conv = _fw(framework)

    # torch's exact gelu on CPU runs eagerly (its NaN at +inf is not modelled): tanh there
    gelu = (lambda h: F.gelu(h, approximate="tanh")) if framework == "torch" else F.gelu

    def block(x, r, w, b):
        return gelu(F.layer_norm(x + r, (96,), w, b))

    args = [conv(_randn(2, 17, 96, seed=s)) for s in (1, 2)] + [conv(_randn(96, seed=s)) for s in (3, 4)]
    compiled = tpg.compile(block, backend="triton")
    summary = _check(compiled, block, args, atol=1e-4, rtol=1e-4)
    assert summary == {"kernels": ["triton_region_0"], "eager": []}
    kernel = next(n.meta["kernel"] for n in lowered_module(compiled).graph.nodes if "kernel" in n.meta)
    assert kernel.source.count("@triton.jit") == 1 and "tl.sum" in kernel.source


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_reductions_with_dim_and_keepdim(framework):
    ns, F, _, conv = _fw(framework)

    def reduce(x):
        centred = (x - x.mean(-1, keepdim=True)).exp()
        return x.sum(-1), x.mean(0, keepdim=True), x.amax(dim=1), centred.sum(dim=1, keepdim=True)

    summary = _check(tpg.compile(reduce, backend="triton"), reduce, [conv(_randn(50, 70))], atol=1e-4)
    assert summary["eager"] == [] and len(summary["kernels"]) == 4


def _mlp(nn, F, framework):
    # torch's exact gelu on CPU runs eagerly (its NaN at +inf is not modelled): tanh there
    gelu = (lambda h: F.gelu(h, approximate="tanh")) if framework == "torch" else F.gelu

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(32, 64)
            self.fc2 = nn.Linear(64, 32)

        def forward(self, x):
            return x + self.fc2(gelu(self.fc1(x)))

    return MLP()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_mlp_block_matmul_eager_epilogue_fused(framework):
    ns, F, nn, conv = _fw(framework)
    model = _mlp(nn, F, framework)
    if framework == "torch":
        model = model.eval().requires_grad_(False)
    else:
        for p in model.parameters():
            p.requires_grad = False
    x = conv(_randn(16, 32))
    summary = _check(tpg.compile(model, backend="triton"), model, [x], atol=1e-4, rtol=1e-4)
    # The two nn.Linear calls run eagerly (matmul prims are not generated); gelu and the
    # residual add are generated kernels between and after them.
    assert len(summary["eager"]) == 2 and all("linear" in n for n in summary["eager"])
    assert len(summary["kernels"]) == 2


def test_matmul_bias_gelu_epilogue_is_one_kernel():
    def f(x, w, b):
        # tanh: torch's exact gelu on CPU runs eagerly (NaN at +inf not modelled)
        return torch.nn.functional.gelu(x @ w + b, approximate="tanh") * 0.5

    args = [_randn(16, 32, seed=1), _randn(32, 24, seed=2), _randn(24, seed=3)]
    summary = _check(tpg.compile(f, backend="triton"), f, args, atol=1e-4, rtol=1e-4)
    assert summary == {"kernels": ["triton_region_0"], "eager": ["matmul"]}


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def _ops():
    ns = f"tpgprod_{uuid.uuid4().hex[:6]}"

    @L.triton_op(f"{ns}::scale2", mutates_args=())
    def scale2(x):
        out = x.new_empty(x.shape)
        n = x.numel()
        L.wrap_triton(_scale_kernel)[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out

    @L.custom_op(f"{ns}::shift", mutates_args=())
    def shift(x):
        return x + 10

    scale2.register_fake(lambda x: x.new_empty(x.shape))
    shift.register_fake(lambda x: x.new_empty(x.shape))
    return scale2, shift


def _barrier_program(ns, scale2, shift):
    def program(x, y):
        a = (x * y).exp() + 1.0
        b = scale2(a)
        c = ns.relu(b) - a
        d = shift(c)
        return (d * 0.5).tanh() + a
    return program


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_triton_op_and_custom_op_in_the_middle(framework):
    ns, F, _, conv = _fw(framework)
    scale2, shift = _ops()
    program = _barrier_program(ns, scale2, shift)
    args = [conv(_randn(16, 32, seed=1)), conv(_randn(16, 32, seed=2))]
    compiled = tpg.compile(program, backend="triton")
    summary = _check(compiled, program, args, atol=1e-4, rtol=1e-4)
    # The triton_op runs its registered kernel as a one-node Triton region; the custom op
    # stays one eager call; generated regions sit on both sides of each.
    names = summary["kernels"]
    assert names[0] == "triton_region_0" and names[1].startswith("triton_op_")
    assert names[2:] == ["triton_region_1", "triton_region_2"]
    assert len(summary["eager"]) == 1 and "shift" in summary["eager"][0]
    gm = lowered_module(compiled)
    assert sum(n.target is shift for n in gm.graph.nodes) == 1
    assert sum(n.target is scale2 for n in gm.graph.nodes) == 0  # replaced by its kernel call


def test_explain_on_cpu_lists_the_regions():
    scale2, shift = _ops()
    program = _barrier_program(torch, scale2, shift)
    x, y = _randn(16, 32, seed=1), _randn(16, 32, seed=2)
    e = tpg.explain(program, x, y, backend="triton")
    assert e.planned_device == "cuda"
    assert [r.nodes for r in e.regions] == [["mul", "exp", "add"], ["relu", "sub"],
                                           ["mul_1", "tanh", "add_1"]]
    codes = sorted(e.barrier_codes.values())
    assert codes == ["custom_op", "triton_op"]
    assert set(e.kernels) == {0, 1, 2} and all("@triton.jit" in k.source for k in e.kernels.values())
    assert "region 0 [triton]: mul, exp, add" in str(e)


def test_cuda_graphs_option_on_cpu_runs_without_graphs():
    def f(x):
        return (x * 2).relu() + 1

    compiled = tpg.compile(f, backend="triton", options={"cuda_graphs": True})
    summary = _check(compiled, f, [_randn(64)])
    assert summary == {"kernels": ["triton_region_0"], "eager": []}
    runner = next(iter(compiled.specializations.values()))
    assert type(runner.lowered).__name__ == "GraphModule"  # no CUDA tensors: no CudaGraphRunner


def test_auto_on_cpu_does_not_pick_the_interpreted_triton():
    compiled = tpg.compile(lambda x: x.exp() + 1, backend="auto")
    x = _randn(8)
    np.testing.assert_allclose(_np(compiled(x)), _np(x.exp() + 1), rtol=1e-6)
    runner = next(iter(compiled.specializations.values()))
    assert runner.lowered is None or not lowered_summary(compiled)["kernels"]
