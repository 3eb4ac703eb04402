"""Regressions from the differential Triton fuzz run (tests/fuzz/FINDINGS.md), interpreter.

Each program is compiled for the triton backend (``TPG_STRICT_LOWERING``: a claimed region
that fails to run fails the test) and compared with torch eager bitwise, NaN for NaN.
"""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.passes.pipeline import compile_graph  # noqa: E402
from compiled_eager import compiled_equals_eager  # noqa: E402

pytestmark = pytest.mark.usefixtures("strict")  # conftest.py


def test_bfloat16_cast_rounds_to_nearest_even():
    # seeds 1000076 / 1000179 / 1000742 ...: the interpreter truncated fp32 -> bf16
    # (301.5 gave 300, eager 302; the tie 303 must give 304).
    x = torch.tensor([301.5, 303.0, -3.7031, 1.0156, -1.0e38, 3.4e38, float("nan"),
                      float("inf"), -0.0, 1e-40, 2.0 ** -133 * 1.5])

    def program(x):
        return x.bfloat16(), x.bfloat16().float() * 2, (x.bfloat16() + 1).float()

    compiled_equals_eager(program, x)


def test_sixteen_bit_op_results_are_rounded_between_ops():
    # (x.bfloat16() + 1).float(): the kernel kept the fp32 sum (303), eager rounds it (304).
    x = torch.tensor([301.5, 2049.0, 4097.0, -3.7031, 1.0e-3, 65504.0, -0.0])

    def program(x):
        b, h = x.bfloat16(), x.half()
        return (b + 1).float(), (h + 1).float(), (b * 3 - 1).float() * 2, (h * 3 - 1).float()

    compiled_equals_eager(program, x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sixteen_bit_cpu_layer_norm_of_a_flat_row_matches_eager(dtype):
    # seeds 1001105 / 1001248 / 1001605 / 1001913: eager's CPU 16-bit layer_norm gives
    # rounding noise for rows with variance below eps (tanh(y) != 0 is True, 1 / y is +inf).
    x = torch.tensor([[1.234], [-2.5], [0.3]], dtype=dtype)
    w = torch.tensor([[1.0e-3, 1.1e-3], [-2.0e-3, -2.0e-3]], dtype=dtype)

    def program(x, w):
        y = torch.nn.functional.layer_norm(x + 1, (1,))
        z = torch.nn.functional.layer_norm(w * 1, (2,))
        return torch.tanh(y) != -0.0, z.reciprocal()

    compiled_equals_eager(program, x, w)


def test_float32_cpu_layer_norm_of_one_element_signs_zero_like_eager():
    # seed 2001236: `1 / sin(layer_norm(x, (1,), w))` with w < 0. torch's CPU kernel adds the
    # absent bias as +0.0 ((x - mean) * rstd * w + 0), turning -0.0 into +0.0; 1 / sin(.)
    # then gave -inf where eager gives +inf.
    x = torch.tensor([[1.5], [-2.0], [0.25]])
    w = torch.tensor([-0.75])

    def program(x, w):
        f = torch.nn.functional.layer_norm
        return 1 / torch.sin(f(x, (1,), w)), 1 / f(x * 2, (1,), w * -1), 1 / f(x, (1,))

    compiled_equals_eager(program, x, w)


def test_float32_cpu_layer_norm_of_short_rows_overflows_like_eager():
    # seed 2000830: a one-element row near 3.4e38 (`nan_to_num(-inf)`). torch's CPU kernel
    # merges its (empty) vector lanes into the scalar moments with mean * mean * 0: NaN once
    # |mean| passes sqrt(FLT_MAX) ~ 1.8e19, for rows shorter than its vector width.
    x = torch.tensor([[3.0e38], [-2.0e19], [1.8e19], [5.0], [float("inf")]])
    rows = torch.tensor([[3.0e38, 3.0e38, 1.0], [2.0e19, 1.0, 1.0], [1.0e19, 1.0e19, 2.0],
                         [1.0, 2.0, 3.0]])

    def program(x, rows):
        f = torch.nn.functional.layer_norm
        return f(x, (1,)), f(x - torch.nan_to_num(-x), (1,)), f(rows, (3,))

    compiled_equals_eager(program, x, rows)


def test_tensorplay_cpu_layer_norm_of_one_element_keeps_its_own_zero_sign():
    # TensorPlay's CPU kernel adds no +0.0 for an absent bias (unlike torch's): -0.0 stays.
    tp = pytest.importorskip("tensorplay")
    import numpy as np

    x, w = tp.tensor([[1.5], [-2.0], [3.0e38]]), tp.tensor([-0.75])

    def program(x, w):
        return (tp.nn.functional.layer_norm(x, (1,), w),)

    got, want = tpg.compile(program, backend="triton")(x, w)[0].numpy(), program(x, w)[0].numpy()
    np.testing.assert_array_equal(got, want)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))


def test_cpu_clamp_keeps_the_input_on_a_tie():
    # seeds 6001455 / 6001592: clamp(-0.0, min=0) is -0.0 in torch's CPU clamp (scalar
    # bounds keep the input on a tie); tl.maximum gave 0.0. NaN inputs and bounds propagate.
    # (assert_close does not see the sign of a zero: 1 / y does, as +-inf.)
    x = torch.tensor([-0.0, 0.0, -1.0, 2.0, float("nan"), -0.0, 0.0, 3.0])

    def program(x):
        return (1 / x.clamp(min=0), 1 / x.clamp(max=-0.0), 1 / x.clamp(min=-0.0, max=0.0),
                1 / x.bfloat16().clamp(min=0.0), x.clamp(min=float("nan")))

    compiled_equals_eager(program, x)


