"""Regression tests for the reference backend's numerics (issue 13), compiled vs eager."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tp = pytest.importorskip("tensorplay")

import tensorplay_graph as tpg  # noqa: E402


def _same(got, want):
    assert str(got.dtype) == str(want.dtype)
    g, w = np.asarray(got.float().numpy()), np.asarray(want.float().numpy())
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    np.testing.assert_allclose(g, w, rtol=1e-6, equal_nan=True)


def _check(fn, *inputs):
    _same(tpg.compile(fn, backend="reference")(*inputs), fn(*inputs))


def test_torch_floor_division_by_point_one_is_pythons():
    x = torch.tensor([1.0, 0.5, 3.0, 7.0, float("inf"), -7.5, -0.0])
    _check(lambda x: torch.div(x, 0.1, rounding_mode="floor"), x)
    _check(lambda x: torch.div(x, -0.1, rounding_mode="trunc"), x)


def test_tensorplay_floor_division_floors_the_quotient():
    _check(lambda x: tp.div(x, 0.1, rounding_mode="floor"), tp.tensor([1.0, 0.5, 3.0, 7.0]))


def test_float16_times_large_scalar_rounds_once():
    _check(lambda x: 70000 * x, torch.tensor([1.0, 0.5, -0.25], dtype=torch.float16))
    _check(lambda x: x / 1e-30, torch.tensor([0.0, 1e-3], dtype=torch.float16))


def test_unary_float_ops_on_bool_use_the_default_float_dtype():
    _check(lambda x: torch.exp(x), torch.tensor([True, False]))
    _check(lambda x: torch.sigmoid(x), torch.tensor([True, False]))


@pytest.mark.parametrize("dim", [0, -1])
def test_reduction_of_0d_tensor_over_dim(dim):
    _check(lambda x: x.sum(dim) * 2, torch.tensor(3.0))
    _check(lambda x: x.amax(dim=dim, keepdim=True), torch.tensor(-1.5))


def test_integer_pow_with_negative_tensor_exponent():
    base = torch.tensor([2, -2, 1, -1, 0], dtype=torch.int32)
    exponent = torch.tensor([-1, -1, -2, -3, 1], dtype=torch.int32)
    _check(lambda a, b: a ** b, base, exponent)
    with pytest.raises(RuntimeError, match="negative integer powers"):
        tpg.compile(lambda a: a ** -1, backend="reference")(base)


def test_integer_floor_division_by_zero_raises_like_eager():
    f = tpg.compile(lambda a, b: torch.div(a, b, rounding_mode="floor"), backend="reference")
    a = torch.tensor([3, -3], dtype=torch.int64)
    f(a, torch.tensor([2, 2]))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a, torch.tensor([2, 0]))


@pytest.mark.parametrize("fn", [lambda b: b == 300, lambda b: b - -1, lambda b: b + 2,
                                lambda b: 2 - b, lambda b: b * 2.5])
def test_tensorplay_bool_with_scalars_follows_tensorplay(fn):
    _check(fn, tp.tensor([True, False, True]))


@pytest.mark.parametrize("module", [torch, tp], ids=["torch", "tensorplay"])
def test_signed_zero_ties_keep_eagers_operand(module):
    zeros = [0.0, -0.0, float("nan"), 1.0]
    a = module.tensor([x for x in zeros for _ in zeros])
    b = module.tensor([y for _ in zeros for y in zeros])
    programs = [lambda a, b: module.relu(a), lambda a, b: module.clamp(a, min=0.0),
                lambda a, b: module.clamp(a, max=-0.0)]
    if module is tp:  # torch's own tie pick depends on the tensor's size
        programs += [lambda a, b: module.minimum(a, b), lambda a, b: module.maximum(a, b)]
    for program in programs:
        want = program(a, b)
        got = tpg.compile(program, backend="reference")(a, b)
        _same(got, want)
        w, g = np.asarray(want.numpy()), np.asarray(got.numpy())
        np.testing.assert_array_equal(np.signbit(g[~np.isnan(w)]), np.signbit(w[~np.isnan(w)]))
