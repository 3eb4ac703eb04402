"""Gradients through compiled graphs equal eager; custom ops keep register_autograd."""

import logging

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg
from tensorplay_graph.library import custom_op

BACKWARD_CALLS = {"tp": 0, "torch": 0}


# A custom op whose registered backward is deliberately NOT the true derivative
# of its kernel (x * 3 -> grad * 3 + 1): gradients equal to eager prove the
# compiled graph went through the registered formula, not through the kernel.
@custom_op("tpg_autograd_test::tp_scale", mutates_args=())
def tp_scale(x: tp.Tensor) -> tp.Tensor:
    return x * 3.0


@tp_scale.register_fake
def _(x):
    return tp.empty_like(x)


def _tp_backward(ctx, grad):
    BACKWARD_CALLS["tp"] += 1
    return grad * 3.0 + 1.0


tp_scale.register_autograd(_tp_backward, setup_context=lambda ctx, inputs, output: None)


@custom_op("tpg_autograd_test::torch_scale", mutates_args=())
def torch_scale(x: torch.Tensor) -> torch.Tensor:
    return x * 3.0


@torch_scale.register_fake
def _(x):
    return torch.empty_like(x)


def _torch_backward(ctx, grad):
    BACKWARD_CALLS["torch"] += 1
    return grad * 3.0 + 1.0


torch_scale.register_autograd(_torch_backward, setup_context=lambda ctx, inputs, output: None)


def tp_program(x, w):
    h = tp.tanh(x * w) + w          # fusible region without a backward formula
    return (tp_scale(h).sin() * x).sum()


def torch_program(x, w):
    h = torch.tanh(x * w) + w
    return (torch_scale(h).sin() * x).sum()


def tp_grads(fn, x0, w0):
    x, w = x0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
    out = fn(x, w)
    out.backward()
    return out.detach().numpy(), x.grad.numpy(), w.grad.numpy()


def torch_grads(fn, x0, w0):
    x, w = x0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
    out = fn(x, w)
    out.backward()
    return out.detach().numpy(), x.grad.numpy(), w.grad.numpy()


def assert_all_close(got, want):
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backends", [["interpreter"], ["reference"]])
def test_compile_tensorplay_gradients_equal_eager(backends):
    x0, w0 = tp.randn(4, 8), tp.randn(4, 8)
    want = tp_grads(tp_program, x0, w0)
    before = BACKWARD_CALLS["tp"]
    got = tp_grads(tpg.compile(tp_program, options={"backends": backends}), x0, w0)
    assert_all_close(got, want)
    assert BACKWARD_CALLS["tp"] == before + 1


@pytest.mark.parametrize("backends", [["interpreter"], ["reference"]])
def test_compile_torch_gradients_equal_eager(backends):
    x0, w0 = torch.randn(4, 8), torch.randn(4, 8)
    want = torch_grads(torch_program, x0, w0)
    before = BACKWARD_CALLS["torch"]
    got = torch_grads(tpg.compile(torch_program, options={"backends": backends}), x0, w0)
    assert_all_close(got, want)
    assert BACKWARD_CALLS["torch"] == before + 1


def test_tp_compile_gradients_equal_eager():
    x0, w0 = tp.randn(4, 8), tp.randn(4, 8)
    compiled = tp.compile(tp_program, backend="tensorplay_graph",
                          options={"backends": ["reference"]})
    assert_all_close(tp_grads(compiled, x0, w0), tp_grads(tp_program, x0, w0))


def test_torch_compile_gradients_equal_eager(fresh_dynamo):
    x0, w0 = torch.randn(4, 8), torch.randn(4, 8)
    compiled = torch.compile(torch_program, backend="tensorplay_graph",
                             options={"backends": ["reference"]})
    assert_all_close(torch_grads(compiled, x0, w0), torch_grads(torch_program, x0, w0))


def test_module_parameters_get_eager_gradients():
    net = tp.nn.Linear(8, 4)
    x = tp.randn(3, 8)
    compiled = tpg.compile(lambda v: tp_scale(net(v)).relu().sum(),
                           options={"backends": ["reference"]})
    compiled(x).backward()
    got = net.weight.grad.numpy().copy()
    net.weight.grad = None
    tp_scale(net(x)).relu().sum().backward()
    np.testing.assert_allclose(got, net.weight.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_grad_path_runs_compiled_pair_and_no_grad_uses_lowered_graph(caplog):
    caplog.set_level(logging.INFO, logger="tensorplay_graph.compile")
    f = tpg.compile(tp_program, options={"backends": ["reference"]})
    x, w = tp.randn(4, 8, requires_grad=True), tp.randn(4, 8, requires_grad=True)
    f(x, w)
    f(x, w)
    assert not [r for r in caplog.records if "eager dispatch" in r.getMessage()]
    spec = next(iter(f.specializations.values()))
    assert spec.runner.training.compiled        # the joint graph's forward / backward pair
    assert spec.lowered is None                 # the inference graph is not built for training
    with tp.no_grad():
        out = f(x, w)
    assert spec.lowered is not None
    assert not out.requires_grad
    np.testing.assert_allclose(out.numpy(), tp_program(x, w).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_eager_autograd_fallback_is_logged(caplog, monkeypatch):
    import tensorplay_graph.autograd_regions as regions
    from tensorplay_graph import prims
    monkeypatch.setattr(prims.get("tanh"), "vjp", None)
    regions._policy_logged = False
    caplog.set_level(logging.INFO, logger="tensorplay_graph.compile")
    f = tpg.compile(tp_program, options={"backends": ["reference"]})
    x, w = tp.randn(4, 8, requires_grad=True), tp.randn(4, 8, requires_grad=True)
    assert_all_close(tp_grads(f, x.detach(), w.detach()), tp_grads(tp_program, x.detach(), w.detach()))
    f(x, w)
    assert len([r for r in caplog.records if "eager dispatch" in r.getMessage()]) == 1
    assert "prim tanh" in f.explain() and "has no VJP rule" in f.explain()
