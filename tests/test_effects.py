"""ir.effects: one table of spellings, one answer for every pass (barriers, DCE, CSE)."""

from __future__ import annotations

import operator
from typing import Any, Callable, NamedTuple, Tuple

import pytest

torch = pytest.importorskip("torch")
tp = pytest.importorskip("tensorplay")

from tensorplay_graph.capture import capture
from tensorplay_graph.ir import Graph
from tensorplay_graph.ir.effects import (inplace_reason, is_impure, is_inplace, mutated_args,
                                         mutated_nodes)
from tensorplay_graph.library import custom_op
from tensorplay_graph.passes.barriers import barrier_of, barriers
from tensorplay_graph.passes.cleanup import dce
from tensorplay_graph.passes.normalize import normalize


@custom_op("tpg_effects_test::add_into", mutates_args=("x",))
def add_into(src, x) -> None:
    x.add_(src)


add_into.register_fake(lambda src, x: None)


@torch.library.custom_op("tpg_effects_test::torch_bump", mutates_args=("x",))
def torch_bump(src: torch.Tensor, x: torch.Tensor) -> None:
    x.add_(src)


@tp.library.custom_op("tpg_effects_test::tp_bump", mutates_args=("x",))
def tp_bump(src, x) -> None:
    x.add_(src)


class Row(NamedTuple):
    name: str
    program: Callable[..., Any]   # (x, y, z) -> y; its one call node is the subject
    inplace: bool
    impure: bool
    written: Tuple[str, ...]      # placeholders the subject writes (mutated_nodes)


def rows(T, F) -> list:
    """The spellings every framework shares; ``T`` is torch or tensorplay."""
    def add_(x, y, z):
        x.add_(1)
        return y

    def iadd(x, y, z):
        x += 1
        return y

    def setitem(x, y, z):
        x[1:3] = 0
        return y

    def out_kwarg(x, y, z):
        T.add(x, z, out=y)
        return y

    def relu_inplace(x, y, z):
        F.relu(x, inplace=True)
        return y

    def relu_inplace_positional(x, y, z):
        F.relu(x, True)
        return y

    def custom_mutating(x, y, z):
        add_into(z, x)              # writes x (declared), only reads z
        return y

    def random(x, y, z):
        T.rand_like(x)              # unread, but dropping it would shift the random stream
        return y

    def eval_dropout(x, y, z):
        F.dropout(x, 0.5, training=False)   # the identity: nothing drawn
        return y

    def pure(x, y, z):
        x * 2
        return y

    return [
        Row("add_", add_, True, True, ("x",)),
        Row("iadd", iadd, True, True, ("x",)),
        Row("setitem", setitem, True, True, ("x",)),
        Row("out=", out_kwarg, True, True, ("y",)),
        Row("inplace=True", relu_inplace, True, True, ("x",)),
        Row("inplace positional", relu_inplace_positional, True, True, ("x",)),
        Row("custom mutates_args", custom_mutating, True, True, ("x",)),
        Row("random", random, False, True, ()),
        Row("eval dropout", eval_dropout, False, False, ()),
        Row("pure", pure, False, False, ()),
    ]


def torch_only() -> list:
    def relu_fn(x, y, z):
        torch.relu_(x)
        return y

    def schema_op(x, y, z):
        torch_bump(z, x)            # an OpOverload whose schema says Tensor(a0!) x
        return y

    return [Row("torch.relu_", relu_fn, True, True, ("x",)),
            Row("torch custom_op schema", schema_op, True, True, ("x",))]


def tensorplay_only() -> list:
    def tp_op(x, y, z):
        tp_bump(z, x)               # no signature exposed: every tensor argument counts as written
        return y

    return [Row("tensorplay custom_op", tp_op, True, True, ("z", "x"))]


FRAMEWORKS = {
    "torch": dict(mod=torch, rows=rows(torch, torch.nn.functional) + torch_only()),
    "tensorplay": dict(mod=tp, rows=rows(tp, tp.nn.functional) + tensorplay_only()),
}
CASES = [pytest.param(fw, row, id=f"{fw}-{row.name}")
         for fw, spec in FRAMEWORKS.items() for row in spec["rows"]]


def inputs(T):
    T.manual_seed(0)
    return T.randn(4), T.randn(4), T.randn(4)


def clones(values):
    return tuple(v.clone() for v in values)


def subject(gm):
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert len(calls) == 1, [n.format_node() for n in calls]
    return calls[0]


def run_and_draw(T, fn, values):
    """Result, inputs after the call and the next random number: all an effect can change."""
    T.manual_seed(1)
    args = clones(values)
    out = fn(*args)
    return [out.tolist()] + [a.tolist() for a in args] + [T.rand(2).tolist()]


