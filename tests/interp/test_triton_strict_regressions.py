"""Regions the Triton backend claimed but could not run (strict-lowering fuzz run, seeds
6000000-6001999; tests/fuzz/FINDINGS.md), interpreter.

Each program runs under ``TPG_STRICT_LOWERING`` (a claimed region that fails to compile or run
raises instead of running eagerly), the test asserts the triton backend claimed it, and the
result equals torch eager exactly, NaN for NaN.
"""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from compiled_eager import compiled_equals_eager  # noqa: E402

pytestmark = pytest.mark.usefixtures("strict")  # conftest.py


def test_clamp_with_a_0d_tensor_bound():
    # seed 6000330: the interpreter's clamp spelling or-ed a block with the 0-d bound's NaN
    # test (numpy bitwise_or TypeError).
    def program(x):
        b = x[0]
        y = b * torch.full((), 3.0)
        return y.clamp(min=b), (x * 2).clamp(min=b, max=x[1]), x.clamp(max=b)

    compiled_equals_eager(program, torch.tensor([-1.5, 0.5, 2.0, float("nan"), -0.0]))
    compiled_equals_eager(program, torch.tensor([float("nan"), 0.5, 2.0, -7.0, 0.0]))


def test_a_constant_index_view_broadcast_is_one_scalar_load():
    # seed 6001442: x[1:] of a 2-vector broadcast against it reads one constant element,
    # a scalar pointer that was loaded under the block mask ("Mask argument cannot be
    # block type if pointer argument is not a block").
    def program(x, s, f):
        return torch.where(x, s, x[1:]), f + f[2:3], f * f[-1:].expand(4)

    compiled_equals_eager(program, torch.tensor([True, False]), torch.tensor(7),
                          torch.tensor([1.0, -2.0, 3.5, float("nan")]))


@pytest.mark.parametrize("reduce", ["amin", "amax"])
def test_column_reduction_of_a_value_named_where(reduce):
    # seeds 6001587 / 6001635: the node named `where` matched `tl.where` in the column
    # kernel's name analysis; the NaN epilogue was never emitted (NameError).
    def program(x):
        v = torch.where(x > 0, x, float("nan") if reduce == "amax" else 0.0)
        return getattr(v, reduce)(dim=-2), getattr(v, reduce)(dim=-2, keepdim=True)

    compiled_equals_eager(program, torch.randn(3, 5, 2, generator=torch.Generator().manual_seed(0)))


def test_cat_of_empty_pieces_is_empty():
    # seeds 6000142 / 6000199: every piece of the cat was empty (x[1:] of one row): no
    # source to read (IndexError) and no kernel input to take a device from.
    def program(x, m, f):
        e = x[1:]
        return torch.cat([e, e], dim=0) * 2, torch.minimum(m, torch.cat([m, f], dim=0))

    compiled_equals_eager(program, torch.randn(1, 5).half(), torch.zeros(0, 8, dtype=torch.bool),
                          torch.randn(0, 8))


def test_reduction_of_a_transposed_or_broadcast_operand():
    # seeds 6000208 / 6001319: pointwise work fused into a reduction whose operand did not
    # walk the reduced dims as one run (a transposed input; a (5,) operand broadcast to
    # (5, 5)); the reduction now reads the pointwise result from its own kernel.
    def program(t, v, m):
        return t.abs().sum(), torch.maximum(v, m).sum(), (t * 2).amax(dim=(0, 1))

    g = torch.Generator().manual_seed(1)
    t = torch.randint(-9, 9, (6, 8), generator=g).t()
    compiled_equals_eager(program, t, torch.randint(-9, 9, (5,), generator=g),
                          torch.randint(-9, 9, (5, 5), generator=g))


def test_cat_of_1d_empty_tensors_along_dim_1_is_declined():
    # seed 6000745: torch's cat skips 1-d empty tensors whatever `dim` says; the index rule
    # rejects dim 1 of a 1-d tensor, so supports() declines it (named) rather than claiming
    # a region that cannot compile.
    def program(x):
        return torch.cat([x, x], dim=1) + 1

    x = torch.randn(0).half()
    assert "index rule does not map" in str(tpg.explain(program, x, backend="triton"))
    got, want = tpg.compile(program, backend="triton")(x), program(x)
    assert got.dtype == want.dtype and got.shape == want.shape
