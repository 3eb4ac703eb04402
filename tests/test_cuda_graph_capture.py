"""CUDA-graph capture on the CPU: what is refused before capturing, the private input copies'
layout, and a failed capture's diagnosis (node, kernels, first CUDA error) in the WARNING and
in ``explain()`` -- with a CPU stand-in for the CUDA calls (``tests/test_cuda_graphs.py``).
"""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.cuda_graph_capture import copy_into, private_copy  # noqa: E402
from tensorplay_graph.backends.cuda_graphs import CudaGraphRunner, decide  # noqa: E402
from tensorplay_graph.ir import Graph, GraphModule  # noqa: E402
from tensorplay_graph.training.opaque import OpaqueForward, Slot, tape_backward  # noqa: E402

from test_cuda_graphs import CpuGraphs, plan_on_cpu  # noqa: E402
from test_training_functional import TinyLM, _data  # noqa: E402

PREVIOUS = "CUDA error: operation failed due to a previous error during capture"
NOT_PERMITTED = "CUDA error: operation not permitted when stream is capturing"


def _one_call(target, method=False):
    graph = Graph()
    x = graph.placeholder("x")
    out = graph.call_method(target, (x,)) if method else graph.call_function(target, (x,))
    graph.output(out)
    return GraphModule({}, graph)


@pytest.mark.parametrize("target, words", [
    (tape_backward, "opaque op"),
    (OpaqueForward("call_function", torch.relu, ((Slot(0),), {}), [0], "relu"), "opaque op"),
    (torch.nonzero, "reads a result back"),
    (torch.ops.aten.nonzero.default, "reads a result back"),
    (torch.ops.aten._local_scalar_dense.default, "reads a result back")])
def test_decide_refuses_tapes_and_syncing_functions(target, words):
    for forced in (None, True):  # not even when graphs are forced on
        use, why = decide(_one_call(target), [torch.randn(4)], option=forced, device="cpu")
        assert not use and words in why, why


@pytest.mark.parametrize("make", [
    lambda: torch.randn(6, 24)[:, 8:16].t(),          # a transposed slice: not dense
    lambda: torch.randn(1, 8)[:, 1:].expand(3, 7),     # overlapping (stride 0), odd offset
    lambda: torch.randn(5, 4)])
def test_private_copies_keep_strides_offset_and_values(make):
    value = make()
    copy = private_copy(value)
    assert copy.stride() == value.stride() and copy.storage_offset() == value.storage_offset()
    assert copy.data_ptr() != value.data_ptr() and torch.equal(copy, value)
    fresh = make()
    copy_into(copy, fresh)
    assert torch.equal(copy, fresh)


def test_capture_reads_inputs_laid_out_as_the_caller_passed_them():
    """An input that moves between calls is copied for the capture with its own strides:
    the captured program sees the kernel specializations its warm-up compiled."""
    seen = []

    class Recording(CpuGraphs):
        @staticmethod
        def capture(fn, args, pool=None):
            seen.append([(a.stride(), a.storage_offset()) for a in args])
            return CpuGraphs.capture(fn, args)

    def program(x, w):
        return (x * w).sum(0)

    run = CudaGraphRunner(program, ops=Recording)
    w = torch.randn(4)
    calls = [torch.randn(6, 12)[1:5, 4:8] for _ in range(4)]  # fresh, strided storage each call
    for x in calls:
        torch.testing.assert_close(run(x, w), program(x, w))
    assert run.captures == 1 and seen == [[(calls[1].stride(), calls[1].storage_offset()),
                                           (w.stride(), w.storage_offset())]]


class FailingCapture(CpuGraphs):
    """A capture in which one kernel's launch fails (as a CUDA call refused while capturing
    does), then ``capture_end`` fails with the error that ended the real H200 captures."""

    @staticmethod
    def capture(fn, args, pool=None):
        node = next(n for n in fn.graph.nodes if hasattr(n.target, "fn") and
                    hasattr(n.target, "launch"))
        kernel, launch = node.target, node.target.fn

        def refused(*values):
            raise RuntimeError(NOT_PERMITTED)

        kernel.fn = refused
        try:
            try:
                fn(*args)
            finally:
                kernel.fn = launch
        except RuntimeError:
            raise RuntimeError(PREVIOUS)  # chained: the first error is its __context__
        raise AssertionError("the stand-in capture should have failed")


@pytest.fixture
def failing_graphs(monkeypatch):
    plan_on_cpu(monkeypatch, FailingCapture)


def _assert_diagnosed(text, records):
    assert "capture failed at node" in text and "kernel" in text, text
    assert "not permitted when stream is capturing" in text, text
    assert "previous error during capture" in text, text
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert any("not permitted when stream is capturing" in m and "at node" in m
               for m in warnings), warnings


def test_failed_capture_names_node_kernel_and_first_error(failing_graphs, caplog):
    def program(x, w):
        return (x * w + 1.0).relu().sum(1)

    compiled = tpg.compile(program, options={"backends": ["reference"]})
    x, w = torch.randn(4, 8), torch.randn(8)
    with caplog.at_level(logging.WARNING, logger="tensorplay_graph.compile"):
        for _ in range(3):  # warm-up, failed capture, then without graphs
            torch.testing.assert_close(compiled(x, w), program(x, w))
    _assert_diagnosed(compiled.explain(), caplog.records)


