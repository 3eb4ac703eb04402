"""What real Dynamo graphs hold: functorch scopes, higher-order ops, autocast / grad-mode
switches, aten targets, 0-d CPU tensors, structured outputs -- all equal eager."""

import collections
import dataclasses

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.triton.plan import (OperandError, operand_mover,  # noqa: E402
                                                   specialization)
from tensorplay_graph.capture.importers import import_fx_graph  # noqa: E402
from tensorplay_graph.compiler import torch_backend  # noqa: E402
from tensorplay_graph.passes.normalize import normalize  # noqa: E402


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def recorded(fn, *args, backends=("reference",)):
    """Compile ``fn`` through our Dynamo backend; returns (result, [(our graph, inputs)])."""
    seen = []

    def backend(gm, example_inputs):
        seen.append((import_fx_graph(gm), list(example_inputs)))
        return torch_backend(gm, example_inputs, options={"backends": list(backends)})

    return torch.compile(fn, backend=backend)(*args), seen


def model_like(x, w, scale):
    """vmap-built mask, autocast matmul, no_grad block, aten calls, a 0-d CPU constant."""
    mask = torch.vmap(lambda row, col: (row > col).float() * -1e4)(x[:, 0], x[:, 1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = x @ w
    with torch.no_grad():
        g = torch.ops.aten.relu(h.float()) * scale
    z = torch.ops.aten.add.Tensor(torch.ops.aten.sigmoid.default(g), 1.0)
    return z + mask[:, None], torch.is_grad_enabled()


@pytest.mark.parametrize("backend", ["reference", "tilelang", "auto"])
def test_model_like_program_equals_eager(backend):
    x, w, scale = torch.randn(6, 8), torch.randn(8, 8), torch.tensor(0.5)
    compiled = torch.compile(model_like, backend="tensorplay_graph",
                             options={"backends": [backend]} if backend != "auto" else None)
    got, want = compiled(x, w, scale), model_like(x, w, scale)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] is want[1] is True  # the no_grad block was left again


def test_scopes_and_switches_are_eager_fences_with_reasons():
    x, w, scale = torch.randn(6, 8), torch.randn(8, 8), torch.tensor(0.5)
    _, seen = recorded(model_like, x, w, scale)
    (gm, inputs), = seen
    plan = tpg.explain(gm, *inputs, backend="reference")
    reasons = {name: str(why) for name, why in plan.barriers.items()}
    vmap = [r for n, r in reasons.items() if n.startswith("vmap_scope")]
    autocast = [r for n, r in reasons.items() if n.startswith("autocast_scope")]
    assert vmap and "batched tensors" in vmap[0]
    assert autocast and "autocast's dtypes" in autocast[0]
    assert any("_set_grad_enabled" in r and "program order" in r for r in reasons.values())
    regions = [set(r.nodes) for r in plan.regions]
    assert not any(n.startswith(("vmap_scope", "autocast_scope", "_add_batch_dim")) for r in
                   regions for n in r), "no region holds a scope or a batched value"


def test_aten_targets_normalize_to_prims():
    def f(x):
        return torch.ops.aten.mul.Tensor(torch.ops.aten.relu(x), torch.ops.aten.exp.default(x))

    x = torch.randn(4, 8)
    got, seen = recorded(f, x)
    torch.testing.assert_close(got, f(x))
    gm = normalize(seen[0][0])
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert [n.meta["prim"].name for n in calls] == ["relu", "exp", "mul"]


def test_higher_order_ops_run_eagerly_with_a_reason():
    def f(x):
        return torch.cond(x.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), (x * 2,)) + 1

    seen = []

    def backend(gm, example_inputs):
        seen.append((import_fx_graph(gm), list(example_inputs)))
        return torch_backend(gm, example_inputs, options={"backends": ["reference"]})

    compiled = torch.compile(f, backend=backend)
    for x in (torch.randn(5, 3).abs(), -torch.randn(5, 3).abs()):  # both branches, one graph
        torch.testing.assert_close(compiled(x), f(x))
    assert len(seen) == 1
    gm, inputs = seen[0]
    reasons = [str(r) for r in tpg.explain(gm, *inputs, backend="reference").barriers.values()]
    assert any("higher-order op cond runs its subgraphs eagerly" in r for r in reasons)


Pair = collections.namedtuple("Pair", "relu doubled")


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: tuple


def test_structured_outputs_keep_their_types():
    def f(x):
        return {"pair": Pair(x.relu(), x * 2), "out": Output(x.sum(-1), (x, x + 1)), "none": None}

    x = torch.randn(3, 4)
    compiled = torch.compile(f, backend="tensorplay_graph", options={"backends": ["reference"]})
    got, want = compiled(x), f(x)
    assert isinstance(got["pair"], Pair) and isinstance(got["out"], Output) and got["none"] is None
    torch.testing.assert_close(got["pair"].doubled, want["pair"].doubled)
    torch.testing.assert_close(got["out"].hidden[1], want["out"].hidden[1])
    assert got["out"].hidden[0] is x


def test_zero_dim_cpu_operand_next_to_another_device_is_a_scalar_operand():
    # "meta" stands in for CUDA: the rule is the same (kernel device = first non-0-d-CPU operand).
    big, scalar = torch.empty(4, 8, device="meta"), torch.tensor(2.5)
    move = operand_mover((big, scalar))
    moved = move((big, scalar))
    assert moved[0] is big and moved[1].device.type == "meta" and moved[1].shape == ()
    assert operand_mover((torch.randn(3), scalar)) is None  # same device: nothing to do
    with pytest.raises(OperandError, match="is on cpu but the kernel runs on meta"):
        operand_mover((big, torch.randn(3)))  # a 1-d CPU tensor is not a scalar operand


def test_specialization_is_built_once_per_operand_key_and_operands_are_moved():
    big, scalar = torch.empty(4, 8, device="meta"), torch.tensor(2.5)
    specs, built = {}, []

    def build(tensors):
        built.append(tuple(t.device.type for t in tensors))
        return len(built)

    for _ in range(2):  # the second call hits the cache and still moves the scalar
        spec, moved = specialization(specs, (big, scalar), "k", build)
        assert spec == 1 and moved[0] is big and moved[1].device.type == "meta"
    assert built == [("meta", "meta")]
    spec, moved = specialization(specs, (big[:2], scalar), "k", build)  # another shape
    assert spec == 2 and len(specs) == 2
