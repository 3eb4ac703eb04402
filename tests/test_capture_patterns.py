"""TensorPlay's decomposed GELU comes back as one gelu call; near-misses stay as they are."""

import math
import operator

import pytest

tp = pytest.importorskip("tensorplay")

import tensorplay.nn as nn  # noqa: E402

from tensorplay_graph.capture.importers import import_tensorplay_graph  # noqa: E402
from tensorplay_graph.capture.patterns import fold_erf_gelu  # noqa: E402
from tensorplay_graph.ir import Graph  # noqa: E402


def _erf_gelu_graph(inv_sqrt2=1 / math.sqrt(2.0), half=0.5, reuse_half=False):
    g = Graph()
    x = g.placeholder("x")
    scaled = g.call_function(operator.mul, (x, inv_sqrt2))
    erf = g.call_method("erf", (scaled,))
    plus = g.call_function(operator.add, (1, erf))
    h = g.call_function(operator.mul, (plus, half))
    out = g.call_function(operator.mul, (h, x))
    g.output((out, h) if reuse_half else out)
    return g


def gelu(x):
    return x


def test_the_pattern_folds_in_any_operand_order():
    g = _erf_gelu_graph()
    assert fold_erf_gelu(g, gelu) == 1
    calls = [n for n in g.nodes if n.op.startswith("call")]
    assert [n.target for n in calls] == [gelu] and calls[0].args == (list(g.nodes)[0],)


@pytest.mark.parametrize("kwargs", [{"inv_sqrt2": 0.7}, {"half": 0.25}, {"reuse_half": True}])
def test_near_misses_are_left_alone(kwargs):
    g = _erf_gelu_graph(**kwargs)
    before = [n.target for n in g.nodes]
    assert fold_erf_gelu(g, gelu) == 0
    assert [n.target for n in g.nodes] == before


def test_tp_compile_hands_us_one_gelu_and_results_equal_eager():
    imported = []

    def spy(gm, example_inputs, **kwargs):
        imported.append(import_tensorplay_graph(gm))
        from tensorplay_graph.compiler import tensorplay_backend
        return tensorplay_backend(gm, example_inputs, **kwargs)

    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    x = tp.randn(4, 16)
    out = tp.compile(model, backend=spy)(x)
    assert tp.allclose(out, model(x), atol=1e-6)
    names = [getattr(n.target, "__name__", n.target) for n in imported[0].graph.nodes
             if n.op.startswith("call")]
    assert names == ["linear", "gelu", "linear"]
    fast = tp.compile(model, backend="tensorplay_graph")
    assert tp.allclose(fast(x), model(x), atol=1e-6)
