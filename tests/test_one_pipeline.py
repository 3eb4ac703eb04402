"""One pipeline, one verdict: explain() and compile run the same planning passes, over one
backend preference list, and each backend's supports() is asked once per node."""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.reference import ReferenceBackend  # noqa: E402
from tensorplay_graph.backends.registry import PREFERENCE, try_resolve_backends  # noqa: E402
from tensorplay_graph.library import custom_op  # noqa: E402
from tensorplay_graph.passes.pipeline import PASS_NAMES, PLANNING_PASSES, compile_graph  # noqa: E402


@custom_op("tpg_one_pipeline::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


opaque.register_fake(lambda x: x.new_empty(x.shape))


class Counting:
    """Wraps a backend; counts supports() per node name (declining all when ``decline``)."""

    def __init__(self, backend, name, decline=False):
        self.inner, self.name, self.decline, self.asked = backend, name, decline, {}

    def supports(self, node):
        self.asked[node.name] = self.asked.get(node.name, 0) + 1
        return "declines everything" if self.decline else self.inner.supports(node)

    def compile(self, region):
        return self.inner.compile(region)


def program(x, y):
    a = torch.tanh(x * y) + 1
    b = opaque(a)                       # a custom-op barrier: no backend is asked
    return (b - a).sum(1), torch.nn.functional.gelu(b)


def backends():
    return [Counting(ReferenceBackend(), "first", decline=True),
            Counting(ReferenceBackend(), "second")]


def _calls(gm):
    return {n.name for n in gm.graph.nodes if n.op in ("call_function", "call_method")}


def _assert_once(chain, calls):
    for backend in chain:
        assert backend.asked and set(backend.asked) <= calls, (backend.name, backend.asked)
        assert all(count == 1 for count in backend.asked.values()), (backend.name, backend.asked)
        # a custom-op barrier that no backend may run is not asked about
        assert not any("opaque" in name for name in backend.asked)


def test_compile_asks_each_backend_once_per_node():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    chain = backends()
    gm = tpg.capture(program, x, y)
    calls = _calls(gm)
    module = compile_graph(gm, (x, y), backends=chain)
    _assert_once(chain, calls)
    assert set(chain[1].asked) == set(chain[0].asked)  # the first declined, the second answered
    for got, want in zip(module(x, y), program(x, y)):
        torch.testing.assert_close(got, want)


def test_explain_asks_each_backend_once_per_node_and_plans_as_compile_does():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    chain = backends()
    plan = tpg.explain(program, x, y, backend=chain, assume_device=False)
    _assert_once(chain, _calls(plan.graph_module))
    lowered = compile_graph(tpg.capture(program, x, y), (x, y), backends=backends())
    kernels = [n for n in lowered.graph.nodes if "kernel" in n.meta]
    assert len(kernels) == len(plan.regions) == len(plan.kernels) > 0


def test_explain_runs_the_planning_passes_of_the_pipeline():
    x = torch.randn(4, 8)
    plan = tpg.explain(lambda t: t.exp() + 1, x, backend="reference")
    assert tuple(plan.timings) == PLANNING_PASSES == PASS_NAMES[:PASS_NAMES.index("partition") + 1]
    # Planning another device's backend re-labels the tensors right before the first pass
    # that decides by device (decompose's cuBLASLt rewrite, channels_last, then the
    # backends); the rest is the same list.
    relabelled = tpg.explain(lambda t: t.exp() + 1, x, backend="reference", assume_device="cuda")
    names = list(relabelled.timings)
    assert names.pop(names.index("assume_device")) and tuple(names) == PLANNING_PASSES
    assert list(relabelled.timings).index("assume_device") == \
        PLANNING_PASSES.index("decompose")


def test_one_backend_preference_list():
    plan = tpg.explain(lambda t: t.exp(), torch.randn(4, 8), compile_kernels=False)
    usable, _missing = try_resolve_backends(PREFERENCE)
    assert plan.backends == [b.name for b in usable]
    assert list(PREFERENCE) == ["triton", "tilelang", "reference"]
