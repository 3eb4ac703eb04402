"""explain(): regions, barriers, declined reasons, kernels, report text, drawing."""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg
from tensorplay_graph.library import custom_op


@custom_op("tpg_explain_test::shift", mutates_args=())
def shift(x: torch.Tensor) -> torch.Tensor:
    return x + 10


shift.register_fake(lambda x: torch.empty_like(x))


def f(x, w):
    a = (x.exp() + 1) * 2
    b = shift(a)
    c = (b.relu() - a).sum(dim=1)
    return c, x @ w


X, W = torch.randn(4, 8), torch.randn(8, 3)


def test_regions_barriers_and_kernels_on_reference():
    e = tpg.explain(f, X, W, backend="reference")
    assert e.backends == ["reference"]
    assert [r.nodes for r in e.regions] == [["exp", "add", "mul"], ["relu", "sub", "sum_"]]
    assert [r.backend for r in e.regions] == ["reference", "reference"]
    assert e.regions[1].inputs == ["tpg_explain_test_shift", "mul"]
    assert e.barrier_codes == {"tpg_explain_test_shift": "custom_op", "matmul": "unsupported"}
    assert "tpg_explain_test::shift" in e.barriers["tpg_explain_test_shift"]
    assert "reference" in e.declined["matmul"]
    assert set(e.kernels) == {0, 1} and all("def kernel(" in k.source for k in e.kernels.values())
    text = str(e)
    for piece in ("region 0 [reference]: exp, add, mul", "region 1 [reference]",
                  "tpg_explain_test_shift: custom_op:", "matmul: unsupported:"):
        assert piece in text, text


def test_render_draws_clusters_and_barrier_reasons():
    e = tpg.explain(f, X, W, backend="reference")
    source = e.render().source
    assert "cluster_region_0" in source and "cluster_region_1" in source
    name = "tpg_explain_test_shift"
    shift = next(line for line in source.splitlines() if line.strip().startswith(name + " "))
    reason = e.barriers[name].split(": ", 1)[1]  # "code: reason"
    assert "barrier: custom_op" in shift and f'tooltip="{reason}"' in shift


def test_triton_plan_on_cpu():
    e = tpg.explain(f, X, W, backend="triton", compile_kernels=False)
    if "triton" in e.missing_backends:  # not importable here: said so, planned without it
        assert "'triton' is not available here" in str(e) and not e.regions
        return
    assert e.planned_device == "cuda" and "'cuda'" in str(e)
    assert [r.nodes for r in e.regions] == [["exp", "add", "mul"], ["relu", "sub", "sum_"]]
    assert {r.backend for r in e.regions} == {"triton"}
    assert e.barrier_codes["tpg_explain_test_shift"] == "custom_op"
    as_given = tpg.explain(f, X, W, backend="triton", assume_device=False, compile_kernels=False)
    assert not as_given.regions and "cpu" in as_given.declined["exp"]["triton"]


def test_unavailable_backend_is_reported_not_fatal(monkeypatch):
    from tensorplay_graph.backends import registry
    monkeypatch.setitem(registry._BUILTIN, "nosuch", "tensorplay_graph.backends.no_such_module")
    e = tpg.explain(f, X, W, backend=["nosuch", "reference"])
    assert "nosuch" in e.missing_backends and e.backends == ["reference"]
    assert "'nosuch' is not available here" in str(e)
    assert len(e.regions) == 2


def test_unknown_backend_name_raises():
    with pytest.raises(ValueError, match="no backend named 'nosuch'"):
        tpg.explain(f, X, W, backend=["nosuch", "reference"])


def test_graph_module_input_is_not_modified():
    gm = tpg.capture(f, X, W)
    before = [n.name for n in gm.graph.nodes]
    e = tpg.explain(gm, X, W, backend="reference")
    assert [n.name for n in gm.graph.nodes] == before and e.regions
    assert all("region" not in n.meta for n in gm.graph.nodes)


@pytest.mark.parametrize("called", [False, True])
def test_a_compiled_function_is_explained_as_its_own_function(called):
    # explain / capture of what tpg.compile returned trace the wrapped function; tracing the
    # wrapper ran its compiled program on the tracer's values (NameError in generated code)
    def loss(x, t):
        return torch.nn.functional.cross_entropy(x.float(), t)
    x, t = torch.randn(8, 16, dtype=torch.bfloat16, requires_grad=True), torch.randint(0, 16, (8,))
    compiled = tpg.compile(loss)
    if called:
        compiled(x, t).backward()
    want = tpg.explain(loss, x, t, backend="reference")
    got = tpg.explain(compiled, x, t, backend="reference")
    assert [r.names for r in got.regions] == [r.names for r in want.regions]
    assert tpg.capture(compiled, x, t).code == tpg.capture(loss, x, t).code
