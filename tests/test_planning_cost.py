"""Planning cost: one supports() verdict per node, lint only in debug / test mode, fast paths
that answer exactly as the general ones (prim binding, tensor metadata, source locations)."""

import inspect
import operator

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg
from tensorplay_graph import prims
from tensorplay_graph.backends.reference import ReferenceBackend
from tensorplay_graph.errors import GraphLintError
from tensorplay_graph.frameworks import tensor_meta
from tensorplay_graph.ir import Graph, GraphModule, TensorMeta
from tensorplay_graph.ir.lint import lint_enabled
from tensorplay_graph.library import custom_op
from tensorplay_graph.passes.barriers import barriers
from tensorplay_graph.passes.manager import PassManager
from tensorplay_graph.passes.normalize import normalize
from tensorplay_graph.passes.partition import partition
from tensorplay_graph.passes.pipeline import compile_graph
from tensorplay_graph.passes.shape_prop import shape_prop


@custom_op("tpg_planning_cost::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


opaque.register_fake(lambda x: x.new_empty(x.shape))


class CountingReference(ReferenceBackend):
    """The reference backend, counting the supports() questions per node."""

    def __init__(self):
        super().__init__()
        self.asked = {}

    def supports(self, node):
        self.asked[node.name] = self.asked.get(node.name, 0) + 1
        return super().supports(node)


def program(x, y):
    for i in range(12):
        x = opaque(x) if i % 5 == 4 else (x * y if i % 2 else torch.tanh(x) + 1)
    return x


def planned(backend):
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    gm = tpg.capture(program, x, y)
    normalize(gm)
    shape_prop(gm, x, y)
    barriers(gm, [backend])
    return gm


def test_partition_reuses_the_barriers_verdict():
    backend = CountingReference()
    gm = planned(backend)
    regions = partition(gm, [backend])
    claimable = [n.name for n in gm.graph.nodes if n.meta.get("backend") == "reference"]
    assert regions and claimable
    assert all(backend.asked[name] == 1 for name in claimable), backend.asked
    assert not any("claim" in n.meta for n in gm.graph.nodes)  # used once, then dropped
    # The same plan as a partition that asks afresh (other backend objects).
    fresh = CountingReference()
    gm2 = planned(CountingReference())
    regions2 = partition(gm2, [fresh])
    assert all(fresh.asked[name] == 1 for name in claimable)
    assert [r.names for r in regions] == [r.names for r in regions2]


def test_lint_runs_in_debug_or_test_mode_only(monkeypatch, tmp_path):
    def breaks(gm):
        nodes = list(gm.graph.nodes)
        nodes[1].prepend(nodes[2])  # use before definition: lint catches it

    def small():
        g = Graph()
        x = g.placeholder("x")
        g.output(g.call_function(operator.mul, (g.call_function(operator.add, (x, 1)), 2)))
        return GraphModule({}, g)

    monkeypatch.delenv("TPG_LINT", raising=False)
    monkeypatch.delenv("TPG_DEBUG_DIR", raising=False)
    assert not lint_enabled() and not PassManager([breaks]).lint
    PassManager([breaks])(small())  # production default: no lint
    with pytest.raises(GraphLintError, match="after pass 'breaks'"):
        PassManager([breaks], debug_dir=tmp_path)(small())
    monkeypatch.setenv("TPG_LINT", "1")
    assert lint_enabled()
    with pytest.raises(GraphLintError, match="after pass 'breaks'"):
        PassManager([breaks])(small())
    monkeypatch.setenv("TPG_LINT", "0")
    assert not lint_enabled()


def test_pipeline_without_lint_matches_eager(monkeypatch):
    monkeypatch.delenv("TPG_LINT", raising=False)
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    managers = []
    module = compile_graph(tpg.capture(program, x, y), (x, y), manager_out=managers)
    assert not managers[0].lint and set(managers[0].cpu_timings) == set(managers[0].timings)
    torch.testing.assert_close(module(x, y), program(x, y))


@pytest.mark.parametrize("prim", prims.all_prims(), ids=lambda p: p.name)
def test_prim_bind_agrees_with_inspect(prim):
    names = list(prim._sig.parameters)
    calls = [((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), (tuple(range(9)), {}),
             ((), {names[0]: 1} if names else {}), ((1,), {names[-1]: 2} if names else {}),
             ((1,), {names[0]: 1} if names else {}), ((1,), {"not_a_parameter": 1})]
    for args, kwargs in calls:
        try:
            bound = prim._sig.bind(*args, **kwargs)
            bound.apply_defaults()
            expected = list(bound.arguments.items())
        except TypeError:
            expected = TypeError
        try:
            got = list(prim.bind(args, kwargs).items())
        except TypeError:
            got = TypeError
        assert got == expected, (args, kwargs)


def test_tensor_meta_fast_constructor_equals_the_checked_one():
    x = torch.randn(6, 8, dtype=torch.float64)[:, ::2]
    meta = tensor_meta(x)
    assert meta == TensorMeta(tuple(x.shape), "float64", str(x.device), tuple(x.stride()))
    assert meta.stride == (8, 2) and hash(meta) == hash(TensorMeta((6, 4), "float64", "cpu", (8, 2)))
    assert TensorMeta.of_ints((2, 3), "int32", "cpu", (3, 1), False) == TensorMeta((2, 3), "int32")


def test_stack_names_the_user_line_of_every_node():
    def helper(v):
        return v * 3  # the recorded line for the mul

    def fn(x):
        y = torch.relu(x)
        return helper(y)

    gm = tpg.capture(fn, torch.randn(3))
    lines = {n.name: n.meta["stack"] for n in gm.graph.nodes if n.op == "call_function"}
    relu_line = inspect.getsourcelines(fn)[1] + 1
    mul_line = inspect.getsourcelines(helper)[1] + 1
    assert lines["relu"] == f"{__file__}:{relu_line} in fn"
    assert lines["mul"] == f"{__file__}:{mul_line} in helper"


def test_inplace_spelling_is_seen_after_the_same_target_out_of_place():
    """Capture remembers in-place verdicts per target; a later in-place spelling of that
    target (``inplace=True`` by position, ``out=``) must still be seen: the caller's
    tensors stay untouched and the graph computes what eager computes."""
    relu = torch.nn.functional.relu

    def fn(x, out):
        y = relu(x) + torch.add(x, 1)  # plain calls: verdicts remembered
        relu(x, True)                   # same target, in place by position
        torch.add(y, 2, out=out)        # same target, writes into `out`
        return y + x + out

    x, out = torch.randn(8), torch.zeros(8)
    x_before, out_before = x.clone(), out.clone()
    gm = tpg.capture(fn, x, out)
    assert torch.equal(x, x_before) and torch.equal(out, out_before)
    torch.testing.assert_close(gm(x.clone(), out.clone()), fn(x.clone(), out.clone()))


def test_graph_framework_is_remembered_until_the_graph_changes():
    from tensorplay_graph.passes.normalize import graph_framework

    def tensorplay_function(x):
        return x

    tensorplay_function.__module__ = "tensorplay.functional"
    g = Graph()
    x = g.placeholder("x")
    y = g.call_function(operator.add, (x, 1))
    assert graph_framework(g) == "torch"  # operators only: torch by default
    assert graph_framework(g) == "torch"  # remembered
    with g.inserting_before(y):
        g.call_function(tensorplay_function, (x,))
    assert graph_framework(g) == "tensorplay"  # an edit forgets the answer
