"""The steady-state call path (``fast_call``): generated checks must see every change the
general path sees -- dtype, shape, stride, requires_grad, device, scalars, state."""

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
import tensorplay_graph.compiled as compiled_module  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}


def assert_close(got, want):
    assert str(got.dtype) == str(want.dtype) and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)


def program(x, g):
    return ((x * 1.5 + g).relu() - x.sum(-1, keepdim=True)) * 2.0


@pytest.fixture
def general_calls(monkeypatch):
    """How many calls took the general path (keyed the call with ``call_key``)."""
    calls = []
    real = compiled_module.call_key

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(compiled_module, "call_key", counting)
    return calls


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_steady_calls_skip_the_general_path(fw, general_calls):
    lib = FRAMEWORKS[fw]
    f = tpg.compile(program)
    x, g = lib.randn(4, 6), lib.randn(6)
    f(x, g)
    assert len(general_calls) == 1
    for args in ((x, g), (lib.randn(4, 6), lib.randn(6)), (x, g)):  # same and fresh tensors
        assert_close(f(*args), program(*args))
    assert len(general_calls) == 1
    assert_close(f(x.double(), g.double()), program(x.double(), g.double()))
    assert len(general_calls) == 2 and len(f.specializations) == 2


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_same_shape_with_other_dtype_stride_or_requires_grad_recompiles(fw):
    lib = FRAMEWORKS[fw]
    f = tpg.compile(program, dynamic=False)  # else torch hands changed strides to Dynamo
    x, g = lib.randn(4, 6), lib.randn(6)
    for _ in range(3):
        f(x, g)
    variants = [(x.double(), g.double()),                       # dtype
                (lib.randn(6, 4).t(), g),                       # stride (same shape)
                (x.clone().requires_grad_(), g)]                # requires_grad
    if fw == "torch":
        variants.append((x.to("meta"), g.to("meta")))           # device
    for i, args in enumerate(variants):
        got = f(*args)
        assert len(f.specializations) == 2 + i, f"variant {i} reused another specialization"
        if str(got.device) != "meta":
            assert_close(got, program(*args))
        assert got.requires_grad == args[0].requires_grad
    assert_close(f(x, g), program(x, g))


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_the_same_tensor_changed_in_place_is_checked_again(fw):
    lib = FRAMEWORKS[fw]
    f = tpg.compile(program, dynamic=False)
    x, g = lib.randn(4, 6), lib.randn(6)
    for _ in range(3):
        f(x, g)
    x.resize_(3, 8)                                             # shape, via an in-place op
    g8 = lib.randn(8)
    assert_close(f(x, g8), program(x, g8))
    y = lib.randn(4, 6)
    f(y, g), f(y, g)
    y.data = lib.randn(4, 6).double()                           # dtype, version unchanged
    assert_close(f(y, g), program(y, g))                        # eager dispatch: eager's values
    z = lib.randn(4, 6)
    f(z, g), f(z, g)
    z.data = lib.randn(6, 12)[:, :6][:4]                        # stride, other storage
    assert_close(f(z, g), program(z, g))
    w = lib.randn(4, 6)
    f(w, g), f(w, g)
    w.requires_grad_()
    out = f(w, g)
    assert out.requires_grad
    out.sum().backward()
    assert w.grad is not None and tuple(w.grad.shape) == (4, 6)


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_scalars_lists_and_keywords_are_checked(fw):
    lib = FRAMEWORKS[fw]

    def h(x, pair, scale=1.0):
        return x * pair[0] + pair[1] * scale

    f = tpg.compile(h)
    x, y = lib.randn(5), lib.randn(5)
    for scale in (2.0, 2.0, 3.0, 3.0, 2.0):
        assert_close(f(x, [y, 2], scale=scale), h(x, [y, 2], scale=scale))
    assert_close(f(x, [y, 5], scale=2.0), h(x, [y, 5], scale=2.0))     # list element value
    assert_close(f(x, (y, 2), scale=2.0), h(x, (y, 2), scale=2.0))     # list -> tuple
    assert_close(f(x, [y, 2.0], scale=2.0), h(x, [y, 2.0], scale=2.0))  # int -> float
    assert len(f.specializations) == 5


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_parameter_updated_in_place_or_replaced_after_steady_calls(fw):
    lib = FRAMEWORKS[fw]
    model = lib.nn.Linear(6, 3)
    f = tpg.compile(lambda x: model(x) * 2.0)
    x = lib.randn(2, 6)
    with lib.no_grad():
        for _ in range(3):
            assert_close(f(x), model(x) * 2.0)
        model.weight.mul_(-2.0)                                  # in place: the same object
        assert_close(f(x), model(x) * 2.0)
        assert f.captures == 1
        model.weight = lib.nn.Parameter(lib.randn(3, 6))         # replaced
        for _ in range(2):
            assert_close(f(x), model(x) * 2.0)
        assert f.captures == 2


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_rebound_global_tensor_is_seen_after_steady_calls(fw):
    lib = FRAMEWORKS[fw]
    globals()["OFFSET"] = lib.ones(3)
    f = tpg.compile(offset_program)
    x = lib.randn(3)
    for _ in range(3):
        assert_close(f(x), x + 1.0)
    globals()["OFFSET"] = lib.ones(3) * 5.0
    assert_close(f(x), x + 5.0)
    assert "OFFSET" in f.recompile_reasons[-1]


