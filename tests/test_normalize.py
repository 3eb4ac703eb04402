"""normalize: TensorPlay and torch spellings (functions, methods, operators, TensorPlay's
native keyword names) map to the right prim with canonical arguments."""

from __future__ import annotations

import operator

import pytest
import tensorplay as tp
import torch
import torch.nn.functional as TF
import tensorplay.nn.functional as PF

from tensorplay_graph.ir.graph import Graph
from tensorplay_graph.ir.graph_module import GraphModule
from tensorplay_graph.passes.normalize import normalize

X, Y, Z = "X", "Y", "Z"  # stand-ins for the graph's placeholders

# (op, target, args, kwargs, expected prim, expected canonical args subset)
CF, CM = "call_function", "call_method"
CASES = [
    (CF, torch.add, (X, Y), {"alpha": 2}, "add", {"a": X, "b": Y, "alpha": 2}),
    (CF, tp.add, (X, 1.5), {}, "add", {"a": X, "b": 1.5, "alpha": 1}),
    (CF, operator.add, (X, Y), {}, "add", {"a": X, "b": Y}),
    (CM, "add", (X, Y), {"alpha": 3}, "add", {"a": X, "b": Y, "alpha": 3}),
    (CF, operator.sub, (2, X), {}, "sub", {"a": 2, "b": X}),
    (CF, tp.Tensor.mul, (X,), {"other": Y}, "mul", {"a": X, "b": Y}),
    (CF, torch.Tensor.mul, (X, Y), {}, "mul", {"a": X, "b": Y}),
    (CF, operator.truediv, (X, Y), {}, "div", {"a": X, "b": Y, "rounding_mode": None}),
    (CF, torch.div, (X, Y), {"rounding_mode": "floor"}, "div", {"rounding_mode": "floor"}),
    (CF, operator.neg, (X,), {}, "neg", {"a": X}),
    (CF, tp.exp, (), {"self": X}, "exp", {"a": X}),
    (CF, torch.exp, (X,), {}, "exp", {"a": X}),
    (CM, "rsqrt", (X,), {}, "rsqrt", {"a": X}),
    (CF, TF.gelu, (X,), {"approximate": "tanh"}, "gelu", {"a": X, "approximate": "tanh"}),
    (CF, PF.gelu, (X,), {}, "gelu", {"approximate": "none"}),
    (CF, tp.gelu, (), {"self": X, "approximate": "none"}, "gelu", {"a": X}),
    (CF, TF.relu, (X,), {}, "relu", {"a": X}),
    (CF, TF.silu, (X,), {"inplace": False}, "silu", {"a": X}),
    (CF, torch.sigmoid, (X,), {}, "sigmoid", {"a": X}),
    (CF, operator.pow, (X, 2), {}, "pow", {"a": X, "b": 2}),
    (CF, tp.pow, (X,), {"exponent": Y}, "pow", {"a": X, "b": Y}),
    (CF, tp.where, (), {"condition": X, "self": Y, "other": Z}, "where", {"cond": X, "a": Y, "b": Z}),
    (CF, torch.where, (X, Y, 0.0), {}, "where", {"cond": X, "a": Y, "b": 0.0}),
    (CM, "clamp", (X,), {"min": 0}, "clamp", {"a": X, "min": 0, "max": None}),
    (CF, torch.clip, (X, -1, 1), {}, "clamp", {"min": -1, "max": 1}),
    (CF, operator.lt, (X, 0.5), {}, "lt", {"a": X, "b": 0.5}),
    (CF, tp.ge, (X, Y), {}, "ge", {"a": X, "b": Y}),
    (CM, "eq", (X, Y), {}, "eq", {"a": X, "b": Y}),
    (CF, torch.logical_and, (X, Y), {}, "logical_and", {"a": X, "b": Y}),
    (CM, "logical_not", (X,), {}, "logical_not", {"a": X}),
    (CM, "to", (X, torch.float16), {}, "cast", {"a": X, "dtype": "float16"}),
    (CM, "to", (X,), {"dtype": tp.bfloat16}, "cast", {"dtype": "bfloat16"}),
    (CM, "half", (X,), {}, "cast", {"dtype": "float16"}),
    (CM, "type", (X, torch.int32), {}, "cast", {"dtype": "int32"}),
    (CF, torch.sum, (X, 1), {"keepdim": True}, "sum", {"dim": 1, "keepdim": True, "dtype": None}),
    (CF, tp.sum, (X, 1, False), {"dtype": tp.int32}, "sum", {"dtype": "int32"}),
    (CF, tp.sum, (X,), {"dtype": getattr(tp.sum, "__kwdefaults__", {}).get("dtype")}, "sum", {"dtype": None}),
    (CM, "mean", (X,), {"dim": [0, 1]}, "mean", {"dim": [0, 1]}),
    (CF, torch.amax, (X, (0, 1)), {}, "amax", {"dim": (0, 1)}),
    (CF, torch.var, (X, 1), {"correction": 0}, "var", {"dim": 1, "correction": 0}),
    (CF, torch.var, (X, True), {}, "var", {"dim": None, "correction": 1}),
    (CF, torch.var, (X, 0, False, True), {}, "var", {"dim": 0, "correction": 0, "keepdim": True}),
    (CF, tp.var, (X, 0), {"dim": 1}, "var", {"dim": 1, "correction": 0}),
    (CF, tp.Tensor.var, (X, 0), {}, "var", {"dim": None, "correction": 0}),
    (CF, TF.softmax, (X, -1, 3, torch.float32), {}, "softmax", {"dim": -1, "dtype": "float32"}),
    (CF, tp.softmax, (X, 1), {}, "softmax", {"dim": 1, "dtype": None}),
    (CM, "log_softmax", (X, -1), {}, "log_softmax", {"dim": -1}),
    (CF, TF.layer_norm, (X, (8,), Y, Z), {}, "layer_norm", {"normalized_shape": (8,), "weight": Y, "bias": Z}),
    (CF, torch.layer_norm, (X, [8], None, None, 1e-5, True), {}, "layer_norm", {"eps": 1e-5}),
    (CF, PF.rms_norm, (X, [8]), {"weight": Y}, "rms_norm", {"weight": Y, "eps": None}),
    (CF, operator.matmul, (X, Y), {}, "matmul", {"a": X, "b": Y}),
    (CF, torch.mm, (X, Y), {}, "matmul", {"a": X, "b": Y}),
    (CF, tp.matmul, (), {"self": X, "other": Y}, "matmul", {"a": X, "b": Y}),
    (CF, TF.linear, (X, Y), {}, "linear", {"a": X, "weight": Y, "bias": None}),
    (CF, torch.bmm, (X, Y), {}, "bmm", {"a": X, "b": Y}),
    (CF, torch.addmm, (Z, X, Y), {"beta": 0.5}, "addmm", {"c": Z, "a": X, "b": Y, "beta": 0.5}),
    (CM, "view", (X, 2, -1), {}, "view", {"shape": (2, -1)}),
    (CM, "reshape", (X, (4, 2)), {}, "reshape", {"shape": (4, 2)}),
    (CF, torch.reshape, (X, (4, 2)), {}, "reshape", {"shape": (4, 2)}),
    (CM, "permute", (X, 1, 0), {}, "permute", {"dims": (1, 0)}),
    (CF, torch.permute, (X, (1, 0)), {}, "permute", {"dims": (1, 0)}),
    (CM, "transpose", (X, 0, 1), {}, "transpose", {"dim0": 0, "dim1": 1}),
    (CF, tp.unsqueeze, (X, 0), {}, "unsqueeze", {"dim": 0}),
    (CM, "squeeze", (X,), {}, "squeeze", {"dim": None}),
    (CM, "expand", (X, 4, -1), {}, "expand", {"shape": (4, -1)}),
    (CM, "contiguous", (X,), {}, "contiguous", {"a": X}),
    (CF, operator.getitem, (X, (slice(None), None, 0)), {}, "getitem", {"index": (slice(None), None, 0)}),
    # random, data-dependent and side-effecting ops: opaque records with barrier flags
    (CF, torch.rand, (3, 4), {"dtype": torch.float64}, "rand", {"size": (3, 4), "dtype": "float64"}),
    (CF, tp.randn, ((3, 4),), {}, "randn", {"size": ((3, 4),)}),
    (CF, torch.rand_like, (X,), {}, "rand_like", {"a": X, "dtype": None}),
    (CF, tp.randn_like, (), {"input": X}, "randn_like", {"a": X}),
    (CF, torch.randint, (10, (3,)), {}, "randint", {"low": 0, "high": 10, "size": (3,)}),
    (CF, tp.randint, (2, 10, (3,)), {}, "randint", {"low": 2, "high": 10, "size": (3,)}),
    (CF, torch.bernoulli, (X,), {}, "bernoulli", {"a": X, "p": None}),
    (CM, "bernoulli", (X, 0.3), {}, "bernoulli", {"a": X, "p": 0.3}),
    (CF, TF.dropout, (X, 0.2, False), {}, "dropout", {"a": X, "p": 0.2, "training": False}),
    (CF, PF.dropout, (X, 0.2, True, False), {}, "dropout", {"training": True, "inplace": False}),
    (CF, torch.dropout, (X, 0.2), {"train": True}, "dropout", {"training": True}),
    (CF, torch.multinomial, (X, 2), {"replacement": True}, "multinomial", {"num_samples": 2}),
    (CM, "multinomial", (X, 2), {}, "multinomial", {"a": X, "replacement": False}),
    (CF, torch.normal, (X, 1.0), {}, "normal", {"mean": X, "std": 1.0}),
    (CF, tp.normal, (X, Y), {}, "normal", {"mean": X, "std": Y}),
    (CF, torch.nonzero, (X,), {}, "nonzero", {"a": X}),
    (CF, tp.nonzero, (X,), {}, "nonzero", {"a": X}),
    (CM, "nonzero", (X,), {}, "nonzero", {"a": X}),
    (CM, "item", (X,), {}, "item", {"a": X}),
    (CM, "tolist", (X,), {}, "tolist", {"a": X}),
    (CF, torch.unique, (X,), {"return_counts": True}, "unique", {"return_counts": True}),
    (CM, "unique", (X,), {}, "unique", {"sorted": True}),
    (CF, tp.masked_select, (X, Y), {}, "masked_select", {"a": X, "mask": Y}),
    (CM, "masked_select", (X, Y), {}, "masked_select", {"mask": Y}),
    (CF, torch.argwhere, (X,), {}, "argwhere", {"a": X}),
    (CF, tp.bincount, (X,), {"minlength": 4}, "bincount", {"minlength": 4}),
    (CM, "bincount", (X,), {}, "bincount", {"weights": None}),
    (CF, torch._assert, (X, "msg"), {}, "assert", {"condition": X, "message": "msg"}),
]

