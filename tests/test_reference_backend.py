"""The reference backend: the whole pipeline, on TensorPlay and torch, equal to eager."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tp = pytest.importorskip("tensorplay")

import tensorplay_graph as tpg
from tensorplay_graph.backends import available_backends, get_backend, register_backend
from tensorplay_graph.backends.reference import ReferenceBackend
from tensorplay_graph.errors import UnsupportedOpError
from tensorplay_graph.library import custom_op
from tensorplay_graph.passes.pipeline import compile_graph


@custom_op("tpg_ref_test::torch_scale", mutates_args=())
def torch_scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s - 0.5


@torch_scale.register_fake
def _(x, s):
    return torch.empty_like(x)


@custom_op("tpg_ref_test::tp_scale", mutates_args=())
def tp_scale(x: tp.Tensor, s: float) -> tp.Tensor:
    return x * s - 0.5


@tp_scale.register_fake
def _(x, s):
    return tp.empty_like(x)


def program(scale, F):
    def f(x, y):
        a = (x.exp() + y) * 0.5            # region before the custom op
        b = scale(a.relu(), 3.0)           # barrier in the middle
        c = F.sigmoid(b) - a               # region reading both sides
        s = c.abs().sum(dim=1, keepdim=True) + 1.0  # reduction fused with its producer
        m = c.mean()                       # (kept away from 0: c / s stays well conditioned)
        return c / s, m, a.amax(dim=0)
    return f


def as_np(t):
    return np.asarray(t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy())


def check(f, inputs, rtol=1e-5):
    expected = f(*inputs)
    gm = tpg.capture(f, *inputs)
    mgr = []
    lowered = compile_graph(gm, inputs, backends=["reference"], manager_out=mgr)
    got = lowered(*inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert type(g) is type(e)
        np.testing.assert_allclose(as_np(g), as_np(e), rtol=rtol, atol=1e-6)
    assert list(mgr[0].timings) == ["normalize", "shape_prop", "decompose", "functionalize",
                                    "channels_last", "barriers", "partition", "lower", "cleanup"]
    return lowered


def kernel_nodes(gm):
    return [n for n in gm.graph.nodes if n.meta.get("kernel") is not None]


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_pipeline_with_custom_op_in_the_middle(framework):
    if framework == "torch":
        f = program(torch_scale, torch)
        inputs = (torch.randn(6, 16), torch.randn(6, 16))
    else:
        f = program(tp_scale, tp)
        inputs = (tp.randn(6, 16), tp.randn(6, 16))
    lowered = check(f, inputs)
    kernels = kernel_nodes(lowered)
    assert len(kernels) == 2, lowered.code  # before and after the custom op
    ops = [n for n in lowered.graph.nodes if getattr(n.target, "name", "").startswith("tpg_ref_test")]
    assert len(ops) == 1  # the custom op stays one eager node between the kernels
    for node in kernels:
        source = node.meta["kernel"].source
        assert source.count("def kernel(") == 1 and "np." in source
        assert node.meta["subgraph"] is not None


def test_integer_program_is_exact():
    f = lambda x, y: ((x * 3 + y) // 2 - (x % 5)).sum(dim=0)  # noqa: E731
    inputs = (torch.randint(-50, 50, (5, 7)), torch.randint(1, 9, (5, 7)))
    lowered = check(f, inputs, rtol=0)
    assert kernel_nodes(lowered)


def test_integer_constant_that_does_not_fit_is_declined():
    # eager wraps int8 * 300; NumPy (and Triton) cannot hold 300 as int8: the node runs eagerly
    f = lambda x: x * 300 + 1  # noqa: E731
    x = torch.tensor([100, 3, -7], dtype=torch.int8)
    assert torch.equal(tpg.compile(f, backend="reference")(x), f(x))
    plan = tpg.explain(f, x, backend="reference")
    assert "integer constant 300 does not fit in int8" in plan.barriers["mul"]


def test_mutation_keeps_order():
    def f(x):
        y = x * 2
        z = y + 1          # must read y before the in-place update
        y.fill_(10.0)      # no out-of-place prim: stays a mutation (add_ would be functionalized)
        return z * 3, y - 1
    lowered = check(f, (torch.randn(3, 4),))
    names = [n.name for n in lowered.graph.nodes]
    mutation = next(n for n in lowered.graph.nodes if n.target == "fill_")
    before = names[:names.index(mutation.name)]
    assert any(n.startswith("reference_region") for n in before)


def test_kernel_cache_by_source_hash():
    f = lambda x: (x.exp() * 2).sum(dim=1)  # noqa: E731
    a = compile_graph(tpg.capture(f, torch.randn(2, 3)), (torch.randn(2, 3),))
    b = compile_graph(tpg.capture(f, torch.randn(2, 3)), (torch.randn(2, 3),))
    ka, kb = kernel_nodes(a)[0].meta["kernel"], kernel_nodes(b)[0].meta["kernel"]
    assert ka is not kb and ka.fn is kb.fn and ka.source == kb.source


def test_supports_reasons():
    ref = get_backend("reference")
    gm = tpg.capture(lambda x, w: (x @ w).to(torch.bfloat16).exp(), torch.randn(2, 3),
                     torch.randn(3, 4))
    from tensorplay_graph.passes.normalize import normalize
    from tensorplay_graph.passes.shape_prop import shape_prop
    normalize(gm)
    shape_prop(gm, torch.randn(2, 3), torch.randn(3, 4))
    reasons = {n.name: ref.supports(n) for n in gm.graph.nodes if n.op.startswith("call")}
    assert "matmul" in reasons["matmul"]
    assert any("bfloat16" in (r or "") for r in reasons.values())
    placeholder = next(iter(gm.graph.nodes))
    assert "prim" in ref.supports(placeholder)


def test_registry():
    assert isinstance(get_backend("reference"), ReferenceBackend)
    names = available_backends()
    assert "reference" in names and names[-1] == "interpreter"
    with pytest.raises(ValueError, match="no backend named 'nosuch'.*available"):
        get_backend("nosuch")
    with pytest.raises(ValueError, match="already registered"):
        register_backend(ReferenceBackend())
    with pytest.raises(ValueError, match="implicit"):
        class Interp(ReferenceBackend):
            name = "interpreter"
        register_backend(Interp())


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_float32_transcendental_rounds_like_eager_before_a_discontinuity(framework):
    # Found by the long fuzz run: NumPy's float32 tanh(9.5) is 0.99999994 where eager's is
    # 1.0, and trunc turned the ulp into a whole unit (0 vs 1).
    T = pytest.importorskip(framework)
    x = T.tensor([[4, 0, -4, 3]], dtype=T.int32)

    def program(x):
        return T.trunc(T.tanh(1.5 + (x + x)))

    expected = program(x)
    got = tpg.compile(program, backend="reference")(x)
    np.testing.assert_array_equal(np.asarray(got.tolist()), np.asarray(expected.tolist()))


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_gelu_tail_flushes_to_zero_like_eager(framework):
    # Found by the long fuzz run: eager's float32 gelu(-6) is -0.0 (1 + erf cancels); a
    # float64 evaluation gives -6e-9, and a following bool cast turned that into True.
    T = pytest.importorskip(framework)
    x = T.tensor([-5.0, -6.0, -8.0, -20.0, 0.5])

    def program(x):
        return T.nn.functional.gelu(x).to(T.bool)

    np.testing.assert_array_equal(np.asarray(tpg.compile(program, backend="reference")(x).tolist()),
                                  np.asarray(program(x).tolist()))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("size", [1, 40])
def test_gelu_at_inf_equals_this_cpus_eager(dtype, size):
    # torch's vectorised CPU gelu is NaN at +inf in some dtypes, and which ones depends on the
    # CPU (float16: +inf with AVX2, NaN with AVX-512); its one-element path gives +inf. The
    # reference declines where this process's torch gives NaN, so each size matches eager.
    x = torch.full((size,), float("inf"), dtype=getattr(torch, dtype))
    x[size // 2] = 1.0 if size > 1 else x[0]

    def program(x):
        return torch.nn.functional.gelu(x * 1)

    torch.testing.assert_close(tpg.compile(program, backend="reference")(x), program(x),
                               equal_nan=True)


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
@pytest.mark.parametrize("op", ["amax", "amin"])
def test_extremum_of_signed_zeros_keeps_the_first_like_eager(framework, op):
    # Fuzz seed 4001303 (TensorPlay): `remainder(int32, -3.0).amax(dim=-2)` over
    # [-2, -0.0, 0.0, -1]: eager keeps the first of the tied zeros (-0.0); NumPy's amax gave 0.0.
    # Reduced dims here are short or not innermost, where torch's CPU kernel is scalar too.
    T = pytest.importorskip(framework)
    rng = np.random.default_rng(0)
    zeros = np.where(rng.random((6, 5, 3)) < 0.5, -0.0, 0.0).astype(np.float32)
    fill = -1.0 if op == "amax" else 1.0
    a = np.where(rng.random(zeros.shape) < 0.3, fill, zeros).astype(np.float32)
    x = T.from_numpy(a)

    def program(x):
        return (getattr(x, op)(dim=-2, keepdim=True), getattr(x, op)(dim=0),
                getattr(x, op)(dim=[0, 1]))

    want = program(x)
    got = tpg.compile(program, backend="reference")(x)
    for w, g in zip(want, got):
        w, g = as_np(w), as_np(g)
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