def offset_program(x):
    return x + OFFSET  # noqa: F821 -- a module global, rebound by the test


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_more_alternating_signatures_than_entries_stay_correct(fw):
    lib = FRAMEWORKS[fw]
    f = tpg.compile(program, dynamic=False, options={"recompile_limit": 8})
    inputs = [(lib.randn(n, 3), lib.randn(3)) for n in range(1, 8)]
    for _ in range(3):
        for args in inputs:
            assert_close(f(*args), program(*args))
    assert len(f.specializations) == len(inputs)


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_requires_grad_set_on_the_same_tensor_leaves_the_lowered_program(fw):
    lib = FRAMEWORKS[fw]
    f = tpg.compile(program, backend="reference", dynamic=False)
    w, g = lib.randn(4, 6), lib.randn(6)
    for _ in range(3):
        assert not f(w, g).requires_grad
    w.requires_grad_()
    out = f(w, g)
    assert out.requires_grad, "the lowered program (no autograd) ran for an input needing grad"
    out.sum().backward()
    want = w.detach().clone().requires_grad_()
    program(want, g).sum().backward()
    assert_close(w.grad, want.grad)


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_data_replaced_on_the_same_tensor_recompiles_generated_kernels(fw):
    lib = FRAMEWORKS[fw]
    f = tpg.compile(program, backend="reference", dynamic=False)
    s, g = lib.randn(5, 5), lib.randn(5)
    for _ in range(3):
        f(s, g)
    s.data = s.data.t()                                         # same storage and shape
    assert_close(f(s, g), program(s, g))
    assert tuple(f.specializations)[-1][0][5] == tuple(s.stride()) == (1, 5)
    f(s, g)
    s.data = lib.randn(5, 5).double()                           # another storage and dtype
    count = len(f.specializations)
    assert_close(f(s, g), program(s, g))
    assert len(f.specializations) == count + 1


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_a_program_that_resizes_its_input_keeps_the_signature_it_was_called_with(fw):
    lib = FRAMEWORKS[fw]

    def grow(x):
        y = x * 2.0
        x.resize_(2, 8)            # the argument's shape changes during the call
        return y

    f = tpg.compile(grow, dynamic=False)
    for _ in range(2):
        x = lib.randn(4, 4)
        want = x * 2.0
        assert_close(f(x), want)
    x = lib.randn(2, 8)            # the post-call shape: another signature
    want = x * 2.0
    assert_close(f(x), want)
    assert len(f.specializations) == 2
