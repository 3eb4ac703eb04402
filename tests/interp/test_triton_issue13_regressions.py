"""Triton regressions of fuzz seed range 20001849+ (tests/fuzz/FINDINGS.md, issue 13),
interpreter, ``TPG_STRICT_LOWERING`` (a claimed region that fails to run fails the test).

Each program is compared with torch eager bitwise (inf signs included), NaN for NaN.
"""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from compiled_eager import compiled_equals_eager  # noqa: E402

pytestmark = pytest.mark.usefixtures("strict")  # conftest.py


def declined_after_eager_check(program, *args):
    """Why triton declined each node it declined (``explain``), after comparing with eager."""
    compiled_equals_eager(program, *args, claimed=False)
    return tpg.explain(program, *args, backend=["triton"]).declined


@pytest.mark.parametrize("n, claimed", [(4, True), (15, True), (40, False)])
def test_minimum_maximum_tie_keeps_cpu_eagers_operand(n, claimed):
    # seed 20001849: `x4 / T.minimum(x1, v6)` with x1 = -0.0 and v6 = 0.0: CPU eager's
    # scalar loop keeps the first operand (inf), the interpreter's tl.minimum the second
    # (-inf). Results of 16+ float32 elements reach eager's vectorised loop, whose pick
    # depends on the layout: declined.
    zero = torch.zeros(n)
    neg = -zero
    mixed = torch.where(torch.arange(n) % 3 == 0, neg, zero)

    def program(a, b, c):
        return (1 / torch.minimum(b, a), 1 / torch.maximum(b, a), 1 / torch.minimum(a, c),
                1 / torch.maximum(c, b), torch.minimum(c, torch.full((), float("nan"))))

    declined = declined_after_eager_check(program, zero, neg, mixed)
    assert ("minimum" not in declined) == claimed, declined


def test_logical_ops_of_a_block_and_a_loaded_scalar():
    # seed 20001370: `logical_and(exp(maximum(x1[-1:], x0)), x1[-1:])`: x1[-1:] is one scalar
    # load (0-d) and the interpreter raised numpy's bitwise_and TypeError on `block & scalar`.
    def program(x1, x0):
        v3 = x1[-1:]
        v9 = torch.exp(torch.maximum(v3, x0))
        return (torch.logical_and(v9, v3), torch.logical_or(x0, x1[1:2]),
                torch.logical_xor(x1[:1], x0), torch.logical_and(x1[-1:], x1[2:]))

    for x1 in (torch.tensor([1.0, 0.0, 0.5]), torch.tensor([0.0, 2.0, 0.0])):
        for x0 in (torch.tensor([0.25, 0.0], dtype=torch.bfloat16), torch.zeros(2, dtype=torch.bfloat16)):
            declined = declined_after_eager_check(program, x1, x0)
            assert not {"logical_and", "logical_or", "logical_xor"} & set(declined), declined


def test_where_of_int_literals_is_int64():
    # seed 20001675: `torch.where(b, -1, -1).amax()`: Triton typed the literals int32 while the
    # node is int64, so the amax's int64 neutral overflowed the block ("Scalar
    # -9223372036854775808 is out of range for type int32"); an int64 sum past 2**31 wrapped.
    def program(x):
        big = torch.where(x > 0, 2147483647, 0)
        return torch.where(x > 0, -1, -1).amax(), big + 1, big.sum(), torch.where(x < 0, 3, -5).amin(0)

    x = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    declined = declined_after_eager_check(program, x)
    assert not {"amax", "amin", "sum", "add"} & set(declined), declined


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_scalar_operand_is_cast_like_eager(dtype):
    # seed 40000579: `70000.0 ** x0` with float16 x0. Eager casts the scalar base to float16
    # (inf) before pow: inf for x > 0, 0 for x < 0; the kernel used 70000 in float32 and gave
    # finite values (0.189 for x = -0.15). mul / div keep their scalar in float32 (opmath).
    def program(x):
        return (70000.0 ** x, x + 70000.0, x * 70000.0, x / 70000.0, 3.1e38 ** x,
                x > 65520.0, torch.maximum(x, torch.tensor(65520.0, dtype=dtype)),
                x ** 2.0001, 1.0001 ** x)

    x = torch.tensor([[-0.15, 0.0, 0.5, 2.0, float("nan"), -1.0, 1.0, 3.0, -0.0, 1e-3]])
    assert declined_after_eager_check(program, x.to(dtype)) == {}  # every node claimed


def test_pow_with_a_per_row_exponent_runs_in_the_interpreter():
    # seed 40001155: `x ** x.amax((1, 2), keepdim=True)` fused into one rows kernel: the pow
    # template or-ed the base's block tests with the per-row (0-d) exponent's, a numpy
    # bitwise_or TypeError in the interpreter; the region fell back to eager.
    def program(x):
        m = x.amax((1, 2), keepdim=True)
        return x ** m, m ** x, x ** (m - m.abs() - 1.0)

    x = torch.tensor([[[1.5, -1.0], [0.0, 2.0]], [[-1.0, 0.5], [1.0, -0.0]],
                      [[float("inf"), -2.0], [0.25, 3.0]], [[-1.0, -0.5], [-3.0, -2.0]]])
    assert declined_after_eager_check(program, x.half()) == {}  # every node claimed
