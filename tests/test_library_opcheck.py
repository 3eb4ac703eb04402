"""opcheck passes good ops and catches each planted defect, on both frameworks."""

from __future__ import annotations

import itertools

import pytest

from tensorplay_graph import library as L
from test_library_helpers import fresh_ns, fw  # noqa: F401 - fixture


def _define(body, fake=None, backward=None, mutates_args=()):
    op = L.custom_op(f"{fresh_ns()}::op", body, mutates_args=mutates_args)
    if fake is not None:
        op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward)
    return op


def _sample(fw):
    return (fw.tensor([1.0, -2.0, 3.0]), fw.tensor([0.5, 0.5, 0.5]))


def test_good_op_passes_every_check(fw):
    op = _define(lambda x, y: x * y + 1, fake=lambda x, y: x.new_empty(x.shape))
    assert L.opcheck(op, _sample(fw)) == {}
    assert L.opcheck(op.name, _sample(fw), test_utils="all") == {}


def test_good_mutating_op_passes(fw):
    def add_into(x, out):
        out.add_(x)

    op = _define(add_into, fake=lambda x, out: None, mutates_args=("out",))
    assert L.opcheck(op, _sample(fw)) == {}


def test_undeclared_mutation(fw):
    def sneaky(x, y):
        y.mul_(2)
        return x + y

    op = _define(sneaky, fake=lambda x, y: x.new_empty(x.shape))
    failures = L.opcheck(op, _sample(fw), test_utils="test_schema", raise_exception=False)
    assert "mutated argument 'y'" in failures["test_schema"]


@pytest.mark.parametrize("body", [lambda x, y: x, lambda x, y: x[1:], lambda x, y: x.view(3)])
def test_output_aliasing_input(fw, body):
    op = _define(body)
    failures = L.opcheck(op, _sample(fw), test_utils=["test_schema"], raise_exception=False)
    assert "aliases input 'x'" in failures["test_schema"]


@pytest.mark.parametrize("fake, message", [
    (lambda x, y: x.new_empty((4,)), "shape mismatch"),
    (lambda x, y: x.double(), "dtype mismatch"),
    (lambda x, y: (x.new_empty(x.shape), x.new_empty(x.shape)), "returned 2 tensor(s)"),
])
def test_bad_fake(fw, fake, message):
    op = _define(lambda x, y: x + y, fake=fake)
    failures = L.opcheck(op, _sample(fw), test_utils="test_faketensor", raise_exception=False)
    assert message in failures["test_faketensor"]


def test_missing_fake(fw):
    op = _define(lambda x, y: x + y)
    failures = L.opcheck(op, _sample(fw), raise_exception=False)
    assert "register_fake" in failures["test_faketensor"]
    assert set(failures) == {"test_faketensor"}


def test_missing_autograd_registration(fw):
    op = _define(lambda x, y: fw.tensor((fw.np(x) * fw.np(y)).tolist()),
                 fake=lambda x, y: x.new_empty(x.shape))
    failures = L.opcheck(op, _sample(fw), raise_exception=False)
    assert "register_autograd" in failures["test_autograd_registration"]
    op.register_autograd(lambda ctx, g: (g, g))
    assert L.opcheck(op, _sample(fw)) == {}


def test_wrong_gradient_shape(fw):
    op = _define(lambda x, y: fw.tensor((fw.np(x) * fw.np(y)).tolist()),
                 backward=lambda ctx, g: (g.sum(), g.sum()))
    failures = L.opcheck(op, _sample(fw), test_utils="test_autograd_registration",
                         raise_exception=False)
    assert "shape" in failures["test_autograd_registration"]  # ours, or torch's own check


def test_captured_graph_diverging_from_eager(fw):
    counter = itertools.count()
    op = _define(lambda x, y: x + next(counter), fake=lambda x, y: x.new_empty(x.shape))
    failures = L.opcheck(op, _sample(fw), test_utils="test_aot_dispatch_dynamic",
                         raise_exception=False)
    assert "diverges from eager" in failures["test_aot_dispatch_dynamic"]


def test_raise_exception_lists_failures(fw):
    op = _define(lambda x, y: x)
    with pytest.raises(RuntimeError, match=r"failed 3 check\(s\)") as info:
        L.opcheck(op, _sample(fw))
    assert "test_schema" in str(info.value) and "test_faketensor" in str(info.value)


def test_unknown_test_names(fw):
    op = _define(lambda x, y: x + y)
    with pytest.raises(ValueError, match="unknown opcheck test_utils"):
        L.opcheck(op, _sample(fw), test_utils=("test_schema", "test_bogus"))
    with pytest.raises(ValueError):
        L.opcheck(op, _sample(fw), test_utils="bogus")


def test_opcheck_leaves_caller_inputs_untouched(fw):
    def add_into(x, out):
        out.add_(x)

    op = _define(add_into, fake=lambda x, out: None, mutates_args=("out",))
    x, out = _sample(fw)
    L.opcheck(op, (x, out))
    assert fw.np(out).tolist() == [0.5, 0.5, 0.5]
