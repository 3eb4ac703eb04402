"""Compiled values have eager's strides, so view-vs-copy decisions and aliasing match eager.

A kernel writes row-major results; torch's eager keeps a permuted input's layout, so
``reshape`` (view or copy), ``contiguous()`` (self or copy) and in-place writes through
them reach different tensors unless the kernel output is laid out as eager's. Fuzz
findings 1009130, 1010814, 1012994 (kernel outputs) and 1012885 (capture's private copy of
a strided input). TensorPlay's pointwise results are row-major; its programs must keep
matching TensorPlay eager. Each program runs compiled and eagerly on equal inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorplay as tp
import torch

import tensorplay_graph as tpg
from tensorplay_graph.frameworks import private_copy
from tensorplay_graph.passes.eager_layout import to_eager_layout

FRAMEWORKS = {"torch": torch, "tensorplay": tp}
BACKENDS = ["reference"]


def transposed(T, shape, seed, dtype=np.float32):
    """A tensor of ``shape`` whose last two dims are swapped in memory."""
    mem = list(shape)
    mem[-1], mem[-2] = mem[-2], mem[-1]
    data = (np.random.default_rng(seed).standard_normal(mem) * 2).astype(dtype)
    return T.from_numpy(np.ascontiguousarray(data)).transpose(-1, -2)


def strided(T, shape, seed):
    """Every other element of a twice-as-wide last dim (not dense)."""
    mem = list(shape)
    mem[-1] *= 2
    data = (np.random.default_rng(seed).standard_normal(mem) * 2).astype(np.float32)
    return T.from_numpy(data)[..., ::2]


def where_reshape_add(T):
    def program(x):
        v = T.where(x > -1, x, -0.0)
        flat = v.reshape(-1)   # torch: a copy of the permuted v; a view of a row-major one
        flat.add_(1)
        return v, flat
    return program


def cast_contiguous_add(T):
    def program(x):
        v = x.to(T.int32)
        c = v.contiguous()     # torch: a copy of the permuted v
        v.add_(1)
        return c, v
    return program


def where_reshape_mul(T):
    def program(a, x):
        mask = x <= -1
        v = T.where(mask, mask, a)
        r = v.reshape(5, -1)
        v.mul_(mask)
        return r
    return program


def run_both(program, make_inputs, backend):
    compiled = tpg.compile(program, backend=backend)
    for _ in range(2):
        got, want = compiled(*make_inputs()), program(*make_inputs())
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape)
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
            assert tuple(g.stride()) == tuple(w.stride())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("case", ["where_reshape_add", "cast_contiguous_add",
                                  "where_reshape_mul"])
def test_kernel_outputs_have_eager_strides(case, fw, backend):
    T = FRAMEWORKS[fw]
    if case == "where_reshape_add":
        run_both(where_reshape_add(T), lambda: [transposed(T, (1, 3, 8), 1)], backend)
    elif case == "cast_contiguous_add":
        run_both(cast_contiguous_add(T), lambda: [transposed(T, (5, 4, 3), 2)], backend)
    else:
        run_both(where_reshape_mul(T),
                 lambda: [T.from_numpy(np.random.default_rng(3).standard_normal(
                     (5, 2, 8)).astype(np.float32)), transposed(T, (5, 2, 8), 4)], backend)


def lowered_targets(compiled):
    runner = next(iter(compiled.specializations.values()))
    return [n.target for n in runner.lowered.graph.nodes]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_layout_node_only_where_eager_is_not_row_major(fw):
    """The common case costs nothing: a row-major result gets no ``to_eager_layout``."""
    T = FRAMEWORKS[fw]
    for x, permuted in ((T.from_numpy(np.ones((3, 8), np.float32)), False),
                        (transposed(T, (3, 8), 7), fw == "torch")):
        compiled = tpg.compile(where_reshape_add(T), backend="reference")
        compiled(x)
        assert (to_eager_layout in lowered_targets(compiled)) == permuted


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_in_place_add_of_full_overlap_strided_view(fw):
    """``x[..., ::2]`` of a size-1 last dim is all of ``x`` with other strides; torch's
    overlap check lets ``add_`` through on the strided input (capture must not copy it
    row-major, which raises)."""
    T = FRAMEWORKS[fw]

    def program(x):
        v = x[..., ::2]
        v.add_(x)
        return v

    make = lambda: [strided(T, (8, 2, 1), 5)]  # noqa: E731
    try:
        program(*make())
    except RuntimeError as exc:
        with pytest.raises(RuntimeError, match=str(exc)[:30]):
            tpg.compile(program, backend="reference")(*make())
        return
    run_both(program, make, "reference")


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_private_copy_keeps_strides_and_detaches(fw):
    T = FRAMEWORKS[fw]
    x = strided(T, (3, 4), 6)
    copy = private_copy(x)
    assert tuple(copy.stride()) == tuple(x.stride())
    np.testing.assert_array_equal(copy.numpy(), x.numpy())
    copy.add_(1)
    np.testing.assert_array_equal(copy.numpy(), x.numpy() + 1)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_decomposed_batch_norm_keeps_eager_strides(fw):
    """``decompose`` rewrites inference batch norm to a per-channel affine whose meta rule
    says row-major; torch's eager result of a channels-last input is channels-last."""
    T = FRAMEWORKS[fw]
    F = T.nn.functional

    def program(x, mean, var, weight, bias):
        y = F.batch_norm(x, mean, var, weight, bias, training=False)
        y.reshape(-1).add_(1)  # reaches y only where y is row-major
        return y

    def make():
        rng = np.random.default_rng(8)
        x = T.from_numpy(rng.standard_normal((2, 4, 5, 3)).astype(np.float32)).permute(0, 3, 1, 2)
        return [x] + [T.from_numpy(rng.random(3).astype(np.float32) + 0.5) for _ in range(4)]

    run_both(program, make, "reference")


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_contiguous_of_permuted_input_then_view(fw):
    """TensorPlay 1.0.0's ``clone()`` of a permuted tensor reports ``is_contiguous()``, so
    on capture's private copy ``contiguous()`` returned it and ``view`` raised (seed 1000126)."""
    T = FRAMEWORKS[fw]

    def program(x):
        v = x.contiguous()
        x.mul_(10)
        return x, v.view(-1)

    run_both(program, lambda: [transposed(T, (1, 5, 5), 9)], "reference")