@pytest.mark.parametrize("fw,row", CASES)
def test_predicate_table(fw, row):
    T = FRAMEWORKS[fw]["mod"]
    values = inputs(T)
    gm = normalize(capture(row.program, *clones(values)))
    node = subject(gm)
    assert is_inplace(node) is row.inplace, node.format_node()
    assert (inplace_reason(node) is not None) is row.inplace
    assert is_impure(node) is node.is_impure() is row.impure, node.format_node()
    assert tuple(n.name for n in mutated_nodes(node)) == row.written
    assert len(mutated_args(node)) == len(row.written)
    barrier = barrier_of(node, ())
    assert bool(barrier is not None and barrier.fence) is row.impure, barrier


@pytest.mark.parametrize("fw,row", CASES)
def test_dce_keeps_exactly_the_impure(fw, row):
    T = FRAMEWORKS[fw]["mod"]
    values = inputs(T)
    expected = run_and_draw(T, row.program, values)
    by_graph = normalize(capture(row.program, *clones(values)))
    by_pass = barriers(normalize(capture(row.program, *clones(values))))
    name = subject(by_graph).name
    by_graph.graph.eliminate_dead_code()
    assert dce(by_pass) == (0 if row.impure else 1)
    for gm in (by_graph, by_pass):
        kept = [n.name for n in gm.graph.nodes]
        assert (name in kept) is row.impure, kept
        assert run_and_draw(T, gm, values) == expected


# ----------------------------------------------------------------------------- hand-built graphs

class _Impure:
    _is_impure = True

    def __call__(self, v):
        return v


class _Declared:
    """A custom-op-like target whose mutated argument is found by name."""

    mutates_args = frozenset({"b"})

    def __init__(self, via: str):
        if via == "signature":
            self.signature_fn = lambda a, b: None
        elif via == "schema":
            self.schema = "(Tensor a, Tensor(a!) b) -> ()"

    def __call__(self, a, b):
        return None


def _foreach_add_(xs, v):
    return xs


def relu(input, inplace=False):
    return input


def _call(target, *args, **kwargs):
    """A builder of ``target(*args, **kwargs)`` where the strings "x"/"y" name the placeholders."""
    def build(g, x, y):
        pick = {"x": x, "y": y}
        return g.call_function(target, tuple(pick.get(a, a) if isinstance(a, str) else a
                                             for a in args),
                               {k: pick.get(v, v) for k, v in kwargs.items()})
    return build


def _method(name, *args, **kwargs):
    return lambda g, x, y: g.call_method(name, (x,) + args, kwargs)


GRAPH_ROWS = [
    # (id, build, inplace, impure, mutated_args)
    ("operator.and_ is not in place", _call(operator.and_, "x", "y"), False, False, ()),
    ("operator.delitem", _call(operator.delitem, "x", 0), True, True, (0,)),
    ("__iadd__ method", _method("__iadd__", 1), True, True, (0,)),
    ("__setitem__ method", _method("__setitem__", 0, 1), True, True, (0,)),
    ("__add__ method", _method("__add__", 1), False, False, ()),
    ("__init__ method", _method("__init__"), False, False, ()),
    ("private in-place function", _call(_foreach_add_, "x", 1), True, True, (0,)),
    ("inplace=True by position", _call(relu, "x", True), True, True, (0,)),
    ("inplace=False by position", _call(relu, "x", False), False, False, ()),
    ("out=None", _method("add", 1, out=None), False, False, ()),
    ("inplace=False", _method("relu", inplace=False), False, False, ()),
    ("_is_impure target", _call(_Impure(), "x"), False, True, ()),
    ("declared, by signature", _call(_Declared("signature"), "y", "x"), True, True, (1,)),
    ("declared, keyword", _call(_Declared("signature"), "y", b="x"), True, True, ("b",)),
    ("declared, by schema", _call(_Declared("schema"), "y", "x"), True, True, (1,)),
    ("declared, names unknown", _call(_Declared("none"), "y", "x"), True, True, (0, 1)),
]


@pytest.mark.parametrize("build,inplace,impure,written",
                         [pytest.param(*r[1:], id=r[0]) for r in GRAPH_ROWS])
def test_hand_built_spellings(build, inplace, impure, written):
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    node = build(g, x, y)
    g.output(None)
    assert (is_inplace(node), is_impure(node), mutated_args(node)) == (inplace, impure, written)
    g.eliminate_dead_code()
    assert (node in list(g.nodes)) is impure


def test_lowered_kernel_call_keeps_the_barriers_fence():
    """After lowering the target is a Kernel; the fence recorded by ``barriers`` still counts."""
    from tensorplay_graph.passes.barriers import Barrier
    g = Graph()
    x = g.placeholder("x")
    node = g.call_function(lambda v: (v,), (x,))
    g.output(None)
    assert not is_impure(node)
    node.meta["barrier"] = Barrier("triton_op", "mutates x", fence=True)
    assert is_impure(node) and not g.eliminate_dead_code()