def test_pow_with_a_python_float_exponent_runs_in_the_kernel():
    # Triton interp fuzz run (seeds 6000000+): `x ** -3.0`, `x ** 1.5`, `x ** 7` failed in the
    # interpreter (`tl.floor(-3.0) & ...` on constants: bitwise_and of floats) and 64 regions
    # ran eagerly; the exponent's integrality is now decided when the kernel is generated.
    x = torch.tensor([-2.0, 0.5, 0.0, -0.0, 3.0, float("inf"), float("-inf"), float("nan"),
                      -1.0, 1.0])

    def program(x):
        return x ** -3.0, x ** 1.5, x ** 7, x ** float("inf"), x ** float("-inf"), x ** -2.5

    gm = compile_graph(tpg.capture(program, x), (x,), backends=["triton"])
    assert any(n.meta.get("backend") == "triton" for n in gm.graph.nodes)
    for g, w in zip(gm(x), program(x)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=0, equal_nan=True)


def test_work_after_a_boolean_mask_runs_on_each_calls_rows():
    # `x[x > 0]` has as many rows as the data has positive entries: a Triton region planned on
    # the first call's count raised "shape (3,) does not broadcast to (2,)" on a later call
    # with the same input shapes. Readers of such values now run eagerly (barrier
    # "data_dependent"); the mask-free work beside them still compiles.
    def program(x, y):
        return (x[x > 0] * 2).exp() + 1, (y * 3).sin().sum()

    compiled = tpg.compile(program, backend="triton")
    for values in ([1.0, -1.0, 2.0], [1.0, 3.0, 2.0], [-1.0, -2.0, -3.0]):
        x, y = torch.tensor(values), torch.tensor(values) + 1
        for g, w in zip(compiled(x, y), program(x, y)):
            assert g.shape == w.shape
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    assert "data_dependent" in str(tpg.explain(program, x, y, backend="triton"))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_integer_trunc_division_is_exact(dtype):
    # seed 82001065: -2**31 // 300 went through float32 and rounded to -7158279 (eager
    # -7158278); integer trunc division is now the kernel's own integer ``//``
    info = torch.iinfo(dtype)
    x = torch.tensor([info.min, info.max, info.min + 1, -7, 7, 0, -299, 299, 2 ** 15 - 1],
                     dtype=torch.int64).clamp(info.min, info.max).to(dtype)
    d = torch.tensor([300, -300, 7, 2, -2, 5, -1, 3, 300], dtype=dtype)

    def program(x, d):
        return (torch.div(x, 300, rounding_mode="trunc"), torch.div(x, d, rounding_mode="trunc"),
                torch.div(x, -7, rounding_mode="trunc"))

    compiled_equals_eager(program, x, d)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_rows_result_is_rounded_before_the_kernel_reads_it(dtype):
    # seed 84003764: ``v2 = x.softmax(-1); v2 != where(m, v2, y)`` was True where m holds:
    # the where rounded v2 to 16 bits, the comparison read the kernel's fp32 softmax
    torch.manual_seed(0)
    x, m = torch.randn(8, 4, 4).to(dtype), torch.rand(8, 4, 4) > 0.5
    y = torch.rand(8, 1, 1) > 0.5

    def program(x, m, y):
        v = x.softmax(-1)
        s = x.sum(-1, keepdim=True)
        n = torch.nn.functional.layer_norm(x, (4,))
        return (v != torch.where(m, v, y), v * 3 - v.float() * 3, s.float() - s,
                n.float() - n * 1)

    compiled_equals_eager(program, x, m, y)


@pytest.mark.parametrize("n", [3, 4, 12])
def test_constant_rows_have_exact_mean_in_layer_norm_and_var(n):
    # seed 85002565: layer_norm of a row of three equal float32 values gave 3.8e-05, not 0
    # (sum / 3 is an ulp off the value), and ``.to(bool)`` of it True; eager's Welford mean
    # of a constant row is exact. layer_norm corrects its mean with a second pass (its
    # deviations scaled down for huge rows, where their squares overflow); var checks
    # max == min. Masked rows (3, 12) and rows that fill their block (4, 16); tiny values
    # whose deviation squares are denormal, huge ones whose squares overflow.
    values = torch.tensor([0.1, 7.3, 1e30, -3.3, 0.7, 1.1, 2.9, 12.7, 0.3, 5.9, 3e-14, 7e-16,
                           1.3e-13, -2.1e25, 3.3e36])
    x = values[:, None].expand(len(values), n).contiguous()

    def program(x):
        out = torch.nn.functional.layer_norm(x, (n,))
        return out, out.to(torch.bool), x.var(dim=-1), x.var(dim=-1) == 0

    compiled_equals_eager(program, x)


@pytest.mark.parametrize("n", [3, 4, 12])
def test_huge_rows_layer_norm_matches_eager(n):
    # Rows whose squared deviations overflow float32: eager's variance is inf (its rstd 0);
    # the corrected two-pass moments scale huge rows' deviations by 2^-64 and back, so the
    # spread overflows where eager's does and a constant row stays exactly 0.
    gen = torch.Generator().manual_seed(0)
    scale = torch.tensor([1.0, 1e20, 1e30, 3e37, 1e-20, 1e19])
    x = torch.randn(6, n, generator=gen) * scale[:, None]
    x[:, 0] += torch.tensor([0.0, 1e26, 0.0, 0.0, 1e30, -1e25])
    w = torch.randn(n, generator=gen)

    def program(x, w):
        return torch.nn.functional.layer_norm(x, (n,), w)

    gm = compile_graph(tpg.capture(program, x, w), (x, w), backends=["triton"])
    got, want = gm(x, w), program(x, w)
    got = got[0] if isinstance(got, (tuple, list)) else got
    assert torch.isfinite(want).any(), "the case should be mostly finite"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