NOT_PRIMS = [
    (CF, torch.add, (X, Y), {"out": Z}),             # writes into out
    (CF, TF.relu, (X,), {"inplace": True}),          # mutation
    (CM, "add_", (X, Y), {}),                        # in-place method
    (CM, "to", (X, "cuda"), {}),                     # device move, not a cast
    (CM, "view", (X, torch.int32), {}),              # dtype view
    (CF, operator.getitem, (X, Y), {}),              # tensor index: advanced indexing
    (CF, torch.cumsum, (X, 0), {}),                  # no prim
    (CF, print, (X,), {}),
]


def _graph(op, target, args, kwargs):
    g = Graph()
    nodes = {name: g.placeholder(name.lower()) for name in (X, Y, Z)}
    swap = lambda v: nodes.get(v, v) if isinstance(v, str) and v in nodes else v  # noqa: E731
    args = tuple(swap(a) for a in args)
    kwargs = {k: swap(v) for k, v in kwargs.items()}
    node = g.call_function(target, args, kwargs) if op == CF else g.call_method(target, args, kwargs)
    g.output(node)
    return GraphModule({}, g), node, nodes


@pytest.mark.parametrize("op,target,args,kwargs,prim,expected", CASES,
                         ids=[f"{c[4]}-{getattr(c[1], '__qualname__', c[1])}-{i}" for i, c in enumerate(CASES)])
