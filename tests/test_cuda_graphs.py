"""Automatic CUDA graphs on the CPU: when they are used (and why not), and the output contract.

The decision is planned for ``device="cpu"`` on torch CPU tensors; the runner is driven by a
CPU stand-in whose "graph" re-runs the program over the captured tensors and writes the results
into the captured output buffers -- exactly what a real replay does to memory. The real check
is ``benchmarks/models_gpu.py`` on the H200.
"""

from __future__ import annotations

import ctypes
import logging

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends import cuda_graphs  # noqa: E402
from tensorplay_graph.backends.cuda_graphs import CudaGraphRunner, TorchGraphs, decide  # noqa: E402
from tensorplay_graph.compiler import copy_graph_module, lower_graph  # noqa: E402


def _tensors(value):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return [value] if isinstance(value, torch.Tensor) else []


class CpuGraphs:
    """A CPU stand-in for TorchGraphs: replay overwrites the captured outputs in place.

    A shared pool is a list of its graphs in capture order; replaying one overwrites the
    outputs of every graph captured after it in the pool (NaN / -1234567), as the real pool
    does: a later graph's buffers lie in blocks this one freed for its intermediates."""

    is_tensor = staticmethod(lambda v: isinstance(v, torch.Tensor))
    warm_up = staticmethod(lambda fn, args, pool=None: fn(*args))
    storage_uses = staticmethod(TorchGraphs.storage_uses)
    storage_counter = staticmethod(TorchGraphs.storage_counter)
    pool_handle = staticmethod(list)

    @staticmethod
    def capture(fn, args, pool=None):
        # A real graph holds no reference to the tensors it reads, only their addresses
        # (the runner keeps that memory alive): so does the stand-in.
        out = fn(*args)
        args = [_address(a) if isinstance(a, torch.Tensor) else (lambda v=a: v) for a in args]
        graph = {"fn": fn, "args": args, "outs": _tensors(out), "pool": pool}
        if pool is not None:
            pool.append(graph)
        return graph, out

    @staticmethod
    def replay(graph):
        for static, new in zip(graph["outs"], _tensors(graph["fn"](*[a() for a in graph["args"]]))):
            # an expanded output (stride 0) repeats its elements: write each one once
            for dim, stride in enumerate(static.stride()):
                if stride == 0 and static.shape[dim] > 1:
                    static, new = static.narrow(dim, 0, 1), new.narrow(dim, 0, 1)
            static.copy_(new)
        pool = graph["pool"]
        for later in pool[pool.index(graph) + 1:] if pool is not None else ():
            for out in later["outs"]:
                out.fill_(float("nan") if out.is_floating_point() else -1234567)


def _address(t):
    """A callable that makes a tensor on ``t``'s memory (not holding it) when called."""
    ptr, shape, stride, dtype, size = t.data_ptr(), t.shape, t.stride(), t.dtype, t.element_size()
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if t.numel() else 0

    def tensor():
        if not extent:
            return torch.empty_strided(shape, stride, dtype=dtype)
        memory = (ctypes.c_byte * (extent * size)).from_address(ptr)
        return torch.frombuffer(memory, dtype=dtype).as_strided(shape, stride)
    return tensor


def plan_on_cpu(monkeypatch, ops) -> None:
    """Every compile plans graphs for CPU tensors and replays them through ``ops`` (a stand-in
    for :class:`TorchGraphs`): the whole-program path on this CPU machine."""
    decide_cpu = cuda_graphs.decide

    class Runner(cuda_graphs.CudaGraphRunner):
        def __init__(self, fn, reason=cuda_graphs.ON, ops_=None, pool=None, forced=False):
            super().__init__(fn, reason, ops=ops, pool=pool, forced=forced)

    monkeypatch.setattr(cuda_graphs, "decide", lambda module, inputs, option=None,
                        dynamic=False, device="cuda": decide_cpu(module, inputs, option, dynamic,
                                                                 device="cpu"))
    monkeypatch.setattr(cuda_graphs, "CudaGraphRunner", Runner)


def program(x, w):
    return (x * w + 1.0).relu(), x.sum()


def lowered(fn, *args):
    gm = tpg.capture(fn, *args)
    return lower_graph(copy_graph_module(gm), args, ["reference"], {"cuda_graphs": False})


