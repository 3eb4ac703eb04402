"""A write into an input or a constant through a view of it (``x[1:].zero_()``,
``v = x.movedim(0, 0); v[0] = 0``) keeps CUDA graphs off, as a direct write does: a replay
reads the graph's private copy of a moved input, so the caller's tensor would not change
(GPU fuzz seeds 101000002, 101000055, 101000201, 101010260). Planned for the CPU, replayed
by the stand-in of ``tests/test_cuda_graphs.py``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.cuda_graph_policy import written_constants  # noqa: E402
from tensorplay_graph.backends.cuda_graphs import decide  # noqa: E402

from test_cuda_graphs import CpuGraphs, lowered, plan_on_cpu  # noqa: E402


def _slice_zero(x):
    x[1:].zero_()
    return x * 2


def _setitem_through_movedim(x):
    v = x.movedim(0, 0)
    v[0] = 0
    return x.sum(1)


def _transposed_mul(x):
    x.t().mul_(-1.0)
    return x + 1


def _view_of_view_fill(x):
    x.view(-1)[:3].fill_(7.0)
    return x.amax(0)


VIEW_WRITES = [_slice_zero, _setitem_through_movedim, _transposed_mul, _view_of_view_fill]


@pytest.mark.parametrize("fn", VIEW_WRITES, ids=lambda f: f.__name__)
def test_decide_names_a_write_through_a_view_of_an_input(fn):
    x = torch.randn(4, 8)
    use, why = decide(lowered(fn, x.clone()), (x,), device="cpu")
    assert not use and "writes into the input x" in why, why


@pytest.mark.parametrize("backend", ["reference", "auto"])
@pytest.mark.parametrize("fn", VIEW_WRITES, ids=lambda f: f.__name__)
def test_fresh_inputs_written_through_views_match_eager_every_call(monkeypatch, fn, backend):
    plan_on_cpu(monkeypatch, CpuGraphs)
    compiled = tpg.compile(fn, backend=backend)
    for call in range(4):  # compile, record, replay, replay
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(call))
        y = x.clone()
        want, got = fn(x), compiled(y)
        torch.testing.assert_close(got, want, msg=lambda m: f"call {call}: {m}")
        assert torch.equal(x, y), f"call {call}: the caller's input did not get the write"


class SliceWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x):
        self.count[:2].add_(1.0)
        return x * self.count


def test_a_constant_written_through_a_view_is_put_back_after_the_capture_run():
    module = SliceWrite()
    gm = lowered(module, torch.randn(3, 4))
    assert [t.data_ptr() for t in written_constants(gm)] == [module.count.data_ptr()]


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_a_constant_written_through_a_view_counts_each_call_once(monkeypatch, backend):
    plan_on_cpu(monkeypatch, CpuGraphs)
    eager, module = SliceWrite(), SliceWrite()
    compiled = tpg.compile(module, backend=backend)
    x = torch.randn(3, 4)
    for call in range(4):
        assert torch.equal(eager(x), compiled(x)), call
    assert torch.equal(eager.count, module.count), (eager.count, module.count)
