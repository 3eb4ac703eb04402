"""Triton conformance sweep (interpreter): pointwise and reduction prims over special values.

Every prim x dtype runs on NaN, +-inf, -0.0, 0, huge / tiny values (all pairs for
binary prims), Python scalars on both sides, 0-d and empty shapes, and is compared
with torch eager: dtype exact, integers and bools bitwise, floats to the dtype's
tolerance with NaN where eager has NaN. A prim the backend cannot match must be
declined (it then runs eagerly), so every case must match; ``TPG_STRICT_LOWERING``
makes a claimed-but-uncompilable region fail instead of falling back.

Each program computes many prims as separate outputs of one region, so a dtype
costs one kernel build, not one per prim.
"""


import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.passes.pipeline import compile_graph  # noqa: E402
from tensorplay_graph.prims.pointwise_declines import cpu_gelu_nan_at_inf  # noqa: E402

F = torch.nn.functional
FLOATS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
INTS = {"int32": torch.int32, "int8": torch.int8, "uint8": torch.uint8}
SPECIAL = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-30, 1e30]
INT_VALUES = [0, 1, -1, 2, -3, 7, 100, -128, 127]


pytestmark = pytest.mark.usefixtures("strict")  # conftest.py


def pairs(values, dtype):
    """(a, b): every ordered pair of ``values``, flattened."""
    v = torch.tensor(values, dtype=torch.float64)
    a, b = torch.meshgrid(v, v, indexing="ij")
    return a.reshape(-1).to(dtype), b.reshape(-1).to(dtype)


def check(ops, *args):
    """Compile ``ops`` (name -> fn(*args)) as one program on the triton backend vs eager."""
    names = list(ops)

    def run(*xs):
        return tuple(ops[n](*xs) for n in names)

    # capture needs named parameters
    program = (lambda a: run(a)) if len(args) == 1 else (lambda a, b: run(a, b))

    gm = compile_graph(tpg.capture(program, *args), args, backends=["triton"])
    assert any(n.meta.get("backend") == "triton" for n in gm.graph.nodes), "nothing was claimed"
    got, want = gm(*args), program(*args)
    bad = []
    for name, g, w in zip(names, got, want):
        try:
            assert g.dtype == w.dtype and g.shape == w.shape, f"{g.dtype}{tuple(g.shape)} vs {w.dtype}{tuple(w.shape)}"
            if w.dtype.is_floating_point:
                torch.testing.assert_close(g, w, equal_nan=True)
            else:
                assert torch.equal(g, w), "values differ"
        except AssertionError as exc:
            bad.append(f"{name}: {str(exc)[:300]}")
    assert not bad, "\n".join(bad)


UNARY = {"neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "exp": torch.exp, "log": torch.log,
         "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
         "sigmoid": torch.sigmoid, "exp2": torch.exp2, "log2": torch.log2, "silu": F.silu,
         "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "logical_not": torch.logical_not,
         "to_bool": lambda x: x.bool(), "to_float": lambda x: x.float(), "clamp": lambda x: x.clamp(-1.0, 2.0),
         "scalar_ops": lambda x: (2 - x) * 0.5 + x / 3, "rscalar_div": lambda x: 3 / x,
         "pow2": lambda x: x ** 2, "pow0": lambda x: x ** 0, "pow_half": lambda x: x ** 0.5,
         "pow_m1": lambda x: x ** -1, "rpow": lambda x: 2 ** x, "rpow1": lambda x: 1 ** x}
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
          "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt,
          "le": torch.le, "gt": torch.gt, "ge": torch.ge, "and": torch.logical_and, "or": torch.logical_or,
          "xor": torch.logical_xor, "where": lambda a, b: torch.where(a > b, a, b),
          "clamp_t": lambda a, b: torch.clamp(a, min=b), "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
          "floor_div": lambda a, b: torch.div(a, b, rounding_mode="floor"),
          "trunc_div": lambda a, b: torch.div(a, b, rounding_mode="trunc")}


@pytest.mark.parametrize("dtype", list(FLOATS))
def test_unary_float_special_values(dtype):
    x = torch.tensor(SPECIAL, dtype=FLOATS[dtype])
    check(UNARY, x)


