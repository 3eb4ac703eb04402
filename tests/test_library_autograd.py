"""register_autograd through each framework's own autograd.Function; register_vmap."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay_graph import library as L
from test_library_helpers import assert_close, fresh_ns, fw  # noqa: F401 - fixture


def _cube_op(fw):
    """x**3 * w, computed outside the framework's autograd (through numpy)."""

    def kernel(x, w):
        data = fw.np(x) ** 3 * fw.np(w)
        return fw.tensor(data.tolist())

    op = L.custom_op(f"{fresh_ns()}::cube", kernel, mutates_args=())

    def setup_context(ctx, inputs, output):
        x, w = inputs
        ctx.save_for_backward(x, w)

    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * 3 * x * x * w, grad * x * x * x

    op.register_autograd(backward, setup_context=setup_context)
    return op


def test_gradients_match_analytic_and_finite_differences(fw):
    op = _cube_op(fw)
    x_data, w_data = [0.5, -1.0, 2.0], [1.5, 2.0, -0.5]
    x = fw.tensor(x_data, requires_grad=True)
    w = fw.tensor(w_data, requires_grad=True)
    out = op(x, w)
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    xs, ws = np.array(x_data), np.array(w_data)
    assert_close(fw.np(x.grad), 3 * xs ** 2 * ws)
    assert_close(fw.np(w.grad), xs ** 3)
    eps = 1e-3  # central differences of the op itself, in float64 numpy
    numeric = [((xs[i] + eps) ** 3 - (xs[i] - eps) ** 3) * ws[i] / (2 * eps) for i in range(3)]
    assert_close(fw.np(x.grad), numeric, atol=1e-3)


def test_gradient_flows_through_surrounding_ops(fw):
    op = _cube_op(fw)
    x = fw.tensor([1.0, 2.0], requires_grad=True)
    w = fw.tensor([1.0, 1.0])
    ((op(x * 2, w)) * 0.5).sum().backward()
    assert_close(fw.np(x.grad), 0.5 * 3 * (2 * np.array([1.0, 2.0])) ** 2 * 2)


def test_no_grad_records_nothing(fw):
    op = _cube_op(fw)
    x = fw.tensor([1.0, 2.0], requires_grad=True)
    with fw.no_grad():
        out = op(x, fw.tensor([1.0, 1.0]))
    assert not out.requires_grad and out.grad_fn is None
    assert fw.np(out).tolist() == [1.0, 8.0]
    plain = op(fw.tensor([1.0]), fw.tensor([2.0]))  # no input requires grad
    assert not plain.requires_grad


def test_multiple_outputs_and_none_gradients(fw):
    op = L.custom_op(f"{fresh_ns()}::split", lambda x, n: (x * n, x + n), mutates_args=())
    op.register_autograd(lambda ctx, g1, g2: (g1 * ctx.n + g2, None),
                         setup_context=lambda ctx, inputs, out: setattr(ctx, "n", inputs[1]))
    x = fw.tensor([1.0, 2.0], requires_grad=True)
    a, b = op(x, 3.0)
    (a.sum() + b.sum()).backward()
    assert fw.np(x.grad).tolist() == [4.0, 4.0]


def test_backward_without_setup_context(fw):
    op = L.custom_op(f"{fresh_ns()}::neg", lambda x: fw.tensor((-fw.np(x)).tolist()),
                     mutates_args=())
    L.register_autograd(op.name, lambda ctx, g: -g)
    x = fw.tensor([1.0, 2.0], requires_grad=True)
    op(x).sum().backward()
    assert fw.np(x.grad).tolist() == [-1.0, -1.0]


def test_backward_returning_too_many_gradients(fw):
    op = L.custom_op(f"{fresh_ns()}::ident", lambda x: x.clone(), mutates_args=())
    op.register_autograd(lambda ctx, g: (g, g))
    out = op(fw.tensor([1.0], requires_grad=True))
    with pytest.raises(RuntimeError, match="backward returned 2 gradients for 1 inputs"):
        out.sum().backward()


def test_registration_errors():
    op = L.custom_op(f"{fresh_ns()}::ident", lambda x: x, mutates_args=())
    with pytest.raises(TypeError, match="backward must be callable"):
        op.register_autograd(None)
    with pytest.raises(TypeError, match="setup_context must be callable"):
        op.register_autograd(lambda ctx, g: g, setup_context=3)
    with pytest.raises(TypeError, match="vmap function must be callable"):
        op.register_vmap(3)
    with pytest.raises(TypeError, match="fake kernel must be callable"):
        op.register_fake(3)


def test_function_class_is_the_frameworks_own(fw):
    op = _cube_op(fw)
    out = op(fw.tensor([1.0], requires_grad=True), fw.tensor([1.0]))
    function_cls = op._autograd_fns[fw.name]
    assert issubclass(function_cls, fw.module.autograd.Function)
    assert out.grad_fn is not None


def test_register_vmap_is_stored_and_exposed(fw):
    op = _cube_op(fw)

    @L.register_vmap(op)
    def rule(info, in_dims, x, w):
        return op(x, w), in_dims[0]

    assert op.vmap_fn is rule
    op(fw.tensor([1.0], requires_grad=True), fw.tensor([1.0]))  # builds the Function
    assert "vmap" in vars(op._autograd_fns[fw.name])
    assert L.register_vmap(op, rule) is rule


def test_fake_registration_and_accessor(fw):
    op = L.custom_op(f"{fresh_ns()}::ident", lambda x: x.clone(), mutates_args=())
    assert not op.has_fake
    with pytest.raises(NotImplementedError, match="register_fake"):
        op.fake(fw.tensor([1.0]))

    @L.register_fake(op)
    def fake(x):
        return x.new_empty(x.shape)

    assert op.has_fake and tuple(op.fake(fw.tensor([1.0, 2.0])).shape) == (2,)
    assert L.impl_abstract(op.name, fake) is fake
