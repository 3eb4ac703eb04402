"""The grad mode inside a compiled program (``capture/grad_mode.py``): a branch on it must
not serve the other mode, and a region that sets it (``with no_grad():``, a ``@no_grad()``
helper, ``enable_grad``) must keep eager's gradients in both modes. Before,
``x * 2 if torch.is_grad_enabled() else x * 3`` returned ``x * 2`` under ``no_grad`` too, and
a ``no_grad`` region inside a training call let gradients through it (5 where eager gives 2)."""

from __future__ import annotations

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}


def values(t):
    return np.asarray(t.tolist())


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
@pytest.mark.parametrize("first", ["grad", "no_grad"])
def test_a_branch_on_the_grad_mode_follows_the_mode_of_each_call(fw, first):
    lib = FRAMEWORKS[fw]

    def f(x):
        return x * 2.0 if lib.is_grad_enabled() else x * 3.0

    compiled = tpg.compile(f)
    x = lib.ones(3)
    modes = ["grad", "no_grad"] if first == "grad" else ["no_grad", "grad"]
    for mode in modes * 2:
        if mode == "no_grad":
            with lib.no_grad():
                got, want = compiled(x), f(x)
        else:
            got, want = compiled(x), f(x)
        np.testing.assert_allclose(values(got), values(want))
    assert compiled.captures == 2
    assert "grad mode" in compiled.explain()


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_a_program_that_does_not_read_the_mode_serves_both_from_one_capture(fw):
    lib = FRAMEWORKS[fw]
    model = lib.nn.Linear(4, 2)
    compiled = tpg.compile(model)
    x = lib.randn(3, 4)
    with lib.no_grad():
        np.testing.assert_allclose(values(compiled(x)), values(model(x)), rtol=1e-5)
    np.testing.assert_allclose(values(compiled(x).detach()), values(model(x).detach()), rtol=1e-5)
    assert compiled.captures == 1


def _grad_of(fn, lib, x):
    x = x.detach().clone()
    x.requires_grad_(True)
    out = fn(x)
    out.backward()
    return values(out.detach()), values(x.grad)


def _no_grad_region(lib):
    def f(x):
        a = x * 2.0
        with lib.no_grad():
            b = (x * 3.0).exp()  # no gradient flows through b
        return (a + b).sum()
    return f


def _no_grad_helper(lib):
    @lib.no_grad()
    def target(x):
        return x.sin() * 4.0

    def f(x):
        return (x * target(x)).sum()
    return f


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
@pytest.mark.parametrize("make", [_no_grad_region, _no_grad_helper], ids=["with", "decorator"])
@pytest.mark.parametrize("first", ["grad", "no_grad"])
def test_no_gradient_flows_out_of_a_no_grad_region_in_either_mode(fw, make, first):
    lib = FRAMEWORKS[fw]
    f = make(lib)
    compiled = tpg.compile(f)
    x = lib.randn(5) * 0.5
    if first == "no_grad":
        with lib.no_grad():
            np.testing.assert_allclose(values(compiled(x)), values(f(x)), rtol=1e-5)
    for _ in range(2):
        got, want = _grad_of(compiled, lib, x), _grad_of(f, lib, x)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    # a call with an input that requires grad is its own input signature
    assert compiled.captures == (1 if first == "grad" else 2)
    assert compiled.frontend == "tensorplay_graph"


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_an_enable_grad_region_inside_a_no_grad_call_keeps_its_gradient(fw):
    lib = FRAMEWORKS[fw]

    def f(x):
        with lib.enable_grad():
            return (x * x).sum()

    compiled = tpg.compile(f)
    x = lib.randn(4).requires_grad_(True)
    for _ in range(2):
        with lib.no_grad():
            got = compiled(x)
        assert got.requires_grad  # as eager: the region records autograd
        got.backward()
        np.testing.assert_allclose(values(x.grad), values(x.detach() * 2.0), rtol=1e-5)
        x.grad = None
    with lib.no_grad():
        assert f(x).requires_grad


