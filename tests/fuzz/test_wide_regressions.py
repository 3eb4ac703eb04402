"""Regression tests for what the wide fuzz generator (fuzz_gen_more / fuzz_gen_shapes) found.

Each test is a shrunk fuzz program, compiled and compared with the framework's own eager
result (tests/fuzz/FINDINGS.md, section "Wide generator").
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_graph as tpg

BACKENDS = ["reference", "interpreter", "auto"]


def _same(want, got) -> None:
    assert type(got) is type(want) or hasattr(want, "dtype")
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert str(g.dtype) == str(w.dtype) and tuple(g.shape) == tuple(w.shape)
        np.testing.assert_array_equal(np.asarray(g.float().numpy() if "float" in str(w.dtype)
                                                 else g.numpy()),
                                      np.asarray(w.float().numpy() if "float" in str(w.dtype)
                                                 else w.numpy()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensorplay_einsum_is_captured_with_its_native_arguments(backend):
    # Seed 2 (TensorPlay / reference): `T.einsum('i,j->ij', a, b)` crashed at capture with
    # "einsum() got an unexpected keyword argument 'equation'": the Python wrapper was replayed
    # with the native call's keyword arguments.
    T = pytest.importorskip("tensorplay")
    a = T.from_numpy(np.arange(3, dtype=np.float32))
    b = T.from_numpy(np.array([1.5, -2.0], dtype=np.float32))

    def program(x, y):
        return (T.einsum("i,j->ij", x, y), T.einsum("i,i->", x, x))

    _same(program(a, b), tpg.compile(program, backend=backend)(a, b))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bound_shape, dtype", [((1,), "float32"), ((1, 1), "float32"),
                                                ((), "float32"), ((1,), "int32")])
def test_tensorplay_clamp_takes_one_element_tensor_bounds_as_scalars(backend, bound_shape, dtype):
    # Seed 1999 (TensorPlay / reference): `T.clamp(x.sum(dim=-1), b, b + 1)` with a 0-d x sum
    # and b of shape (1,): eager keeps the input's shape () and dtype, compiled broadcast to (1,).
    T = pytest.importorskip("tensorplay")
    x = T.from_numpy(np.array([1.5, -2.0, 7.0], dtype=np.float32))
    xi = T.from_numpy(np.array([3, -4, 0], dtype=np.int32))
    b = T.from_numpy(np.full(bound_shape, 0.75, dtype=dtype))

    def program(x, xi, b):
        return (T.clamp(x.sum(dim=-1), b, b + 1), T.clamp(xi, min=b), x.clamp(max=b),
                T.clamp(x[:1], b, None))

    _same(program(x, xi, b), tpg.compile(program, backend=backend)(x, xi, b))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensorplay_16bit_clamp_with_nan_tensor_bounds(backend, dtype):
    # Seed 2597 (TensorPlay / reference): `T.clamp(x, min=b)` in float16 with NaN in b:
    # TensorPlay's eager keeps x there (and clamp(nan, max=0) is 0); compiled gave NaN.
    T = pytest.importorskip("tensorplay")
    x = T.from_numpy(np.array([1.0, np.nan, 3.0, -1.0, 2.0], np.float32)).to(getattr(T, dtype))
    b = T.from_numpy(np.array([np.nan, 0.0, np.nan, 1.0, 1.5], np.float32)).to(getattr(T, dtype))

    def program(x, b):
        return (T.clamp(x, min=b), x.clamp(max=b), T.maximum(x, b), T.minimum(b, x))

    _same(program(x, b), tpg.compile(program, backend=backend)(x, b))


@pytest.mark.parametrize("backend", BACKENDS)
def test_amax_of_signed_zeros_keeps_the_first_as_eager_does(backend):
    # Seed 2546 (TensorPlay / reference): `F.relu(x).amax(dim=-2)` over a column
    # [-0.0, 0.0, 0.0]: eager keeps the first of equal elements (-0.0), NumPy the last.
    T = pytest.importorskip("tensorplay")
    F = T.nn.functional
    x = T.from_numpy(np.array([[-0.0, 0.0, 1.0], [-1.5, -0.0, 2.0], [-2.0, 0.0, -0.0]],
                              np.float32))

    def program(x):
        r = F.relu(x)
        return (r.amax(dim=-2), r.amin(dim=0, keepdim=True), (-r).amin(dim=1), r.amax(dim=(0, 1)))

    want, got = program(x), tpg.compile(program, backend=backend)(x)
    _same(want, got)
    for w, g in zip(want, got):
        assert np.array_equal(np.signbit(w.numpy()), np.signbit(g.numpy()))


def test_narrow_seed_4001303_remainder_then_amax_keeps_eagers_signed_zero():
    # Open before W4: `T.remainder(int32 x, -3.0).amax(dim=-2, keepdim=True)` gave 0.0 where
    # TensorPlay eager gives -0.0 (the first of the tied zeros).
    pytest.importorskip("tensorplay")
    from fuzz_check import check
    from fuzz_gen import generate

    outcome = check(generate(4001303, "tensorplay", wide=False), "reference")
    assert outcome.status == "ok", outcome.detail


@pytest.mark.parametrize("framework", ["tensorplay", "torch"])
def test_module_program_with_non_differentiable_outputs(framework):
    # Seed 20034 (TensorPlay / reference): a program returning `x.to(float16)` next to a
    # module's output crashed: TensorPlay's mark_non_differentiable refuses leaf tensors.
    T = pytest.importorskip(framework)
    from fuzz_program import fuzz_module

    mod = fuzz_module(framework)(2)
    x = T.from_numpy(np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32))

    def program(a):
        return (a.to(T.float16), mod(T.topk(a, 2, 1)[0]), a > 0, a.argmax(dim=1))

    want, got = program(x), tpg.compile(program, backend="reference")(x)
    for w, g in zip(want, got):
        assert g.requires_grad == w.requires_grad and str(g.dtype) == str(w.dtype)
        np.testing.assert_allclose(g.detach().float().numpy(), w.detach().float().numpy(),
                                   rtol=1e-6)
    got[1].sum().backward()
    compiled_grad = mod.scale.grad.numpy().copy()
    mod.scale.grad = None
    want[1].sum().backward()
    np.testing.assert_allclose(compiled_grad, mod.scale.grad.numpy(), rtol=1e-6)
    mod.scale.grad = None


@pytest.mark.parametrize("backend", ["reference", "tilelang", "auto"])
def test_tensorplay_clamp_with_a_nan_bound_keeps_the_input_like_eager(backend):
    # Seed 9002648 (TensorPlay / reference, final-code run): TensorPlay's clamp ignores a NaN
    # bound (x.clamp(max=nan) is x), the reference lowering propagated it as torch does.
    T = pytest.importorskip("tensorplay")
    x = T.from_numpy(np.array([[1.0, -2.0], [3.0, 0.5]], dtype=np.float32))

    def program(a):
        return ((a * 7).clamp(max=float("nan")), (a - 1).clamp(min=float("nan"), max=2.0))

    _same(program(x), tpg.compile(program, backend=backend)(x))


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_tensorplay_var_with_no_degrees_of_freedom_matches_eager(backend):
    # Seed 9002607 (TensorPlay / reference): `x.var(dim=-3, correction=2)` over a size-1 dim:
    # TensorPlay divides by n - correction = -1 (0 / -1 = -0.0); the reference's NumPy var
    # divides by max(n - correction, 0) (NaN), as torch does.
    T = pytest.importorskip("tensorplay")
    x = T.from_numpy(np.arange(12, dtype=np.float32).reshape(1, 3, 4))

    def program(a):
        return (a.var(dim=-3, correction=2), a.var(dim=-1, correction=4), a.var(dim=-1))

    _same(program(x), tpg.compile(program, backend=backend)(x))


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_traced_write_into_a_tensor_made_inside_the_program_is_not_lost(framework):
    # Seed 9003640 (TensorPlay / reference): `v1 = T.arange(1); v1[x4 % 1] = -inf;
    # T.softmax(v1)` -- capture lifted v1 as a constant, recorded the write as a node, and then
    # folded every later native use of v1 from its capture-time value (softmax of 0 = 1.0
    # where eager's is NaN). Now the write is a graph break (Dynamo) or, for TensorPlay, whose
    # tp.compile cannot trace it either, an eager run of that input signature.
    T = pytest.importorskip(framework)

    def program(i):
        v = T.arange(3, dtype=T.float32)
        v[i % 3] = float("-inf")
        return v * 2

    compiled = tpg.compile(program, backend="reference")
    for index in ([1], [2]):
        i = T.tensor(index)
        _same(program(i), compiled(i))


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_tensorplay_in_place_clamp_of_a_bool_tensor_is_not_made_out_of_place(backend):
    # Seed 9000539 (TensorPlay / reference): TensorPlay 1.0.0's bool `clamp_(max=-1)` clamps
    # numerically (every element becomes True) while its `clamp` casts the bound to bool first
    # (values kept): functionalizing the write into `clamp` + copy changed the result.
    T = pytest.importorskip("tensorplay")
    x = T.from_numpy(np.array([3, -2, 0, 5], dtype=np.int64).reshape(4, 1, 1))

    def program(a):
        v = a <= float("-inf")
        v.clamp_(max=-1)
        return v

    _same(program(x), tpg.compile(program, backend=backend)(x))


_AUGMENTED = {"+=": "v += x", "-=": "v -= x", "*=": "v *= x", "/=": "v /= x", "//=": "v //= x",
              "%=": "v %= x", "&=": "v &= x", "|=": "v |= x", "^=": "v ^= x",
              "<<=": "v <<= x", ">>=": "v >>= x"}


@pytest.mark.parametrize("op", list(_AUGMENTED))
def test_tensorplay_augmented_assignment_of_a_traced_value_into_a_made_tensor(op):
    # Seed 40009128 (TensorPlay / reference): `v0 = T.arange(4, dtype=T.float16); v0 *= x4`
    # crashed capture with "TypeError: __imul__(): incompatible function arguments": the
    # native in-place operators reject a proxy (no NotImplemented), and capture only wrapped
    # the out-of-place ones. Now it is the same write into a made tensor as `v0.mul_(x4)`:
    # that input signature runs eagerly.
    T = pytest.importorskip("tensorplay")
    floats = op in ("+=", "-=", "*=", "/=")
    dtype = T.float16 if floats else T.int64
    namespace = {"T": T, "dtype": dtype}
    exec(f"def program(x):\n    v = T.arange(1, 5, dtype=dtype)\n    {_AUGMENTED[op]}\n"
         f"    return (v, x)\n", namespace)
    program = namespace["program"]
    compiled = tpg.compile(program, backend="reference")
    for values in ([1, 2, 3, 1], [3, 1, 2, 2]):
        x = T.from_numpy(np.array(values, dtype=np.int64)).to(dtype)
        _same(program(x), compiled(x))


@pytest.mark.parametrize("framework", ["tensorplay", "torch"])
@pytest.mark.parametrize("op", ["<<=", ">>="])
def test_shift_assignment_writes_in_place_for_aliases(framework, op):
    # Found with seed 40009128: a traced `v <<= y` was recorded as `v << y` (Proxy had no
    # __ilshift__ / __irshift__), so an alias of v kept the old values (eager: updated).
    T = pytest.importorskip(framework)
    namespace = {}
    exec(f"def program(x, y):\n    v = x * 1\n    alias = v\n    {_AUGMENTED[op].replace('x', 'y')}"
         f"\n    return alias\n", namespace)
    program = namespace["program"]
    x, y = T.tensor([1, 2, 12]), T.tensor([1, 1, 2])
    _same(program(x, y), tpg.compile(program, backend="reference")(x, y))


def test_tensorplay_int64_amax_beyond_2_pow_53_is_an_eager_defect_kept_out():
    # Seed 40015827: `x.long(); add_(inf); amax(dim=2)`. add_ wraps to INT64_MIN + 2 (eager and
    # compiled agree); TensorPlay's amax / amin reduce int64 through float64 and return
    # INT64_MIN, while its own max() is exact. The compiled amax is exact; the generator
    # now keeps such amax / amin out (fuzz_avoid.int64_extremum_through_double).
    T = pytest.importorskip("tensorplay")
    from fuzz_avoid import int64_extremum_through_double
    big = T.from_numpy(np.array([[-(2 ** 63) + 2], [2 ** 53 + 1]], dtype=np.int64))
    exact = [big[i].max().item() for i in range(2)]
    assert T.Tensor.amax(big, dim=1).numpy().tolist() != exact  # the eager defect itself
    got = tpg.compile(lambda x: x.amax(dim=1), backend="reference")(big)
    assert got.numpy().tolist() == exact
    ns = {"T": T, "v": big, "w": big // (2 ** 20)}
    assert int64_extremum_through_double(T, "v.amax(dim=1)", ns, T.Tensor.amax(big, dim=1))
    assert not int64_extremum_through_double(T, "w.amax(dim=1)", ns, T.Tensor.amax(big, dim=1))


def test_tensorplay_int_cast_of_a_sum_at_an_integer_edge_is_kept_out():
    # Seed 40017246: `hardswish(int32 x).sum().to(T.int32)`: TensorPlay's summation order
    # gives 6.0, NumPy's 5.9999995 (one ulp: both correct sums), truncated to 6 and 5.
    # Such a truncation is ill-conditioned; the generator now rejects it.
    T = pytest.importorskip("tensorplay")
    from fuzz_avoid import cast_at_rounding_edge
    s = T.from_numpy(np.array([6.0, 2.5], dtype=np.float32))
    assert cast_at_rounding_edge(T, "v.to(T.int32)", {"T": T, "v": s}, s.to(T.int32))
    assert not cast_at_rounding_edge(T, "v.to(T.int32)", {"T": T, "v": s + 0.25}, s.to(T.int32))
    assert not cast_at_rounding_edge(T, "v + 1", {"T": T, "v": s}, s + 1)


@pytest.mark.parametrize("seed", [40015827, 40017246])
def test_tensorplay_reference_fuzz_seeds_of_issue_13_match_eager(seed):
    pytest.importorskip("tensorplay")
    from fuzz_check import check
    from fuzz_gen import generate
    assert check(generate(seed, "tensorplay"), "reference").status == "ok"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensorplay_16bit_baddbmm_with_beta_zero_is_an_eager_defect_kept_out(dtype):
    # Seed 50006066: TensorPlay 1.0.0's 16-bit eager baddbmm with beta=0.0 adds whatever its
    # output buffer held (a different wrong result from call to call; beta 0.5 and float32
    # are right). No prim models baddbmm, so compiled programs re-enter that same kernel
    # and disagree with eager only through the garbage. The generator keeps beta=0.0 out
    # of 16-bit TensorPlay programs (fuzz_gen_shapes.op_contract).
    T = pytest.importorskip("tensorplay")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 1, 8), (1, 8, 2)))
    x, y = (T.from_numpy(v).to(getattr(T, dtype)) for v in (a, b))
    exact = T.bmm(x.to(T.float32), y.to(T.float32)).to(getattr(T, dtype)).float().numpy()
    zeros, ones = (f(1, 1, 2, dtype=getattr(T, dtype)) for f in (T.zeros, T.ones))
    np.testing.assert_allclose(T.baddbmm(zeros, x, y, beta=0.5).float().numpy(), exact,
                               rtol=2e-2, atol=2e-2)
    eager = T.baddbmm(ones, x, y, beta=0.0).float().numpy()
    assert not np.allclose(eager, exact, rtol=2e-2, atol=2e-2)  # the eager defect itself
