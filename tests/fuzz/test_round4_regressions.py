"""Regressions from issue 13's round 4 fuzz runs (seeds 600xxxxx on 8ad3ba8).

Reductions over dim 0 of a 0-d tensor in training graphs, named-tuple fields of results
that have no example value, and TensorPlay's clamp / clip dtype rules. Each compiled result
is compared with the framework's own eager result (tests/fuzz/FINDINGS.md, "Issue 13,
branch fz8").
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import tensorplay_graph as tpg
from tensorplay_graph.library import custom_op

BACKENDS = ["reference", "interpreter", "auto"]


def _same(want, got) -> None:
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert str(g.dtype) == str(w.dtype) and tuple(g.shape) == tuple(w.shape)
        w, g = (v.detach() if hasattr(v, "detach") else v for v in (w, g))
        floating = "float" in str(w.dtype)
        np.testing.assert_allclose(np.asarray((g.float() if floating else g).numpy()),
                                   np.asarray((w.float() if floating else w).numpy()),
                                   rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------- seed 60010699 (torch)

@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_over_dim_0_of_a_0d_tensor_train_like_eager(backend):
    # `T.max(v).mean(dim=0, keepdim=True)`, v computed from parameters: torch accepts dim 0 /
    # -1 on a 0-d tensor; the mean / var VJP indexed the empty shape (IndexError).
    torch = pytest.importorskip("torch")

    def program(x, w):
        v = (x * w).max()
        return (v.mean(dim=0, keepdim=True), v.mean([0]) * 2, v.var(-1, correction=0),
                v.sum(0, keepdim=True) * 3, v.amax(0) - 1)

    x = torch.from_numpy(np.linspace(-2.0, 3.0, 12, dtype=np.float32).reshape(3, 4))
    w_eager = torch.tensor([0.5, -1.0, 2.0, 1.5], requires_grad=True)
    w_compiled = w_eager.detach().clone().requires_grad_()
    want = program(x, w_eager)
    got = tpg.compile(program, backend=backend)(x, w_compiled)
    _same(want, got)
    sum(t.sum() for t in want).backward()
    sum(t.sum() for t in got).backward()
    _same(w_eager.grad, w_compiled.grad)


# ----------------------------------------------------------------- seed 60013227 (torch)

@functools.lru_cache(maxsize=None)
def _ops(framework: str):
    """(framework module, a custom op with a fake of made-up values, one with no fake)."""
    T = pytest.importorskip(framework)

    @custom_op(f"fz8::affine_{framework}", mutates_args=())
    def affine(x: T.Tensor, s: float) -> T.Tensor:
        return x * s + 1.0

    @affine.register_fake
    def _(x, s):
        return T.empty_like(x)

    @custom_op(f"fz8::scaled_{framework}", mutates_args=())
    def scaled(x: T.Tensor) -> T.Tensor:  # no fake: its readers have no example
        return x * 2.0

    return T, affine, scaled


@pytest.mark.parametrize("backend", BACKENDS)
def test_named_tuple_fields_of_results_without_an_example(backend):
    # `fake(x).repeat_interleave(3, dim=0).cummin(-1).indices` then `T.sum(v, -3)` (dead code):
    # an int count was taken as a value-shaped repeat, so the cummin had no example and
    # `.indices` became a bound method ("sum() received ... (_Method, int)").
    torch, affine, scaled = _ops("torch")

    def program(x):
        v0 = affine(x, 2.0)
        dead = torch.sum(v0.repeat_interleave(3, dim=0).cummin(-1).indices, -3)  # noqa: F841
        s = scaled(x)
        values, indices = torch.sort(s, -1)
        return (v0, torch.sum(s.cummin(-1).indices, 0), s.max(0).values + 1,
                torch.min(s, dim=1).indices, s.aminmax().max * 2, values, indices,
                affine(x, -1.0).repeat_interleave(2, dim=1).cummax(1).values)

    x = torch.from_numpy(np.linspace(-2.0, 3.0, 15, dtype=np.float32).reshape(3, 5, 1))
    _same(program(x), tpg.compile(program, backend=backend)(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_repeat_interleave_by_counts_from_made_up_values_still_compiles(backend):
    # A tensor of counts read from a fake's output keeps the value-shaped path (no example).
    torch, affine, _ = _ops("torch")

    def program(x):
        counts = (affine(x, 1.0) > 0).long().sum(-1)
        return x.repeat_interleave(counts, dim=0).sum(0)

    x = torch.from_numpy(np.linspace(-2.0, 3.0, 12, dtype=np.float32).reshape(4, 3))
    _same(program(x), tpg.compile(program, backend=backend)(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensorplay_max_min_fields_without_an_example(backend):
    # TensorPlay names max / min's (values, indices) when dim is given; its `max(x, dim=)`
    # unpacks the native result with `*`, which needs the result's length.
    T, _, scaled = _ops("tensorplay")

    def program(x):
        s = scaled(x)
        return (s.max(0).values + 1, T.min(s, dim=1).indices + 1,
                T.max(s, dim=1, keepdim=True).values * 2, T.sum(s.cummin(-1)[1], 0))

    x = T.from_numpy(np.array([[0.5, -1.0, 2.0], [3.0, -2.5, 1.0]], dtype=np.float32))
    _same(program(x), tpg.compile(program, backend=backend)(x))


# ----------------------------------------------------------- seed 60005243 (TensorPlay)

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool", "float16"])
def test_tensorplay_clamp_with_number_bounds_keeps_the_dtype_in_training(backend, dtype):
    # `argmin(...).clamp(min=-1.0, max=2.0).sum(dim=-1, keepdim=True)` next to a module that
    # trains, an in-place write and an empty input (capture then works on private copies, whose
    # strides differ from from_numpy's (0, 0), so the joint graph takes every dtype from the
    # meta rules): the clamp rule promoted int64 with float bounds to float32 as torch does;
    # TensorPlay keeps the input's dtype.
    T = pytest.importorskip("tensorplay")
    empty = T.from_numpy(np.zeros((5, 0), dtype=np.float32))
    x = T.from_numpy(np.array([[0, 3, -4, 1, 2]], dtype=np.float32)).to(getattr(T, dtype))
    w = T.from_numpy(np.array([0.5, -1.0, 2.0, 1.5, 1.0], dtype=np.float32))
    w.requires_grad = True

    def program(empty, x, w):
        y = x.float() + 1.0
        y.neg_()
        return ((y * w).sum(), x.clamp(min=-1.0, max=2.0).sum(dim=-1, keepdim=True),
                T.clamp(x, -1.5, 2.5), x.clamp(max=2.5), x.clamp_min(-1.5))

    _same(program(empty, x, w), tpg.compile(program, backend=backend)(empty, x, w))


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8", "bool", "float16"])
def test_tensorplay_clamp_meta_rule_matches_eager_for_number_bounds(dtype):
    T = pytest.importorskip("tensorplay")
    from tensorplay_graph import prims
    from tensorplay_graph.frameworks import tensor_meta
    from tensorplay_graph.prims.rules import framework_rules

    x = T.from_numpy(np.array([0, 3, -4, 1], dtype=np.float32)).to(getattr(T, dtype))
    for low, high in ((-1.0, 2.0), (None, 2.5), (-1.5, None), (-1, 2), (True, None)):
        with framework_rules("tensorplay"):
            rule = prims.get("clamp").meta(tensor_meta(x), low, high)
        assert rule.dtype == str(x.clamp(low, high).dtype).rsplit(".", 1)[-1], (low, high)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int64"])
def test_tensorplay_integer_clip_is_not_its_clamp(backend, dtype):
    # TensorPlay 1.0.0's clip of a bool / integer tensor clamps in a wider type and casts the
    # result (bool clip(False, -1.5) is False); its clamp casts the bounds first (True).
    T = pytest.importorskip("tensorplay")
    x = T.from_numpy(np.array([0, 3, -4, 1, 100], dtype=np.float32)).to(getattr(T, dtype))

    def program(x):
        return (x.clip(-1.5, 2.5), T.clip(x, -1, None), x.clip(None, -1), x.clip(-200, 300.5),
                x.clamp(-1.5, 2.5))

    _same(program(x), tpg.compile(program, backend=backend)(x))
