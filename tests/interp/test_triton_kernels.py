"""Generated Triton kernels vs eager, in Triton's interpreter (TRITON_INTERPRET=1, see scripts/test.sh)."""

import pytest

torch = pytest.importorskip("torch")

from tensorplay_graph.backends.triton import BACKEND  # noqa: E402
from triton_regions import build, cases, check_case, eager  # noqa: E402

CASES = {name: (program, factory) for name, program, factory in cases()}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(CASES))
def test_case_matches_eager(name, dtype):
    torch.manual_seed(0)
    program, factory = CASES[name]
    check_case(BACKEND, program, factory("cpu", DTYPES[dtype]), dtype)


def _unary(target):
    return lambda b, x: b.call(target, x)


POINTWISE = [torch.exp, torch.log, torch.sqrt, torch.rsqrt, torch.sin, torch.cos, torch.tanh, torch.sigmoid,
             torch.relu, torch.neg, torch.abs, torch.nn.functional.silu, torch.nn.functional.gelu, torch.exp2,
             torch.log2]


@pytest.mark.parametrize("target", POINTWISE, ids=lambda t: t.__name__)
def test_unary_prim_templates(target):
    x = torch.rand(257, 3) + 0.1  # positive: log/sqrt defined
    check_case(BACKEND, _unary(target), (x,), "float32")


BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum, torch.pow,
          torch.eq, torch.lt, torch.ge, torch.logical_and]


@pytest.mark.parametrize("target", BINARY, ids=lambda t: t.__name__)
def test_binary_prim_templates_broadcast(target):
    x, y = torch.rand(31, 17) + 0.5, torch.rand(17) + 0.5
    check_case(BACKEND, lambda b, a, c: b.call(target, a, c), (x, y), "float32")


def test_scalars_and_clamp_and_casts():
    def prog(b, x):
        y = b.call(torch.clamp, b.call(torch.mul, x, 3.5), -1.0, 2.0)
        return b.call(torch.Tensor.half, b.call(torch.add, y, 1))
    check_case(BACKEND, prog, (torch.randn(100, 7),), "float16")


def test_integer_ops_are_exact():
    def prog(b, x, y):
        return b.call(torch.add, b.call(torch.mul, x, y), 7)
    x = torch.randint(-100, 100, (50, 9), dtype=torch.int32)
    y = torch.randint(-100, 100, (9,), dtype=torch.int64)
    got = BACKEND.compile(build(prog, x, y))(x, y)[0]
    assert got.dtype == torch.int64 and torch.equal(got, eager(prog, x, y)[0])


@pytest.mark.parametrize("target", [torch.add, torch.mul, torch.maximum, torch.gt],
                         ids=lambda t: t.__name__)
def test_integer_operands_promote_like_eager(target):
    # int8 with uint8 promotes to int16 in eager (Triton alone keeps 8 bits); bool + bool is
    # a logical or in eager (int1 + int1 wraps to 0 in Triton).
    x = torch.tensor([-100, -1, 3, 127], dtype=torch.int8)
    y = torch.tensor([200, 200, 3, 0], dtype=torch.uint8)
    got = BACKEND.compile(build(lambda b, p, q: b.call(target, p, q), x, y))(x, y)[0]
    want = target(x, y)
    assert got.dtype == want.dtype and torch.equal(got, want)
    p, q = torch.tensor([True, True, False, False]), torch.tensor([True, False, True, False])
    got = BACKEND.compile(build(lambda b, u, v: b.call(target, u, v), p, q))(p, q)[0]
    want = target(p, q)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_integer_constant_that_does_not_fit_is_declined():
    region = build(lambda b, x: b.call(torch.mul, x, 300), torch.ones(4, dtype=torch.int8))
    assert BACKEND.supports(region.nodes[0]) == "integer constant 300 does not fit in int8"


def test_sum_over_all_dims_and_middle_dim():
    def prog(b, x):
        return b.call(torch.sum, x), b.call(torch.amax, x, 1), b.call(torch.mean, x, (1, 2))
    check_case(BACKEND, prog, (torch.randn(6, 10, 12),), "float32")


def test_split_reduced_dims_are_declined_with_a_reason():
    region = build(lambda b, x: b.call(torch.mean, x, (0, 2)), torch.randn(6, 10, 12))
    assert "contiguous run" in BACKEND.supports(region.nodes[0])


def test_runtime_strides_differ_from_example():
    def prog(b, x):
        return b.call(torch.softmax, b.call(torch.mul, x, 2.0), -1)
    example = torch.randn(16, 40)
    kernel = BACKEND.compile(build(prog, example))
    transposed = torch.randn(40, 16).t()
    torch.testing.assert_close(kernel(transposed)[0], eager(prog, transposed)[0])


def test_fused_rows_kernel_is_one_kernel_with_masked_memory_ops():
    program, factory = CASES["ln_gelu"]
    kernel = BACKEND.compile(build(program, *factory("cpu", torch.float16)))
    assert kernel.launch["kernels"] == ["tpg_rows_r0_k0"]
    src = kernel.source
    assert "# source nodes: add, layer_norm, gelu" in src and "memory traffic" in src
    for line in src.splitlines():
        if "tl.load(" in line:
            assert "mask=mask" in line
        if "tl.store(" in line and "per row" not in src:
            assert "mask=mask" in line
    assert "BLOCK_N: tl.constexpr" in src and "_ptr" in src and "_stride" in src


def test_tensorplay_tensors_cross_by_dlpack():
    tp = pytest.importorskip("tensorplay")
    program, factory = CASES["chain"]
    xs = factory("cpu", torch.float32)
    kernel = BACKEND.compile(build(program, *xs))
    got = kernel(*[tp.from_dlpack(x) for x in xs])[0]
    assert type(got).__module__.startswith("tensorplay")
    torch.testing.assert_close(torch.from_dlpack(got), eager(program, *xs)[0])
