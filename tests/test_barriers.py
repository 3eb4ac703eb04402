"""Every barrier reason, each on a real captured program that triggers it."""

import pytest

torch = pytest.importorskip("torch")
tp = pytest.importorskip("tensorplay")

import tensorplay_graph as tpg
from tensorplay_graph import prims
from tensorplay_graph.library import custom_op, tile_lang_op, triton_op
from tensorplay_graph.passes.barriers import CODES, Barrier, barriers
from tensorplay_graph.passes.normalize import normalize
from tensorplay_graph.passes.shape_prop import shape_prop
from tensorplay_graph.prims.record import Prim


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


@pytest.fixture
def flagged_prim():
    """A prim record carrying a barrier flag, for ops the prim table does not flag (yet)."""
    added = []

    def ensure(name, spelling, **flags):
        existing = prims._REGISTRY.get(name)
        if existing is not None:
            assert all(getattr(existing, k) == v for k, v in flags.items()), existing
            return existing
        record = Prim(name=name, kind="opaque", signature=lambda a, *rest, **kw: None,
                      meta=lambda **kw: None, spellings=(spelling,), **flags)
        prims.register(record)
        added.append(name)
        return record

    yield ensure
    for name in added:  # test-only records must not leak into other tests
        prims._REGISTRY.pop(name)
    prims._TABLES.clear()


def test_data_dependent(flagged_prim):
    flagged_prim("nonzero", "torch:nonzero", data_dependent=True)
    found, _ = plan(lambda x: torch.nonzero(x.relu()), X)
    b = only_barrier(found, "data_dependent")
    assert "nonzero" in b.reason and not b.fence


def test_random_is_fence(flagged_prim):
    flagged_prim("rand_like", "torch:rand_like", random=True)
    found, _ = plan(lambda x: torch.rand_like(x) + x, X)
    b = only_barrier(found, "random")
    assert b.fence and "random" in b.reason


def test_side_effect_is_fence(flagged_prim):
    flagged_prim("manual_seed_like", "torch:set_printoptions", side_effect=True)
    record = prims._REGISTRY["manual_seed_like"]
    found, gm = plan(lambda x: x + 1, X)
    node = next(n for n in gm.graph.nodes if n.name == "add")
    node.meta["prim"] = record  # a prim flagged side_effect, whatever its spelling
    barriers(gm, ["reference"])
    assert node.meta["barrier"].code == "side_effect" and node.meta["barrier"].fence


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