def test_failed_training_capture_shows_in_the_training_explain(failing_graphs, caplog):
    torch.manual_seed(0)
    model, (ids, labels) = TinyLM(), _data()
    want = model(ids, labels)
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    with caplog.at_level(logging.WARNING, logger="tensorplay_graph.compile"):
        for _ in range(3):
            loss = compiled(ids, labels)
            torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
            loss.backward()
    text = compiled.explain()
    _assert_diagnosed(text, caplog.records)
    assert text.count("cuda graphs off: capture failed at node") == 2, text


def test_warm_ups_and_captures_share_one_side_stream_per_device(monkeypatch):
    """cuBLAS keeps a 32 MiB workspace per stream it ran on for the process's life: a new
    side stream per warm-up and capture held seven of them in a GPT-2 training process."""
    import contextlib
    import types

    from tensorplay_graph.backends import cuda_graph_ops

    class Stream:
        def wait_stream(self, other):
            pass

    class Cuda:
        made, index = [], 0

        def Stream(self):
            self.made.append(Stream())
            return self.made[-1]

        def current_device(self):
            return self.index

        def current_stream(self):
            return Stream()

        def stream(self, stream):
            return contextlib.nullcontext()

        def device(self, device):
            previous = self.index

            @contextlib.contextmanager
            def switch():
                self.index = device.index
                yield
                self.index = previous
            return switch()

        def CUDAGraph(self):
            return types.SimpleNamespace()

        def memory_reserved(self, device):
            return 0

        def graph(self, graph, **kwargs):
            return contextlib.nullcontext()

    cuda = Cuda()
    monkeypatch.setattr(cuda_graph_ops, "_torch", lambda: types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(cuda_graph_ops, "is_cuda_tensor", lambda value: True)
    monkeypatch.setattr(cuda_graph_ops, "_SIDE_STREAMS", {})
    ops = cuda_graph_ops.TorchGraphs
    on = [types.SimpleNamespace(device=types.SimpleNamespace(index=i)) for i in (0, 1)]
    for _ in range(3):
        ops.warm_up(lambda x: x, on[:1])
        ops.capture(lambda x: x, on[:1])
    assert len(cuda.made) == 1
    ops.capture(lambda x: x, on[1:])  # another device: its own stream, once
    ops.capture(lambda x: x, on[1:])
    assert len(cuda.made) == 2


def test_a_warm_up_in_a_graph_pool_routes_this_threads_allocations_there(monkeypatch):
    """``TorchGraphs.warm_up(..., pool=handle)`` begins allocating this thread's memory from the
    pool before the run and ends (and releases the pool's use) after it -- also when the run
    raises; without a pool it leaves the allocator alone."""
    import contextlib
    import types

    from tensorplay_graph.backends import cuda_graph_ops

    calls = []

    class Stream:
        def wait_stream(self, other):
            pass

    cuda = types.SimpleNamespace(current_device=lambda: 3, current_stream=Stream,
                                 Stream=Stream, stream=lambda s: contextlib.nullcontext())
    C = types.SimpleNamespace(
        _cuda_beginAllocateCurrentThreadToPool=lambda d, p: calls.append(("begin", d, p)),
        _cuda_endAllocateToPool=lambda d, p: calls.append(("end", d, p)),
        _cuda_releasePool=lambda d, p: calls.append(("release", d, p)))
    monkeypatch.setattr(cuda_graph_ops, "_torch", lambda: types.SimpleNamespace(cuda=cuda, _C=C))
    monkeypatch.setattr(cuda_graph_ops, "_SIDE_STREAMS", {})
    ops = cuda_graph_ops.TorchGraphs
    pool = types.SimpleNamespace(id=(0, 7))  # a MemPool: it keeps the pool alive
    assert ops.warm_up(lambda x: calls.append("run") or x + 1, [1], pool=pool) == 2
    assert calls == [("begin", 3, (0, 7)), "run", ("end", 3, (0, 7)), ("release", 3, (0, 7))]
    calls.clear()

    def fails(x):
        calls.append("run")
        raise ValueError("boom")
    with pytest.raises(ValueError):
        ops.warm_up(fails, [1], pool=pool)
    assert calls == [("begin", 3, (0, 7)), "run", ("end", 3, (0, 7)), ("release", 3, (0, 7))]
    calls.clear()
    ops.warm_up(lambda x: calls.append("run"), [1])
    ops.warm_up(lambda x: calls.append("run"), [1], pool=(0, 7))  # a bare handle: not routed
    assert calls == ["run", "run"]


@pytest.mark.parametrize("on_cuda", [True, False])
def test_capture_gives_its_cached_device_memory_back_once_per_capture(monkeypatch, on_cuda):
    """Capture runs the program on real examples; on CUDA the cache it leaves is released
    once, right after capture (a later long-lived block would pin a freed segment)."""
    from tensorplay_graph.backends import cuda_graph_policy
    released = []
    monkeypatch.setattr(cuda_graph_policy, "is_cuda_tensor", lambda value: on_cuda and
                        isinstance(value, torch.Tensor))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: released.append(1))
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    compiled = tpg.compile(lambda x: (x * 2).sin(), options={"backends": ["reference"]})
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), (x * 2).sin())
    assert released == ([1] if on_cuda else [])
    compiled(torch.randn(5, 2))  # a new signature: captured again
    assert released == ([1, 1] if on_cuda else [])
    capturing[0] = True  # inside a CUDA graph capture nothing is freed
    compiled(torch.randn(3, 3))
    assert released == ([1, 1] if on_cuda else [])
