"""Dynamo's symbolic graphs: accepted without specializing a size, lowered per concrete shape."""

import pytest

torch = pytest.importorskip("torch")

from tensorplay_graph.compiler import torch_backend  # noqa: E402
from tensorplay_graph.dynamic_shapes import ShapeSpecializingProgram  # noqa: E402


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def attention_like(x, w):
    h = torch.nn.functional.gelu(x @ w) * x.shape[1] ** -0.5   # a size used as a scalar
    scores = (h + 1).softmax(-1)
    return scores * h.sum(-1, keepdim=True), x.shape[1] * 2


def counting_backend(backends, graphs):
    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch_backend(gm, example_inputs, options={"backends": backends})
    return backend


@pytest.mark.parametrize("dynamic, backends, most", [
    (None, ["reference"], 2),     # automatic dynamic: static first, symbolic after one change
    (True, ["tilelang"], 1),      # symbolic from the start; tilelang's C target lowers it
])
def test_ten_sequence_lengths_compile_at_most_twice(dynamic, backends, most):
    graphs = []
    compiled = torch.compile(attention_like, backend=counting_backend(backends, graphs),
                             dynamic=dynamic)
    w = torch.randn(16, 16)
    for length in range(3, 13):
        x = torch.randn(2, length, 16)
        got, want = compiled(x, w), attention_like(x, w)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    assert 1 <= len(graphs) <= most


def test_symbolic_graph_is_not_specialized_by_the_import():
    graphs = []
    compiled = torch.compile(attention_like, backend=counting_backend(["reference"], graphs),
                             dynamic=True)
    w = torch.randn(16, 16)
    compiled(torch.randn(2, 5, 16), w)
    x = torch.randn(3, 9, 16)   # batch and length both change: the same graph serves
    torch.testing.assert_close(compiled(x, w)[0], attention_like(x, w)[0])
    assert len(graphs) == 1


def test_shape_cache_is_bounded_and_keyed_by_signature():
    built = []

    def build(args):
        built.append(tuple(a.shape for a in args))
        return lambda *a: a[0] * 2

    program = ShapeSpecializingProgram(build, limit=2)
    for n in (3, 4, 3, 5, 3, 4):
        torch.testing.assert_close(program(torch.ones(n)), torch.full((n,), 2.0))
    # 3, 4 built; 3 hit; 5 evicts 4 (least recently used); 3 hit; 4 rebuilt
    assert [s[0][0] for s in built] == [3, 4, 5, 4]
    with pytest.raises(ValueError, match="shape_cache_size"):
        ShapeSpecializingProgram(build, limit=0)