def new_runner(fn=program):
    return CudaGraphRunner(fn, ops=CpuGraphs)


# ------------------------------------------------------------------------------ decision
def test_decide_on_for_a_static_device_program():
    x, w = torch.randn(4, 8), torch.randn(8)
    use, why = decide(lowered(program, x, w), (x, w), device="cpu")
    assert use and why == cuda_graphs.ON


@pytest.mark.parametrize("fn, words", [
    (lambda x: x.add_(1.0) * 2, "writes into the input x"),
    (lambda x: x * torch.rand_like(x), "draws random numbers"),
    (lambda x: torch.nonzero(x > 0).sum() * x, "reads tensor data on the host"),
    (lambda x: x[x > 0].sum() * x, "shape depends on tensor data"),  # a mask index syncs too
    (lambda x: x[[0, 2]] * 2, "indexes with a Python list"),  # a host copy per call
    (lambda x: x[:, [1, 1]] + 1, "indexes with a Python list"),
])
def test_decide_off_with_the_reason(fn, words):
    x = torch.randn(4, 8)
    use, why = decide(lowered(fn, x.clone()), (x,), device="cpu")
    assert not use and words in why, why


def test_decide_option_dynamic_and_devices():
    x, w = torch.randn(4, 8), torch.randn(8)
    module = lowered(program, x, w)
    assert decide(module, (x, w), option=False, device="cpu") == \
        (False, "off (options={'cuda_graphs': False})")
    use, why = decide(module, (x, w), dynamic=True, device="cpu")
    assert not use and "sizes are dynamic" in why
    assert decide(module, (x, w), option=True, dynamic=True, device="cpu")[0]
    use, why = decide(module, (x, w))  # planned for CUDA: CPU tensors are not allowed
    assert not use and "input 0 is a torch tensor on cpu" in why
    # random ops are allowed when forced; writes into inputs never are
    rnd = lowered(lambda a: a * torch.rand_like(a), x)
    assert decide(rnd, (x,), option=True, device="cpu")[0]
    assert not decide(lowered(lambda a: a.add_(1.0), x.clone()), (x,), option=True,
                      device="cpu")[0]


def test_compile_explain_and_log_say_why_graphs_are_off(caplog):
    f = tpg.compile(lambda x: (x * 2).sin(), backend="reference")
    with caplog.at_level(logging.INFO, logger="tensorplay_graph.perf_hints"):
        f(torch.randn(8))
    assert "cuda graphs off: input 0 is a torch tensor on cpu" in f.explain()
    assert any("cuda graphs off" in r.getMessage() for r in caplog.records)
    off = tpg.compile(lambda x: x * 2, backend="reference", options={"cuda_graphs": False})
    off(torch.randn(8))
    assert "cuda graphs off (options={'cuda_graphs': False})" in off.explain()
    with pytest.raises(ValueError, match="cuda_graphs"):
        tpg.compile(lambda x: x, options={"cuda_graphs": "yes"})


# ------------------------------------------------------------------------------ runner
def test_runner_replays_and_reads_static_inputs_in_place():
    w = torch.randn(8)
    run = new_runner()
    for i in range(5):
        x = torch.randn(4, 8)
        got = run(x, w)
        want = program(x, w)
        assert torch.equal(got[0], want[0]) and torch.allclose(got[1], want[1])
        del got
    # call 2 is a second warm-up (x moved), call 3 captures and replays
    assert run.captures == 1 and run.replays == 3 and run.state == "graph"
    assert [slot for slot, _ in run._static] == [1] and [s for s, _ in run._private] == [0]
    w.mul_(3)  # a static input is read as it is now (parameters updated in place)
    x = torch.randn(4, 8)
    assert torch.equal(run(x, w)[0], program(x, w)[0])


def test_a_fresh_tensor_where_a_freed_one_was_is_copied_in_not_read_in_place():
    # Autograd's incoming gradient is a new tensor each step, often at the freed one's
    # address: same address, other storage. Deciding by address alone read it in place and
    # recaptured whenever the allocator moved it (a test saw 2 or 3 captures by heap state).
    import numpy as np
    memory, w, run = np.zeros((4, 8), np.float32), torch.randn(8), new_runner()
    for i in range(5):
        memory[:] = np.random.default_rng(i).standard_normal((4, 8))
        x = torch.from_numpy(memory)  # a new tensor and storage on the same memory
        got = run(x, w)
        assert torch.equal(got[0], program(x, w)[0])
        del got
    assert run.captures == 1 and run.state == "graph"
    assert [s for s, _ in run._private] == [0] and [s for s, _ in run._static] == [1]