def test_spelling_normalizes(op, target, args, kwargs, prim, expected):
    gm, node, nodes = _graph(op, target, args, kwargs)
    normalize(gm)
    assert node.meta["prim"].name == prim
    got = node.meta["prim_args"]
    for key, value in expected.items():
        want = nodes.get(value, value) if isinstance(value, str) else value
        assert got[key] == want or got[key] is want, (key, got)
    assert node.target is target or node.target == target  # target kept


@pytest.mark.parametrize("op,target,args,kwargs", NOT_PRIMS, ids=[str(i) for i in range(len(NOT_PRIMS))])
def test_non_prims_get_no_prim(op, target, args, kwargs):
    gm, node, _ = _graph(op, target, args, kwargs)
    node.meta["prim"] = "stale"
    normalize(gm)
    assert "prim" not in node.meta and "prim_args" not in node.meta


def test_getitem_on_tuple_output_is_not_a_view():
    from tensorplay_graph.ir.meta import TensorMeta
    g = Graph()
    x = g.placeholder("x")
    pair = g.call_function(torch.max, (x, 0))
    pair.meta["tensor_meta"] = (TensorMeta((3,), "float32"), TensorMeta((3,), "int64"))
    first = g.call_function(operator.getitem, (pair, 0))
    g.output(first)
    normalize(GraphModule({}, g))
    assert "prim" not in first.meta


