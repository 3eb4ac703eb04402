"""Regressions from the 2026-12-02 06:18 session's Triton-interpreter fuzz runs (seeds
82000000+ / 83000000+; tests/fuzz/FINDINGS.md, "Round 6").

Two of the three findings are the harness's: torch's amax picks either zero of a signed-zero
tie by its loop, and a layer norm of nearly equal large values is decided by summation
order. The generator keeps both out of exact comparisons; the product fix (integer trunc
division) is tested in tests/interp/test_triton_fuzz_regressions.py.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fuzz_avoid import statistics_of_offset_rows  # noqa: E402
from fuzz_gen import generate  # noqa: E402


def test_rows_of_nearly_equal_large_values_are_recognized():
    torch.manual_seed(0)
    offset = torch.randn(3, 4) * 2 - 70000.0   # seed 83000950: x1 - 70000.0
    assert statistics_of_offset_rows(offset)
    assert not statistics_of_offset_rows(torch.randn(3, 4) * 2 + 10.0)
    assert not statistics_of_offset_rows(torch.full((3, 4), 5.0))     # no spread: exact
    assert not statistics_of_offset_rows(torch.arange(12).reshape(3, 4))  # integers
    # along another dim: columns of nearly equal large values, rows spread wide
    columns = torch.tensor([70000.0, -1e6, 3e5]) + torch.randn(4, 3)
    assert statistics_of_offset_rows(columns, 0)
    assert not statistics_of_offset_rows(columns, -1)
    assert statistics_of_offset_rows(offset, None)  # a full reduction: one row of all
    # seed 90002244 (E10): -3 ** 50 = -7.2e23 squares past float32's range
    spread = torch.tensor([[-1.7e-5, -3.5e9, -7.2e23, -4.2e28, -1.0, 5.0, 2.0, 0.5]])
    assert statistics_of_offset_rows(spread)
    assert not statistics_of_offset_rows(torch.tensor([[1e18, -1e18, 3.0, float("inf")]]))


def test_torchs_amax_values_are_compared_without_the_sign_of_zero():
    """seed 83000069: ``trunc(x / 1).amax(dim=-2)`` over [-0.0, 0.0, ...]: eager 0.0, the
    kernel -0.0. torch's pick depends on its loop; TensorPlay keeps the first (exact)."""
    kinds = {}
    for framework in ("torch", "tensorplay"):
        if framework == "tensorplay":
            pytest.importorskip("tensorplay")
        for seed in range(300):
            for wide in (False, True):
                for stmt in generate(seed, framework, wide=wide).stmts:
                    if stmt.code and ".amax(" in stmt.code:
                        kinds.setdefault(framework, set()).add(stmt.kind)
    assert kinds.get("torch") and kinds["torch"] <= {"arith"}, kinds
    assert "tensorplay" not in kinds or "exact" in kinds["tensorplay"], kinds


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_relu_passes_the_gradient_where_its_output_is_nan(framework):
    """grad seed 86000021: ``relu(var(x / nan) + w)``: both frameworks' relu backward zeroes
    the gradient where the output is <= 0 and passes it where the output is NaN; the VJP
    rule's ``where(out > 0, g, 0)`` dropped it there (w.grad 0 instead of eager's)."""
    import numpy as np

    import tensorplay_graph as tpg
    if framework == "tensorplay":
        T = pytest.importorskip("tensorplay")
        relu, tensor = T.relu, T.tensor
    else:
        T, relu, tensor = torch, torch.relu, torch.tensor

    def program(x, w):
        return relu(x + w)

    values = [float("nan"), -1.0, 0.0, 2.0]
    grads = []
    for fn in (program, tpg.compile(program, backend="reference")):
        x = tensor(values)
        w = tensor([1.5, 0.5, -1.0, 1.0], requires_grad=True)
        fn(x, w).sum().backward()
        grads.append(np.asarray(w.grad.tolist()))
    np.testing.assert_array_equal(grads[1], grads[0])
    assert grads[0].tolist() == [1.0, 0.0, 0.0, 1.0]  # NaN passes, <= 0 stops


def test_a_matmul_over_an_empty_k_trains_compiled():
    """grad seed 88000707: ``x2 @ x3`` with K = 0, (2, 4, 0) @ (0, 3): the weight gradient's
    ``reshape(-1, 0)`` is ambiguous (eager raises on it); the folded size is spelled out."""
    import tensorplay_graph as tpg

    def program(a, b):
        return a @ b

    grads = []
    for fn in (program, tpg.compile(program, backend="reference")):
        a = torch.zeros(2, 4, 0, requires_grad=True)
        b = torch.zeros(0, 3, requires_grad=True)
        out = fn(a, b)
        assert out.shape == (2, 4, 3) and not out.any()
        (out * torch.arange(24.0).reshape(2, 4, 3)).sum().backward()
        grads.append((a.grad.shape, b.grad.shape))
    assert grads[0] == grads[1] == (torch.Size([2, 4, 0]), torch.Size([0, 3]))


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_pow_of_two_tensors_at_a_zero_exponent_trains_as_eager(framework):
    """grad seed 95000271: ``x ** x`` at x = 0: torch's backward defines d/da a**b as 0 where
    b == 0 (the VJP rule gave 0 * 0**-1 = NaN); TensorPlay's gives NaN, and so must ours."""
    import numpy as np

    import tensorplay_graph as tpg
    T = pytest.importorskip("tensorplay") if framework == "tensorplay" else torch

    def program(a, b):
        return a ** b

    grads = []
    for fn in (program, tpg.compile(program, backend="reference")):
        a = T.tensor([0.0, 0.5, 2.0, 0.0], requires_grad=True)
        b = T.tensor([0.0, 0.0, 1.0, 2.0], requires_grad=True)
        fn(a, b).sum().backward()
        grads.append([np.asarray(a.grad.tolist()), np.asarray(b.grad.tolist())])
    for got, want in zip(grads[1], grads[0]):
        np.testing.assert_array_equal(got, want)
    assert np.isnan(grads[0][0][0]) == (framework == "tensorplay")
