"""cleanup: DCE keeps effects, CSE merges pure duplicates but never across a write."""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg
from tensorplay_graph.library import custom_op
from tensorplay_graph.passes.barriers import barriers
from tensorplay_graph.passes.cleanup import cleanup, cse, dce
from tensorplay_graph.passes.normalize import normalize


@custom_op("tpg_cleanup_test::fill", mutates_args=("out",))
def fill(out: torch.Tensor, v: float) -> None:
    out.fill_(v)


@custom_op("tpg_cleanup_test::pure", mutates_args=())
def pure(x: torch.Tensor) -> torch.Tensor:
    return x + 1


fill.register_fake(lambda out, v: None)
pure.register_fake(lambda x: torch.empty_like(x))


def prepared(f, *inputs):
    gm = tpg.capture(f, *inputs)
    normalize(gm)
    barriers(gm)
    return gm


def names(gm):
    return [n.name for n in gm.graph.nodes]


def test_dce_removes_dead_pure_nodes_and_keeps_effects():
    def f(x, buf):
        dead = x.exp() * 2          # unread: removed
        pure(x)                     # unread pure custom op: removed
        fill(buf, 3.0)              # declared mutation: kept
        x.add_(1)                   # in-place method: kept
        return x + buf
    x, buf = torch.randn(3), torch.zeros(3)
    gm = prepared(f, x.clone(), buf.clone())
    removed = dce(gm)
    kept = names(gm)
    assert removed == 3, kept
    assert not any(n.startswith(("exp", "mul", "tpg_cleanup_test_pure")) for n in kept)
    assert any(n.startswith("tpg_cleanup_test_fill") for n in kept) and "add_" in kept
    a, b = x.clone(), buf.clone()
    torch.testing.assert_close(gm(a, b), f(x.clone(), buf.clone()))


def test_cse_merges_identical_pure_nodes():
    def f(x):
        return x.exp() + x.exp(), torch.sum(x, 0) * torch.sum(x, 0)
    x = torch.randn(3, 4)
    gm = prepared(f, x)
    assert cse(gm) == 2
    assert sum(1 for n in gm.graph.nodes if n.meta.get("prim") and n.meta["prim"].name == "exp") == 1
    torch.testing.assert_close(gm(x), f(x))


def test_cse_never_merges_across_a_mutation():
    def f(x):
        a = x * 2
        x.mul_(3)
        b = x * 2                   # same target and args as a, different value
        return a, b
    x = torch.randn(4)
    gm = prepared(f, x.clone())
    assert cse(gm) == 0
    torch.testing.assert_close(gm(x.clone()), f(x.clone()))


def test_cse_leaves_custom_ops_and_unknown_ops_alone():
    def f(x):
        return pure(x) + pure(x), torch.cumsum(x, 0) + torch.cumsum(x, 0)
    x = torch.randn(3)
    gm = prepared(f, x)
    before = len(gm.graph.nodes)
    cleanup(gm)
    assert len(gm.graph.nodes) == before
