"""Programs that write into their inputs or module state: compiled == eager, one write per call."""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg
from tensorplay_graph.ir.effects import is_inplace
from tensorplay_graph.passes.barriers import barrier_of
from tensorplay_graph.passes.normalize import normalize

BACKENDS = ["reference", "interpreter"]


def add_in_place(x):
    y = x * 2
    x.add_(1)
    return y + x * 3


def set_slice(x):
    y = x * 2
    x[1:3] = 5.0
    return y + x


def set_item_of_temporary(x):
    y = x + 1
    y[0] = 7.0
    return y * 2


class CountingBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(3))

    def forward(self, x):
        self.calls.add_(1)
        return x + self.calls


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program", [add_in_place, set_slice, set_item_of_temporary])
def test_input_mutation_happens_once_and_in_order(program, backend):
    x, x_eager = torch.arange(4.0), torch.arange(4.0)
    out = tpg.compile(program, backend=backend)(x)
    expected = program(x_eager)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, x_eager)  # the first (compiling) call wrote once


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_buffer_mutation_happens_once_per_call(backend):
    module, eager = CountingBuffer(), CountingBuffer()
    compiled = tpg.compile(module, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(compiled(torch.zeros(3)), eager(torch.zeros(3)))
        torch.testing.assert_close(module.calls, eager.calls)


def test_setitem_is_a_mutation_fence():
    gm = normalize(tpg.capture(set_slice, torch.zeros(4)))
    node = next(n for n in gm.graph.nodes if n.target is __import__("operator").setitem)
    assert is_inplace(node)
    barrier = barrier_of(node, ())
    assert barrier.code == "mutation" and barrier.fence