@pytest.mark.parametrize("dtype", [*FLOATS, "float64"])
def test_gelu_special_values_but_infinities(dtype):
    # CPU eager's erf gelu gives nan at +inf in its vectorised path for some dtypes, which ones
    # depending on the CPU (cpu_gelu_nan_at_inf), and +inf on CUDA; the kernel follows CUDA, so
    # on CPU it is claimed only where this machine's eager agrees, and runs eagerly elsewhere.
    x = torch.tensor([v for v in SPECIAL if abs(v) != float("inf")], dtype=getattr(torch, dtype))
    if not cpu_gelu_nan_at_inf(dtype):
        check({"gelu": F.gelu}, x)
        return
    gm = compile_graph(tpg.capture(lambda a: F.gelu(a), x), (x,), backends=["triton"])
    assert not any(n.meta.get("backend") == "triton" for n in gm.graph.nodes)
    torch.testing.assert_close(gm(x), F.gelu(x), equal_nan=True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gelu_at_inf_on_cpu_runs_eagerly(dtype):
    # fuzz seed 29: an inf layer_norm weight made gelu's input +inf; eager nan, kernel inf
    def block(x, w):
        return F.gelu(F.layer_norm(x, (4,), w))

    x = torch.tensor([[1.0, -2.0, 0.5, 3.0]] * 3, dtype=FLOATS[dtype])
    w = torch.tensor([1.0, float("inf"), float("-inf"), 2.0], dtype=FLOATS[dtype])
    got, want = tpg.compile(block, backend="triton")(x, w), block(x, w)
    assert want.isnan().any(), "eager no longer gives nan at +inf: the decline may be lifted"
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", list(FLOATS))
def test_binary_float_special_value_pairs(dtype):
    check(BINARY, *pairs(SPECIAL, FLOATS[dtype]))


INT_BINARY = {k: BINARY[k] for k in ("add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt",
                                     "ge", "and", "xor", "where", "add_alpha")}
INT_UNARY = {"neg": torch.neg, "abs": torch.abs, "to_bool": lambda x: x.bool(),
             "to_float": lambda x: x.float(), "scalar_ops": lambda x: (x * 3 + 1) - 2,
             "true_div": lambda x: x / 2, "logical_not": torch.logical_not, "square": lambda x: x * x}


@pytest.mark.parametrize("dtype", list(INTS))
def test_integer_prims_are_bitwise_exact(dtype):
    values = [v for v in INT_VALUES if dtype != "uint8" or v >= 0]
    a, b = pairs(values, INTS[dtype])
    check({**INT_BINARY, **{f"{k}_a": (lambda f: lambda a, b: f(a))(f) for k, f in INT_UNARY.items()}}, a, b)


def test_bool_prims_follow_torch():
    a, b = pairs([0, 1], torch.bool)
    check({"add": torch.add, "mul": torch.mul, "maximum": torch.maximum, "eq": torch.eq,
           "and": torch.logical_and, "xor": torch.logical_xor, "not": lambda a, b: torch.logical_not(a),
           "to_float": lambda a, b: a.float() + b, "div": lambda a, b: a / 2,
           "where": lambda a, b: torch.where(a, b, False)}, a, b)


REDUCTIONS = {"sum": lambda x: x.sum(-1), "sum_all": lambda x: x.sum(), "mean": lambda x: x.mean(-1),
              "amax": lambda x: x.amax(-1), "amin": lambda x: x.amin(-1, keepdim=True),
              "var": lambda x: x.var(-1), "sum_then_scale": lambda x: x.sum(-1) * 2.0}


@pytest.mark.parametrize("dtype", list(FLOATS))
def test_reductions_over_special_rows(dtype):
    # Each row holds one special value among ordinary ones: NaN and inf must propagate.
    rows = torch.tensor([[s, 1.0, -2.0, 0.5] for s in SPECIAL], dtype=FLOATS[dtype])
    check(REDUCTIONS, rows)


def test_integer_and_bool_reductions():
    x = torch.tensor([[1, -2, 3], [100, 7, -128]], dtype=torch.int32)
    check({"sum": lambda x, m: x.sum(-1), "amax": lambda x, m: x.amax(-1), "amin": lambda x, m: x.amin(0),
           "bool_sum": lambda x, m: m.sum(-1), "bool_amax": lambda x, m: m.amax(-1)}, x, x > 0)


@pytest.mark.parametrize("shape", [(), (0,), (0, 4), (4, 0), (3, 1)])
def test_zero_d_and_empty_shapes(shape):
    x = torch.randn(shape)
    ops = {"pointwise": lambda x: (x * 2).relu() + 1, "sum": lambda x: x.sum(-1) * 2.0,
           "sum_all": lambda x: x.sum(), "mean_all": lambda x: x.mean()}
    if x.numel():
        ops["amax"] = lambda x: x.amax(-1)  # eager rejects amax of an empty tensor
    check(ops, x)


def test_reduction_then_broadcast_epilogue():
    x, y = torch.randn(4, 8), torch.randn(4)
    check({"sum_plus": lambda x, y: x.sum(-1) + y, "mean_times": lambda x, y: x.mean(-1) * y - 1},
          x, y)
    # y read per row (after the reduction) and along the trailing dim (x * y) in one kernel
    square = torch.randn(4, 4)
    check({"per_row": lambda x, y: x.sum(-1) + y, "trailing": lambda x, y: x * y,
           "both": lambda x, y: (x * y).sum(-1) + y}, square, y)
