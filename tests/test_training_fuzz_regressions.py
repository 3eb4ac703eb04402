"""Training defects the gradient fuzzer found (tests/fuzz/FINDINGS.md, "Gradient fuzzer"):
each compiled training call must give eager's outputs, ``requires_grad`` flags and ``.grad``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_graph as tpg

OPTIONS = {"backends": ["reference"]}


def _np(t):
    t = t.detach()
    return np.asarray(t.float().numpy())


def _train(fn, values, fw):
    """(outputs, grads) of ``fn`` on fresh leaves from ``values``; the loss weights each
    output differently so every gradient path shows."""
    leaves = [fw.from_numpy(v.copy()).requires_grad_(True) for v in values]
    outs = fn(*leaves)
    loss = None
    for k, out in enumerate(outs):
        if out.requires_grad:
            term = (out.float() * float(k + 2)).sum()
            loss = term if loss is None else loss + term
    loss.backward()
    return outs, [leaf.grad for leaf in leaves]


def _matches_eager(fn, values, fw, compiled=None):
    compiled = compiled or tpg.compile(fn, options=OPTIONS)
    want_outs, want_grads = _train(fn, values, fw)
    for _ in range(2):
        outs, grads = _train(compiled, values, fw)
        assert [o.requires_grad for o in outs] == [o.requires_grad for o in want_outs]
        for got, want in zip(outs, want_outs):
            np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5)
        for got, want in zip(grads, want_grads):
            assert (got is None) == (want is None)
            if want is not None:
                np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5)
    return compiled


def _frameworks():
    return [pytest.param(name, id=name) for name in ("torch", "tensorplay")]


def _fw(name):
    return pytest.importorskip(name)


X = np.array([[0.5, -1.5, 2.0, 3.25], [1.0, -0.75, -2.5, 4.0]], dtype=np.float32)


@pytest.mark.parametrize("name", _frameworks())
def test_split_pieces_read_by_negative_index_or_twice_get_their_gradient(name):
    # `split(x, 3, dim=1)[-1]`: the piece's gradient was filed under index -1 and lost
    # (x.grad wrong); two reads of one piece kept only the last one's gradient.
    fw = _fw(name)

    def f(x):
        pieces = fw.split(x, 3, dim=1)
        twice = fw.split(x, 2, dim=1)
        return (fw.stack([x, x], dim=1), pieces[-1] * 3.0, twice[0] * 2 + twice[0])
    _matches_eager(f, [X], fw)


@pytest.mark.parametrize("name", _frameworks())
def test_locally_constant_ops_give_a_zero_gradient_tensor_as_eager(name):
    # rounding division, `x ** 0`: eager's .grad is a tensor of zeros; ours was None
    fw = _fw(name)

    def f(x, y):
        return (fw.div(x, -1.5, rounding_mode="trunc") * 3, fw.div(x, y, rounding_mode="floor"))
    _matches_eager(f, [X, X[0] + 4.0], fw)

    def g(x, w):  # TensorPlay seed 100093: `(v @ w) ** -0.0`
        return ((x @ w) ** -0.0, x ** 0)
    _matches_eager(g, [X, X.T.copy()], fw)


def test_tensorplay_program_with_a_non_differentiable_output_trains_compiled():
    # TensorPlay's Function.mark_non_differentiable refuses the forward's results (leaves):
    # every program returning a bool / int / no-grad value crashed
    tp = _fw("tensorplay")

    def f(x, y):
        return ((x * y).sum(), x > 0, (y * 2).int())
    compiled = _matches_eager(f, [X, X * 2], tp)
    assert "compiled through our joint graph" in compiled.explain()


@pytest.mark.parametrize("name", _frameworks())
def test_values_computed_from_a_detached_tensor_do_not_require_grad(name):
    # the gradient was right, but `x.detach().sum(-1)` came back requiring grad
    fw = _fw(name)

    def f(x):
        return ((x * x.detach()).sum(), x.detach().sum(-1), fw.detach(x) * 2)
    _matches_eager(f, [X], fw)


@pytest.mark.parametrize("name", _frameworks())
def test_an_input_only_unused_outputs_reach_keeps_grad_none(name):
    # eager leaves y.grad None when the loss uses no output y reaches; the compiled
    # backward got zeros for those outputs and gave y a zero gradient
    fw = _fw(name)

    def f(x, y):
        return (x * 2, (y * 3).sin(), (x * y).sum())
    compiled = tpg.compile(f, options=OPTIONS)
    for fn in (f, compiled, compiled):
        x, y = (fw.from_numpy(X.copy()).requires_grad_(True) for _ in range(2))
        fn(x, y)[0].sum().backward()
        assert y.grad is None and x.grad is not None
        x.grad = None
        out = fn(x, y)
        (out[0].sum() + out[2]).backward()
        assert y.grad is not None


def test_tensorplay_sign_and_floor_division_outputs_do_not_require_grad():
    # TensorPlay's eager sign / `//` results never require grad (torch's do, with zero
    # gradients); compiled ones did, through both of TensorPlay's entry points
    tp = _fw("tensorplay")

    def f(x):
        return (tp.sign(x), x // 2, x.sign() + 1, x * 2)
    _matches_eager(f, [X], tp)
    _matches_eager(f, [X], tp, tp.compile(f, backend="tensorplay_graph", options=OPTIONS))


def test_tensorplay_named_max_values_train_through_tp_compile():
    # tp.compile's graph reads `x.max(dim).values` as getattr(max, "values"): the joint
    # graph took it for an opaque op on a tuple and crashed
    tp = _fw("tensorplay")

    def f(x):
        return (x.max(dim=-1, keepdim=True).values * 2, x.min(dim=0).values)
    _matches_eager(f, [X], tp, tp.compile(f, backend="tensorplay_graph", options=OPTIONS))


def test_module_without_arguments_compiles_ops_without_a_meta_rule():
    # a program with no placeholder took shape_prop's no-example-inputs mode, which has no
    # way to infer round()'s metadata: ShapeError
    torch = _fw("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.from_numpy(X.copy()), requires_grad=False)

        def forward(self):
            return (torch.round(self.w) * 2,)
    net = Net()
    got, = tpg.compile(net, options=OPTIONS)()
    np.testing.assert_array_equal(_np(got), _np(net()[0]))


@pytest.mark.usefixtures("fresh_dynamo")
def test_torch_compile_allows_retain_graph_with_saved_activations():
    # AOTAutograd marked the saved tanh(x) "donated" and refused backward(retain_graph=True)
    torch = _fw("torch")

    def f(x):
        return torch.tanh(x) * 3.0
    compiled = torch.compile(f, backend="tensorplay_graph", options=OPTIONS)
    weights = torch.from_numpy(X[::-1].copy())
    x = torch.from_numpy(X.copy()).requires_grad_(True)
    (f(x) * weights).sum().backward()
    want = x.grad.clone()
    x.grad = None
    (compiled(x) * weights).sum().backward()     # the first backward compiles the backward graph
    x.grad = None
    loss = (compiled(x) * weights).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    torch.testing.assert_close(x.grad, want * 2)


def test_tp_compile_keeps_a_custom_op_that_only_writes_into_its_argument():
    # TensorPlay's tracer recorded the call as a node without users, and its dead-code
    # pass dropped it: the write never happened (any backend, TensorPlay's own too)
    tp = _fw("tensorplay")
    from tensorplay_graph.library import custom_op

    @custom_op("grad_fuzz_test::bump", mutates_args=("x",))
    def bump(x: tp.Tensor) -> None:
        x.add_(1.0)

    @bump.register_fake
    def _(x):
        return None

    def f(x):
        v = x * 2
        bump(v)
        return (v,)
    compiled = tp.compile(f, backend="tensorplay_graph", options=OPTIONS)
    for _ in range(2):
        np.testing.assert_array_equal(_np(compiled(tp.from_numpy(X.copy()))[0]), X * 2 + 1)


@pytest.mark.parametrize("name", _frameworks())
@pytest.mark.parametrize("op", ["minimum", "maximum"])
def test_extremum_gradient_next_to_nan_follows_each_framework(name, op):
    # torch gives both sides the gradient where one is NaN, TensorPlay neither (torch seed
    # 100161: minimum(cat([v, v ** x1, v]), x4) with NaN from a negative base)
    fw = _fw(name)
    a = np.array([np.nan, 1.0, 2.0, 3.0, np.nan, -1.0], dtype=np.float32)
    b = np.array([1.0, np.nan, 2.0, 1.0, np.nan, 0.5], dtype=np.float32)

    def f(x, y):
        return (getattr(fw, op)(x, y) * 2.0,)
    _matches_eager(f, [a, b], fw)


@pytest.mark.parametrize("name", _frameworks())
def test_clamp_gradient_at_nan_follows_each_framework(name):
    # TensorPlay passes the gradient through clamp where the input is NaN, torch does not
    # (TensorPlay seed 101801: `log(x).clamp(min=0)` with x < 0)
    fw = _fw(name)
    a = np.array([np.nan, -1.0, 0.5, 3.0, 1.0], dtype=np.float32)

    def f(x):
        return (x.clamp(min=0.0) * 2, x.clamp(max=1.0), x.clamp(min=-0.5, max=1.0) * 3)
    _matches_eager(f, [a], fw)


@pytest.mark.parametrize("weight", [
    [1.0, np.inf, 0.5, -2.0, 1.0, 1.0, 3.0, 1.0],         # one infinity
    [1.0, np.inf, 0.5, -np.inf, 1.0, np.nan, 3.0, 1.0],   # both signs and a NaN
    [0.3, -1.0, 0.5, 2.0, 1.0, -0.7, 3.0, 1.5],           # finite: the rounding of the formula
])
def test_layer_norm_input_gradient_with_infinite_weights_is_torch_cpus(weight):
    """Grad fuzz seed 99998492: torch's CPU layer-norm backward makes ``b * x + c`` from the
    row sums, its CUDA kernel subtracts the means from ``gx``: where the weight holds an
    infinity they place NaN and +-inf differently. Eager CPU gave all NaN; the CUDA order
    gave -inf in three places."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def fn(x, w):
        return (F.layer_norm(x, (8,), w, None),)

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 8)) * 2).astype(np.float32)
    _matches_eager(fn, [x, np.asarray(weight, dtype=np.float32)], torch)


@pytest.mark.parametrize("name", _frameworks())
@pytest.mark.parametrize("outer", ["sin", "sqrt"])
def test_abs_gradient_at_zero_and_nan_is_g_times_sign(name, outer):
    """``abs``'s backward is ``g * sgn(a)`` in both frameworks: at a NaN ``a`` the incoming
    ``g = cos(|a|)`` is NaN (grad fuzz seed 99998563, torch), at a zero ``a`` the incoming
    ``g`` of ``sqrt(|a|)`` is infinite (seed 100400213, TensorPlay): NaN either way (ours
    gave 0)."""
    fw = _fw(name)
    op = getattr(fw, outer)

    def fn(x):
        return (op(x.abs()),)

    x = np.asarray([np.nan, 0.0, -0.0, 1.5, -2.0, np.inf, -np.inf], dtype=np.float32)
    _matches_eager(fn, [x], fw)


def test_layer_norm_of_an_empty_row_trains():
    """Grad fuzz seed 99998312: ``layer_norm(x, (0,), w)`` divided by the row's 0 elements."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def fn(x, w):
        return (F.layer_norm(x, (0,), w, None),)

    _matches_eager(fn, [np.zeros((3, 0), np.float32), np.zeros((0,), np.float32)], torch)
