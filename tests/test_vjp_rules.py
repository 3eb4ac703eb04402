"""Every prim's VJP rule against central finite differences (float64, small random inputs).

Each case builds a one-prim graph with the rule's own emitter (so the spelling of every
emitted prim is exercised too), runs it with torch float64 tensors, and compares the
rule's gradient of ``sum(out * g)`` with finite differences of the same graph's forward.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensorplay_graph import prims  # noqa: E402
from tensorplay_graph.frameworks import tensor_meta  # noqa: E402
from tensorplay_graph.ir import Graph, GraphModule  # noqa: E402
from tensorplay_graph.passes.normalize import normalize  # noqa: E402
from tensorplay_graph.prims.emit import OPAQUE, Emitter  # noqa: E402


def T(*shape, low=-1.5, high=1.5):
    """A float64 tensor argument with values in [low, high)."""
    return ("tensor", shape, low, high)


POS = dict(low=0.5, high=2.0)
#: prim -> list of canonical-argument dicts (T(...) marks a differentiable tensor input).
CASES = {
    **{name: [{"a": T(3, 4)}] for name in ("neg", "exp", "exp2", "sin", "cos", "tanh",
                                           "sigmoid", "relu", "silu", "abs")},
    **{name: [{"a": T(3, 4, **POS)}] for name in ("log", "log2", "sqrt", "rsqrt")},
    "gelu": [{"a": T(3, 4), "approximate": "none"}, {"a": T(3, 4), "approximate": "tanh"}],
    "cast": [{"a": T(3, 4), "dtype": "float64"}],
    "add": [{"a": T(3, 4), "b": T(4), "alpha": 2}, {"a": T(3, 4), "b": 1.5}],
    "sub": [{"a": T(3, 1), "b": T(3, 4), "alpha": 0.5}],
    "mul": [{"a": T(3, 4), "b": T(3, 1)}, {"a": T(3, 4), "b": 2.5}],
    "div": [{"a": T(3, 4), "b": T(4, **POS)}, {"a": T(3, 4), "b": 3.0}],
    "pow": [{"a": T(3, 4, **POS), "b": T(3, 4)}, {"a": T(3, 4), "b": 3},
            {"a": T(3, 4), "b": 2}, {"a": 2.0, "b": T(3, 4)}],
    "maximum": [{"a": T(3, 4), "b": T(4)}],
    "minimum": [{"a": T(3, 4), "b": T(3, 4)}],
    "where": [{"cond": ("mask", (3, 4)), "a": T(3, 4), "b": T(4)}],
    "clamp": [{"a": T(3, 4), "min": -0.5, "max": 0.6}, {"a": T(3, 4), "min": 0.1}],
    "sum": [{"a": T(3, 4), "dim": 1}, {"a": T(2, 3, 4)}, {"a": T(2, 3, 4), "dim": [0, 2],
                                                          "keepdim": True}],
    "mean": [{"a": T(3, 4), "dim": [0], "keepdim": True}, {"a": T(3, 4)}],
    "amax": [{"a": T(3, 4), "dim": 1}],
    "amin": [{"a": T(3, 4)}],
    "var": [{"a": T(3, 4), "dim": 1, "correction": 1}, {"a": T(3, 4), "correction": 0}],
    "softmax": [{"a": T(3, 4), "dim": -1}],
    "log_softmax": [{"a": T(3, 4), "dim": 0}],
    "layer_norm": [{"a": T(2, 3, 4), "normalized_shape": (4,), "weight": T(4), "bias": T(4)},
                   {"a": T(3, 4), "normalized_shape": (3, 4)}],
    "rms_norm": [{"a": T(2, 3, 4), "normalized_shape": (4,), "weight": T(4), "eps": 1e-6}],
    "matmul": [{"a": T(2, 3, 4), "b": T(4, 5)}, {"a": T(2, 3, 4), "b": T(2, 4, 2)},
               {"a": T(4), "b": T(4)}, {"a": T(4), "b": T(4, 5)}, {"a": T(4), "b": T(2, 4, 3)},
               {"a": T(3, 4), "b": T(4)}, {"a": T(2, 3, 4), "b": T(4)}],
    "bmm": [{"a": T(2, 3, 4), "b": T(2, 4, 2)}],
    "linear": [{"a": T(2, 3, 4), "weight": T(5, 4), "bias": T(5)}, {"a": T(3, 4),
                                                                    "weight": T(2, 4)}],
    "addmm": [{"c": T(5), "a": T(3, 4), "b": T(4, 5), "beta": 0.5, "alpha": 2}],
    "reshape": [{"a": T(2, 3, 4), "shape": (6, 4)}],
    "view": [{"a": T(2, 3, 4), "shape": (4, 6)}],
    "flatten": [{"a": T(2, 3, 4), "start_dim": 1, "end_dim": -1}],
    "permute": [{"a": T(2, 3, 4), "dims": (2, 0, 1)}],
    "transpose": [{"a": T(2, 3, 4), "dim0": 0, "dim1": 2}],
    "unsqueeze": [{"a": T(3, 4), "dim": 1}],
    "squeeze": [{"a": T(3, 1, 4), "dim": 1}],
    "expand": [{"a": T(3, 1), "shape": (2, 3, 4)}],
    "contiguous": [{"a": T(3, 4)}],
    "getitem": [{"a": T(3, 5), "index": (slice(None), slice(1, 4))}],
    "narrow": [{"a": T(3, 5), "dim": 1, "start": 1, "length": 3},
               {"a": T(4, 2), "dim": 0, "start": -3, "length": 2}],
    "dropout": [{"a": T(3, 4), "p": 0.5, "training": False, "inplace": False}],
}
#: Prims whose rule hands the node to the framework's own backward (``OPAQUE``), not
#: a formula of ours: the training tests cover them through eager's kernels.
#: Rules whose tensors come as a list (checked end to end: test_cat_gradient_equals_eager).
LIST_RULES = {"cat"}
FRAMEWORK_BACKWARD = {"conv1d", "conv2d", "conv3d", "batch_norm", "dropout1d", "dropout2d",
                      "dropout3d", "alpha_dropout", "feature_alpha_dropout", "cross_entropy"}


def _value(spec, rng):
    if isinstance(spec, tuple) and spec and spec[0] == "tensor":
        _, shape, low, high = spec
        return torch.tensor(rng.uniform(low, high, size=shape), dtype=torch.float64)
    if isinstance(spec, tuple) and spec and spec[0] == "mask":
        return torch.tensor(rng.uniform(size=spec[1]) > 0.5)
    return spec


def _program(name, args):
    """(GraphModule(*tensors, g) -> (out, *grads), names of the differentiable inputs)."""
    graph = Graph()
    e = Emitter(graph, "torch")
    canon, inputs = {}, []
    for key, value in args.items():
        if torch.is_tensor(value):
            node = graph.placeholder(key)
            node.meta["tensor_meta"] = tensor_meta(value)
            canon[key] = node
            if value.dtype == torch.float64:
                inputs.append(key)
        else:
            canon[key] = value
    out = e.prim(name, **canon)
    g = graph.placeholder("g")
    g.meta["tensor_meta"] = out.meta["tensor_meta"]
    found = prims.get(name).vjp(e, g, out, **canon)
    assert found is not OPAQUE
    grads = []
    for key in inputs:
        grad = found.get(key)
        assert grad is not None, f"{name}: no gradient for {key}"
        meta = canon[key].meta["tensor_meta"]
        grads.append(e.to_dtype(e.sum_to(grad, meta.shape), meta.dtype))
    graph.output((out,) + tuple(grads))
    gm = GraphModule({}, graph)
    forward = Graph()  # the forward alone, for the finite differences
    mapping = {}
    for node in graph.nodes:
        if node.op == "placeholder":
            mapping[node] = forward.node_copy(node)
    for node in graph.nodes:
        if node.op != "placeholder" and node is not graph.output_node():
            mapping[node] = forward.node_copy(node, lambda n: mapping[n])
    forward.output(mapping[out])
    forward.eliminate_dead_code()
    # every emitted node normalizes back to the prim it was emitted as
    emitted = {n: n.meta["prim"].name for n in graph.nodes if "prim" in n.meta}
    normalize(gm)
    assert {n: n.meta["prim"].name for n in emitted if "prim" in n.meta} == emitted
    return gm, GraphModule({}, forward), inputs


def _fd(gm, values, key, g, eps=1e-6):
    names = [k for k, v in values.items() if torch.is_tensor(v)]
    x = values[key]
    grad = torch.zeros_like(x)
    flat = x.view(-1)
    for i in range(flat.numel()):
        saved = flat[i].item()
        results = []
        for step in (eps, -eps):
            flat[i] = saved + step
            out = gm(*[values[k] for k in names], g)
            results.append(float((out * g).sum()))
        flat[i] = saved
        grad.view(-1)[i] = (results[0] - results[1]) / (2 * eps)
    return grad


def _cases():
    return [pytest.param(name, i, id=f"{name}-{i}") for name, cases in CASES.items()
            for i in range(len(cases))]


@pytest.mark.parametrize("name, index", _cases())
def test_vjp_matches_finite_differences(name, index):
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        values = {k: _value(v, rng) for k, v in CASES[name][index].items()}
        gm, forward, inputs = _program(name, values)
        names = [k for k, v in values.items() if torch.is_tensor(v)]
        shape = next(n for n in gm.graph.nodes if n.name == "g").meta["tensor_meta"].shape
        g = torch.tensor(rng.uniform(-1, 1, size=shape), dtype=torch.float64)
        results = gm(*[values[k] for k in names], g)
        for key, grad in zip(inputs, results[1:]):
            expected = _fd(forward, values, key, g)
            assert grad.shape == values[key].shape
            np.testing.assert_allclose(grad.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} d/d{key} (seed {seed})")


def test_every_rule_has_a_case():
    with_rules = {p.name for p in prims.all_prims() if p.vjp is not None}
    assert with_rules - FRAMEWORK_BACKWARD - LIST_RULES == set(CASES)


def test_cat_gradient_equals_eager():
    """cat's rule (one slice of the gradient per piece) through a compiled training call."""
    import tensorplay_graph as tpg
    from tensorplay_graph.training import compiled_programs

    def f(x, y):
        return (torch.cat((x.sin(), y * 2, x), 1) * torch.arange(8.0)).sum()

    make = [lambda: torch.randn(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0)),
            lambda: torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))]
    eager = [m().requires_grad_() for m in make]
    ours = [m().requires_grad_() for m in make]
    tpg.compile(f, backend="reference")(*ours).backward()
    f(*eager).backward()
    built = compiled_programs()[-1:]   # the newest (the registry keeps the last 64)
    assert built and built[-1].eager_reason is None, built[-1].explain() if built else "none"
    assert "cat" in built[-1].explain()
    for got, want in zip(ours, eager):
        torch.testing.assert_close(got.grad, want.grad)


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_clamp_gradient_trains_compiled_with_eagers_nan_rule(framework):
    """TensorPlay's clamp passes the gradient where the input is NaN (``not (a < min)``), which
    the rule spells with ``logical_not``: it had no spelling, so TensorPlay's clamp trained
    through eager autograd (grad fuzz: "the emitter has no spelling for prim 'logical_not'")."""
    import tensorplay_graph as tpg
    from tensorplay_graph.training import compiled_programs
    M = pytest.importorskip(framework)

    def f(x):
        return (x.log().clamp(min=-0.5, max=1.0) * 3.0).sum()

    values = np.array([0.1, 0.5, 1.0, 2.0, 4.0, -1.0, 0.0, np.nan], np.float32)
    eager, ours = (M.from_numpy(values.copy()).requires_grad_() for _ in range(2))
    f(eager).backward()
    tpg.compile(f, backend="reference")(ours).backward()
    built = compiled_programs()[-1:]
    assert built and built[-1].eager_reason is None, built[-1].explain() if built else "none"
    np.testing.assert_array_equal(np.asarray(ours.grad.numpy()), np.asarray(eager.grad.numpy()))


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_matmul_with_vectors_trains_compiled(framework):
    """``matmul`` with a 1-D operand (a vector on either side, or both) has a rule; it trained
    through eager autograd before ("matmul with a 1-D operand", the grad fuzz's most common
    reason)."""
    import tensorplay_graph as tpg
    from tensorplay_graph.training import compiled_programs
    M = pytest.importorskip(framework)

    def f(x, v, w):
        return ((x @ v).tanh() @ w + (v @ x.transpose(0, 1)) @ w + v @ v).sum()

    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4,), (3,))]
    eager = [M.from_numpy(v.copy()).requires_grad_() for v in values]
    ours = [M.from_numpy(v.copy()).requires_grad_() for v in values]
    f(*eager).backward()
    tpg.compile(f, backend="reference")(*ours).backward()
    built = compiled_programs()[-1:]
    assert built and built[-1].eager_reason is None, built[-1].explain() if built else "none"
    for got, want in zip(ours, eager):
        np.testing.assert_allclose(np.asarray(got.grad.numpy()), np.asarray(want.grad.numpy()),
                                   rtol=1e-5, atol=1e-5)