def test_dropped_outputs_are_returned_without_copy():
    w, run = torch.randn(8), new_runner()
    ptrs = [run(torch.randn(4, 8), w)[0].data_ptr() for _ in range(6)]  # each dropped at once
    # calls 1-2 warm up (x moved), calls 3-6 return the graph's own buffer every time
    assert run.state == "graph" and run.replays == 4 and len(set(ptrs[2:])) == 1


@pytest.mark.parametrize("hold", ["tensor", "view", "structure"])
def test_held_outputs_are_never_overwritten(hold):
    w, run = torch.randn(8), new_runner()
    run(torch.randn(4, 8), w)
    run(torch.randn(4, 8), w)  # captured
    x = torch.randn(4, 8)
    result = run(x, w)
    held = {"tensor": result[0], "view": result[0][1:3], "structure": result}[hold]
    keep = _tensors(held)[0].clone()
    del result
    for _ in range(3):
        x2 = torch.randn(4, 8)
        got = run(x2, w)
        assert torch.equal(got[0], program(x2, w)[0])
        assert torch.equal(_tensors(held)[0], keep), "a held output was overwritten"
        del got
    # no copies: the calls while the caller keeps that result replay a second graph
    assert run.state == "graph" and "a second graph" in run.cuda_graphs


def test_a_loop_keeping_its_last_result_alternates_two_graphs_without_copies():
    w, run = torch.randn(8), new_runner()
    x = torch.randn(4, 8)
    out, buffers = run(x, w), []
    for _ in range(8):
        previous = out[0].clone()
        x.copy_(torch.randn(4, 8))
        out = run(x, w)  # the last result is alive during the call
        assert torch.equal(out[0], program(x, w)[0])
        buffers.append(out[0].data_ptr())
        del previous
    assert run.state == "graph" and "a second graph" in run.cuda_graphs
    assert len(set(buffers[-4:])) == 2 and buffers[-1] == buffers[-3] != buffers[-2]


def test_results_of_both_graphs_kept_take_the_copy_path():
    w, run = torch.randn(8), new_runner()
    x = torch.randn(4, 8)
    kept = [run(x, w) for _ in range(6)]  # every result kept
    values = [k[0].clone() for k in kept]
    for _ in range(3):
        x.copy_(torch.randn(4, 8))
        kept.append(run(x, w))
        values.append(kept[-1][0].clone())
        assert torch.equal(kept[-1][0], program(x, w)[0])
    assert all(torch.equal(k[0], v) for k, v in zip(kept, values)), "a kept result changed"
    assert run.state.startswith("graph, copying") and "a second graph" not in run.cuda_graphs