def test_tensorplay_method_convention_from_example_values():
    gm, node, nodes = _graph(CM, "var", (X, 0), {})
    nodes[X].meta["val"] = tp.randn(3, 4)
    normalize(gm)
    assert node.meta["prim_args"]["correction"] == 0 and node.meta["prim_args"]["dim"] is None
    nodes[X].meta["val"] = torch.randn(3, 4)
    normalize(gm)
    assert node.meta["prim_args"]["dim"] == 0 and node.meta["prim_args"]["correction"] == 1


def _chain(n):
    g = Graph()
    value = g.placeholder("x")
    targets = [torch.add, operator.mul, "relu", torch.exp]
    for i in range(n):
        t = targets[i % 4]
        value = g.call_method(t, (value,)) if isinstance(t, str) else g.call_function(
            t, (value, 1.0) if t in (torch.add, operator.mul) else (value,))
    g.output(value)
    return GraphModule({}, g)


def test_normalize_does_one_lookup_per_node(monkeypatch):
    from tensorplay_graph import prims

    small, big = _chain(2000), _chain(20000)
    normalize(small)  # warm the lookup tables
    # Work count (load-insensitive): exactly one prim lookup per call node.
    calls = []
    real_lookup = prims.lookup
    monkeypatch.setattr(prims, "lookup", lambda node, fw="torch": calls.append(node) or
                        real_lookup(node, fw))
    normalize(big)
    assert len(calls) == 20000 and len(set(calls)) == 20000
    monkeypatch.undo()
    assert all("prim" in n.meta for n in big.graph.nodes if n.op.startswith("call"))


def _t_method(x, w, v):
    return (x @ w.t()).relu() * 2, v.t() + 1  # v is 1-d: t() is v itself, not a prim


def _t_property(x, w, v):
    return (x @ w.T).relu() * 2, v.t() + 1


def _mt_property(x, w, v):  # torch only: TensorPlay tensors have no .mT
    return (x.mT.mT @ w.mT).relu() * 2, v.t() + 1


@pytest.mark.parametrize("framework,f", [(fw, f) for fw in ("torch", "tensorplay")
                                         for f in (_t_method, _t_property, _mt_property)
                                         if fw == "torch" or f is not _mt_property])
def test_t_of_a_matrix_is_a_transpose_and_trains_as_eager(framework, f):
    import tensorplay_graph as tpg
    T = torch if framework == "torch" else tp

    def make(seed):
        torch.manual_seed(seed)
        values = [torch.randn(4, 8), torch.randn(6, 8), torch.randn(5)]
        if framework == "tensorplay":
            values = [tp.from_dlpack(v) for v in values]
        return [v.requires_grad_() for v in values]
    gm = tpg.capture(f, *make(0))
    normalize(gm)
    names = [n.meta["prim"].name if n.meta.get("prim") else None for n in gm.graph.nodes
             if n.target == "t" or n.target is getattr]
    transposes = 3 if f is _mt_property else 1
    assert names == ["transpose"] * transposes + [None], names
    want_args, got_args = make(1), make(1)
    want, got = f(*want_args), tpg.compile(f)(*got_args)
    for w, g in zip(want, got):
        assert T.allclose(g.detach(), w.detach())
    sum(o.sum() for o in want).backward()
    sum(o.sum() for o in got).backward()
    for w, g in zip(want_args, got_args):
        assert T.allclose(g.grad, w.grad)
