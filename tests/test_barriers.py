"""Every barrier reason, each on a real captured program that triggers it."""

import pytest

torch = pytest.importorskip("torch")
tp = pytest.importorskip("tensorplay")

import tensorplay_graph as tpg
from tensorplay_graph.library import custom_op, tile_lang_op, triton_op
from tensorplay_graph.passes.barriers import CODES, Barrier, barriers
from tensorplay_graph.passes.normalize import normalize
from tensorplay_graph.passes.shape_prop import shape_prop


@custom_op("tpg_barrier_test::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@custom_op("tpg_barrier_test::bump", mutates_args=("x",))
def bump(x: torch.Tensor) -> None:
    x.add_(1)


@triton_op("tpg_barrier_test::tri", mutates_args=())
def tri(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@tile_lang_op("tpg_barrier_test::tile", mutates_args=())
def tile(x: torch.Tensor) -> torch.Tensor:
    return x - 1


for _op in (opaque, tri, tile):
    _op.register_fake(lambda x: torch.empty_like(x))
bump.register_fake(lambda x: None)


def plan(fn, *inputs, backends=("reference",)):
    gm = tpg.capture(fn, *inputs)
    normalize(gm)
    shape_prop(gm, *inputs)
    barriers(gm, backends)
    return {n.name: n.meta.get("barrier") for n in gm.graph.nodes}, gm


def only_barrier(found, code):
    hits = {name: b for name, b in found.items() if b is not None and b.code == code}
    assert len(hits) == 1, f"expected one {code} barrier, got {found}"
    return next(iter(hits.values()))


X = torch.randn(4, 8)


def test_custom_op_is_opaque_barrier():
    found, _ = plan(lambda x: opaque(x.exp()).relu(), X)
    b = only_barrier(found, "custom_op")
    assert "tpg_barrier_test::opaque" in b.reason and not b.fence
    assert found["exp"] is None and found["relu"] is None


def test_tensorplay_library_custom_op_is_opaque_barrier():
    import tensorplay.library as tlib

    op = tlib.custom_op("tpg_barrier_tp::twice", lambda x: x * 2, mutates_args=())
    op.register_fake(lambda x: tp.empty_like(x))
    found, _ = plan(lambda x: op(x.exp()), tp.randn(4, 8))
    assert "tpg_barrier_tp::twice" in only_barrier(found, "custom_op").reason


def test_triton_op_and_tile_lang_op():
    found, _ = plan(lambda x: tile(tri(x)), X)
    assert "tpg_barrier_test::tri" in only_barrier(found, "triton_op").reason
    assert "tpg_barrier_test::tile" in only_barrier(found, "tile_lang_op").reason


def test_declared_mutation_is_fence():
    def f(x):
        y = x * 2
        bump(y)
        return y + 1
    found, _ = plan(f, X)
    b = only_barrier(found, "mutation")
    assert b.fence and "mutates x" in b.reason


def test_inplace_method_and_out_kwarg_are_mutations():
    found, _ = plan(lambda x: x.mul(2).add_(1), X)
    assert "Tensor.add_" in only_barrier(found, "mutation").reason

    def with_out(x, out):
        torch.add(x, 1, out=out)
        return out * 2
    found, _ = plan(with_out, X, torch.empty(4, 8))
    assert "out=" in only_barrier(found, "mutation").reason


import torch.nn.functional as TF  # noqa: E402
import tensorplay.nn.functional as PF  # noqa: E402

P = tp.randn(4, 8)
# (program, inputs, node name, prim, barrier code): real records, real captured programs.
FLAGGED = [
    (lambda x: torch.rand_like(x) + x, (X,), "rand_like", "rand_like", "random"),
    (lambda x: torch.randn_like(x) * x, (X,), "randn_like", "randn_like", "random"),
    (lambda x: torch.bernoulli(x.sigmoid()), (X,), "bernoulli", "bernoulli", "random"),
    (lambda x: x.sigmoid().bernoulli(), (X,), "bernoulli", "bernoulli", "random"),
    (lambda x: TF.dropout(x.exp(), 0.3, True), (X,), "dropout", "dropout", "random"),
    (lambda x: torch.multinomial(x.abs() + 0.1, 2), (X,), "multinomial", "multinomial", "random"),
    (lambda x: torch.normal(x, 1.0), (X,), "normal", "normal", "random"),
    (lambda x: tp.rand_like(x) + x, (P,), "rand_like", "rand_like", "random"),
    (lambda x: tp.randn_like(x) + x, (P,), "randn_like", "randn_like", "random"),
    (lambda x: PF.dropout(x.exp(), 0.3, True), (P,), "dropout", "dropout", "random"),
    (lambda x: torch.nonzero(x.relu()), (X,), "nonzero", "nonzero", "data_dependent"),
    (lambda x: x.relu().nonzero(), (X,), "nonzero", "nonzero", "data_dependent"),
    (lambda x: x.round().unique(), (X,), "unique", "unique", "data_dependent"),
    (lambda x: torch.masked_select(x, x > 0), (X,), "masked_select", "masked_select",
     "data_dependent"),
    (lambda x: torch.argwhere(x.relu()), (X,), "argwhere", "argwhere", "data_dependent"),
    (lambda x: torch.bincount(x[0].abs().long()), (X,), "bincount", "bincount", "data_dependent"),
    (lambda x: tp.nonzero(x.relu()), (P,), "nonzero", "nonzero", "data_dependent"),
    (lambda x: tp.masked_select(x, x > 0), (P,), "masked_select", "masked_select",
     "data_dependent"),
]


@pytest.mark.parametrize("fn,inputs,name,prim,code", FLAGGED,
                         ids=[f"{c[3]}-{type(c[1][0]).__module__.split('.')[0]}-{i}"
                              for i, c in enumerate(FLAGGED)])
def test_flagged_prims_are_barriers(fn, inputs, name, prim, code):
    found, gm = plan(fn, *inputs)
    b = only_barrier(found, code)
    node = next(n for n in gm.graph.nodes if found.get(n.name) is b)
    assert node.meta["prim"].name == prim and prim in b.reason
    assert b.fence == (code == "random")
    others = {k: v for k, v in found.items() if v is not None and v is not b}
    assert all(v.code in ("no_prim", "unsupported") for v in others.values()), others


def test_item_and_tolist_from_fx_are_data_dependent():
    fx = pytest.importorskip("torch.fx")
    from tensorplay_graph.capture.importers import import_fx_graph

    gm = import_fx_graph(fx.symbolic_trace(lambda x: (x * x.sum().item(), x.tolist())))
    normalize(gm)
    shape_prop(gm, X)
    barriers(gm, ["reference"])
    codes = {n.name: getattr(n.meta.get("barrier"), "code", None) for n in gm.graph.nodes}
    assert codes["item"] == "data_dependent" and codes["tolist"] == "data_dependent"


def test_eval_dropout_is_identity_not_random():
    found, gm = plan(lambda x: TF.dropout(x.exp(), 0.3, False) + 1, X)
    assert all(b is None or b.code != "random" for b in found.values()), found
    node = next(n for n in gm.graph.nodes if n.name == "dropout")
    assert node.meta["prim"].name == "dropout" and not node.meta["barrier"].fence
    assert node.meta["barrier"].code == "unsupported"  # no backend lowers an alias
    found, _ = plan(lambda x: TF.dropout(x.exp(), 0.3, False) + 1, X, backends=())
    assert found["dropout"] is None


def test_assert_is_side_effect_fence():
    found, gm = plan(lambda x: (torch._assert(x.sum() > -1e9, "too small"), x + 1)[1], X)
    b = only_barrier(found, "side_effect")
    assert b.fence and "assert" in b.reason
    from tensorplay_graph.passes.pipeline import compile_graph

    fn = lambda x: (torch._assert(x.sum() > -1e9, "too small"), x + 1)[1]  # noqa: E731
    compiled = compile_graph(tpg.capture(fn, X), (X,), backends=["reference"])
    assert any(n.target is torch._assert for n in compiled.graph.nodes)  # cleanup kept it
    assert torch.equal(compiled(X), X + 1)
    with pytest.raises(Exception, match="too small"):
        compiled(torch.full((4, 8), -1e9))


def test_no_prim_names_op_and_fix():
    found, _ = plan(lambda x: torch.cumsum(x, 0).exp(), X)
    b = only_barrier(found, "no_prim")
    assert "cumsum" in b.reason and "tensorplay_graph/prims" in b.reason


def test_unsupported_names_each_backend_and_reason():
    class NoFloat64:
        name = "nof64"

        def supports(self, node):
            return "float64 is not supported here"

        def compile(self, region):
            raise AssertionError("never compiled")

    # bfloat16: NumPy has no such type, so the reference backend declines it too
    found, gm = plan(lambda x: x.to(torch.bfloat16).exp(), X, backends=[NoFloat64(), "reference"])
    unsupported = {k: b for k, b in found.items() if b is not None and b.code == "unsupported"}
    assert unsupported, found
    reason = next(iter(unsupported.values())).reason
    assert "nof64: float64 is not supported here" in reason and "reference:" in reason
    node = next(n for n in gm.graph.nodes if n.name in unsupported)
    assert set(node.meta["declined"]) == {"nof64", "reference"}


def test_no_backends_means_no_unsupported_barrier():
    found, _ = plan(lambda x: x.to(torch.bfloat16).exp(), X, backends=())
    assert all(b is None for b in found.values())


def test_barrier_record():
    b = Barrier("custom_op", "because")
    assert str(b) == "custom_op: because" and set(CODES) >= {"custom_op", "no_prim"}
    with pytest.raises(ValueError, match="must be one of"):
        Barrier("nope", "x")
    with pytest.raises(Exception):
        b.code = "random"  # frozen