class _Scaled:
    """``forward`` rescales its weight in place under ``no_grad`` (weight normalization done
    by hand), then uses it; and keeps a running mean of its input in a buffer."""

    @staticmethod
    def make(lib):
        class Scaled(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = lib.nn.Parameter(lib.ones(3))
                self.register_buffer("mean", lib.zeros(3))

            def forward(self, x):
                with lib.no_grad():
                    self.w.mul_(0.5)
                    self.mean.mul_(0.9).add_(x * 0.1)
                return (x * self.w).sum() + self.mean.sum()
        return Scaled()


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_an_in_place_write_to_a_parameter_under_no_grad_matches_eager(fw):
    lib = FRAMEWORKS[fw]
    eager_model, model = _Scaled.make(lib), _Scaled.make(lib)
    compiled = tpg.compile(model)
    x = lib.arange(3.0)
    for _ in range(3):
        want, got = eager_model(x), compiled(x)
        want.backward()
        got.backward()
        np.testing.assert_allclose(values(got.detach()), values(want.detach()), rtol=1e-6)
    for name in ("w", "mean"):
        np.testing.assert_allclose(values(getattr(model, name).detach()),
                                   values(getattr(eager_model, name).detach()), rtol=1e-6)
    np.testing.assert_allclose(values(model.w.grad), values(eager_model.w.grad), rtol=1e-6)


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_an_in_place_buffer_update_under_no_grad_stays_captured(fw):
    lib = FRAMEWORKS[fw]

    class Ema(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean", lib.zeros(3))

        def forward(self, x):
            with lib.no_grad():
                self.mean.mul_(0.9).add_(x * 0.1)
            return x * 2.0 - self.mean

    model, reference = Ema(), Ema()
    compiled = tpg.compile(model)
    x = lib.arange(3.0)
    for _ in range(3):
        np.testing.assert_allclose(values(compiled(x)), values(reference(x)), rtol=1e-6)
    np.testing.assert_allclose(values(model.mean), values(reference.mean), rtol=1e-6)
    assert compiled.frontend == "tensorplay_graph"


def _twin_linears(lib):
    """Two ``Linear(4, 2)`` with the same weights: one compiled, one the eager reference."""
    model, reference = lib.nn.Linear(4, 2), lib.nn.Linear(4, 2)
    with lib.no_grad():
        reference.weight.copy_(model.weight)
        reference.bias.copy_(model.bias)
    return model, reference


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_autograd_grad_inside_the_program_matches_eager(fw):
    lib = FRAMEWORKS[fw]
    w = lib.randn(4).requires_grad_(True)

    def f(x):
        (g,) = lib.autograd.grad((x * w).sin().sum(), (w,))
        return g * 2.0

    compiled = tpg.compile(f)
    x = lib.randn(4)
    for _ in range(2):
        np.testing.assert_allclose(values(compiled(x)), values(f(x)), rtol=1e-5)
    assert w.grad is None


def _step_with_backward(lib, m):
    def step(x):
        loss = (m(x) ** 2).sum()
        loss.backward()
        return loss
    return step


def _nudge_through_parameters(lib, m):
    def nudge(x):
        y = m(x)
        with lib.no_grad():
            for p in m.parameters():
                p.add_(0.01)
        return y
    return nudge


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
@pytest.mark.parametrize("make,state", [(_step_with_backward, "grad"),
                                        (_nudge_through_parameters, "data")],
                         ids=["backward inside", "writes through parameters()"])
def test_state_a_compiled_step_changes_changes_as_in_eager(fw, make, state):
    # before: the capture ran backward() on its example values (the first call left three
    # steps of gradient in .grad, eager one); and wrote the real parameters reached through
    # model.parameters() once, at capture, never in the graph
    lib = FRAMEWORKS[fw]
    model, reference = _twin_linears(lib)
    compiled = tpg.compile(make(lib, model))
    x = lib.randn(3, 4)
    for _ in range(3):
        got, want = compiled(x), make(lib, reference)(x)
        np.testing.assert_allclose(values(got.detach()), values(want.detach()), rtol=1e-5)
        np.testing.assert_allclose(values(getattr(model.weight, state)),
                                   values(getattr(reference.weight, state)), rtol=1e-5)