def test_big_inputs_moving_every_call_turn_graphs_off_unless_forced():
    """A replay copies each moved input into the graph's buffer: past COPY_BYTES_PER_LAUNCH
    per launch the copy costs more than the launches saved (a column sum of a fresh 268 MB
    tensor took 0.20 ms replayed, 0.078 ms launched on the H200), so graphs go off -- unless
    they were asked for. The same big tensor passed again is read in place: graphs stay on."""
    fn = lambda x: x.sum(0)  # noqa: E731
    def ints(rows):  # exact sums whatever the summation order
        return torch.randint(-3, 4, (rows, 1)).float()
    big = ints(cuda_graphs.COPY_BYTES_PER_LAUNCH // 4 + 1024)
    module = lowered(fn, big)
    assert cuda_graphs.launches(module) == 1
    for forced in (False, True):
        run = CudaGraphRunner(module, ops=CpuGraphs, forced=forced)
        for _ in range(4):
            x = ints(big.shape[0])
            torch.testing.assert_close(run(x), fn(x))
        if forced:
            assert run.state == "graph" and [s for s, _ in run._private] == [0]
        else:
            assert run.state.startswith("off: input(s) [0] move between calls: copying their "
                                        "8.0 MiB"), run.state
    run = CudaGraphRunner(module, ops=CpuGraphs)
    for _ in range(3):
        torch.testing.assert_close(run(big), fn(big))
    assert run.state == "graph" and run._private == []
    small = lowered(fn, big[:1024])
    run = CudaGraphRunner(small, ops=CpuGraphs)
    for _ in range(3):
        x = ints(1024)
        torch.testing.assert_close(run(x), fn(x))
    assert run.state == "graph" and run.replays == 1


def test_static_input_moving_recaptures():
    x, w = torch.randn(4, 8), torch.randn(8)
    run = new_runner()
    run(x, w)
    run(x, w)
    w2 = torch.randn(8)
    got = run(x, w2)
    assert torch.equal(got[0], program(x, w2)[0]) and run.captures == 2


def test_output_aliasing_an_input_runs_without_graphs():
    run = new_runner(lambda x: (x.view(-1), x + 1))
    x = torch.randn(4)
    for _ in range(3):
        out = run(x)
        assert out[0].data_ptr() == x.data_ptr()
    assert run.state.startswith("off: an output aliases an input")


def test_capture_failure_warns_and_runs_without_graphs(caplog):
    class Failing(CpuGraphs):
        @staticmethod
        def capture(fn, args, pool=None):
            raise RuntimeError("operation not permitted when stream is capturing")

    run = CudaGraphRunner(program, ops=Failing)
    x, w = torch.randn(4, 8), torch.randn(8)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert torch.equal(run(x, w)[0], program(x, w)[0])
    assert run.state.startswith("off: capture failed") and run.captures == 0
    assert any("capture failed" in r.getMessage() for r in caplog.records)


def test_outputs_inside_dicts_are_watched_too():
    def fn(x, w):  # lowered programs of HF models return dicts of tensors
        return {"logits": x * w, "extra": (None, [x.sum()])}

    w, run = torch.randn(8), new_runner(fn)
    x = torch.randn(4, 8)
    for _ in range(3):
        run(x, w)
    held = run(x, w)
    keep = held["logits"].clone()
    x.copy_(torch.randn(4, 8))  # same storage: read in place, so only the held output differs
    got = run(x, w)
    assert torch.equal(got["logits"], x * w) and torch.equal(held["logits"], keep)
    assert got["extra"][0] is None
    kept = [(held, keep), (got, got["logits"].clone())]
    for _ in range(3):  # every result kept: the second graph's too, so copies from then on
        x.copy_(torch.randn(4, 8))
        got = run(x, w)
        assert torch.equal(got["logits"], x * w)
        kept.append((got, got["logits"].clone()))
    assert all(torch.equal(k["logits"], v) for k, v in kept), "a kept result changed"
    assert run.state == "graph, copying 2 of 2 outputs"


def test_unknown_output_containers_run_without_graphs():
    class Box:
        def __init__(self, t):
            self.t = t

    run = new_runner(lambda x: Box(x + 1))
    x = torch.randn(4)
    for _ in range(3):
        assert torch.equal(run(x).t, x + 1)
    assert run.state.startswith("off: the program returns a Box")


class OutOfMemoryError(RuntimeError):
    """Named as torch's is: the runner recognizes it by name."""


@pytest.mark.parametrize("short", ["room", "oom"])
def test_no_second_graph_without_device_memory_for_it(short):
    class Short(CpuGraphs):
        warm_ups = 0

        @staticmethod
        def room_for_another(graph):
            return short != "room"

        @staticmethod
        def warm_up(fn, args, pool=None):
            Short.warm_ups += 1
            if short == "oom" and Short.warm_ups > 1:  # the second graph's first run
                raise OutOfMemoryError("CUDA out of memory")
            return fn(*args)

    w, run = torch.randn(8), CudaGraphRunner(program, ops=Short)
    x = torch.randn(4, 8)
    for _ in range(3):
        run(x, w)
    held = run(x, w)[0]
    keep = held.clone()
    for _ in range(3):
        x.copy_(torch.randn(4, 8))
        got = run(x, w)
        assert torch.equal(got[0], program(x, w)[0]) and torch.equal(held, keep)
        del got
    assert run.state == "graph, copying 1 of 2 outputs" and not run.double_buffer
