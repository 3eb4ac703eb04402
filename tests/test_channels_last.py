"""The channels_last pass (``passes/channels_last.py``) on the CPU: compiled conv nets equal
eager, values that escape keep eager's strides, conv weights cached in channels_last follow
every change of the parameter, and the decision is explained.

torch's CPU convolutions have channels_last paths, so ``options={"channels_last": True}``
runs the same rewrite here that the default makes for CUDA conv nets; the Triton kernels of
the region run in tests/interp/test_triton_channels_last.py.
"""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import tensorplay_graph as tpg  # noqa: E402
from models.resnets import resnet18ish, resnet50ish  # noqa: E402
from tensorplay_graph.backends.cuda_graphs import CudaGraphRunner  # noqa: E402
from tensorplay_graph.passes.channels_last import (ChannelsLastWeight,  # noqa: E402
                                                   leave_channels_last, to_channels_last)
from tensorplay_graph.prims.nn import pool_meta  # noqa: E402
from tensorplay_graph.ir.meta import TensorMeta  # noqa: E402

ON = {"channels_last": True, "cuda_graphs": False}
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}


def lowered_nodes(compiled):
    spec = next(iter(compiled.specializations.values()))
    return list(spec.lowered.graph.nodes)


def targets(compiled, fn):
    return [n for n in lowered_nodes(compiled) if n.target is fn]


# NumPy has no bfloat16 (the reference backend would claim nothing): bf16 runs through the
# interpreter only.
CASES = [(resnet18ish, torch.float32, "reference"), (resnet18ish, torch.bfloat16, "interpreter"),
         (resnet50ish, torch.float32, "interpreter"), (resnet50ish, torch.bfloat16, "interpreter")]


@pytest.mark.parametrize("make, dtype, backend", CASES,
                         ids=[f"{m.__name__}-{str(d)[6:]}-{b}" for m, d, b in CASES])
def test_resnets_equal_eager(make, dtype, backend):
    model = make().to(dtype)
    x = torch.randn(2, 3, 32, 32, dtype=dtype)
    compiled = tpg.compile(model, backend=backend, options=ON)
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
        got_again = compiled(x)
    torch.testing.assert_close(got, want, **TOL[dtype])
    torch.testing.assert_close(got_again, got, rtol=0, atol=0)
    # one conversion in (the image), none out (global pooling reads NHWC in place)
    assert len(targets(compiled, to_channels_last)) == 1
    assert targets(compiled, leave_channels_last) == []
    weights = [n for n in lowered_nodes(compiled) if isinstance(n.target, ChannelsLastWeight)]
    assert len(weights) == sum(isinstance(m, nn.Conv2d) for m in model.modules())


class Features(nn.Module):
    """Returns feature maps (escaping 4-d values) next to a view and the logits."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 4)

    def forward(self, x):
        a = torch.relu(self.bn(self.conv(x)))
        b = self.conv2(a) + a
        return a, b, b.reshape(b.shape[0], -1)[:, :5], self.fc(b.flatten(1))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_escaping_values_keep_eager_strides(layout):
    model = Features().eval()
    x = torch.randn(2, 3, 8, 8)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    compiled = tpg.compile(model, backend="reference", options=ON)
    with torch.no_grad():
        want, got = model(x), compiled(x)
    for g, w in zip(got, want):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    if layout == "contiguous":  # eager's NCHW results leave the NHWC region through copies
        assert targets(compiled, leave_channels_last)


def test_replaced_and_updated_conv_weights_are_used():
    model = Features().eval()
    x = torch.randn(2, 3, 8, 8)
    compiled = tpg.compile(model, backend="interpreter", options=ON)

    def check():
        for g, w in zip(compiled(x), model(x)):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)

    with torch.no_grad():
        check()
        model.conv.weight = nn.Parameter(torch.randn_like(model.conv.weight))
        check()
        model.conv.weight.mul_(-2.0)  # in place: same tensor, new version
        check()
        model.conv2.weight.copy_(torch.randn_like(model.conv2.weight))
        check()


def test_cached_weight_follows_the_parameter():
    w = torch.randn(8, 4, 3, 3)
    cache = ChannelsLastWeight()
    with torch.no_grad():
        first = cache(w)
        assert first.stride() == (36, 1, 12, 4) and torch.equal(first, w)
        assert cache(w) is first  # unchanged weight: the cached copy, no work
        w.add_(1.0)
        again = cache(w)
        assert torch.equal(again, w) and again.data_ptr() == first.data_ptr()  # same buffer
        w.sub_(3.0)
        assert cache.refresh_for_replay() and torch.equal(first, w)  # before a graph replay
        other = torch.randn(8, 4, 3, 3)
        assert torch.equal(cache(other), other)  # another tensor is another weight
    del other, w
    gc.collect()
    assert not cache.refresh_for_replay()  # the weight is gone: replay would be stale
    one_by_one = torch.randn(8, 4, 1, 1)  # already channels_last: used as it is
    assert ChannelsLastWeight()(one_by_one) is one_by_one


def test_weight_needing_grad_is_converted_differentiably():
    w = torch.randn(8, 4, 3, 3, requires_grad=True)
    cache = ChannelsLastWeight()
    out = cache(w)
    assert out.requires_grad and out.stride() == (36, 1, 12, 4)
    out.sum().backward()
    assert torch.equal(w.grad, torch.ones_like(w))
    assert cache(w) is not out  # never cached: each call is part of its own graph


def test_cuda_graph_replays_refresh_cached_weights_first():
    calls = []

    class Cache:
        def __init__(self):
            self.fresh = True

        def refresh_for_replay(self):
            calls.append(self.fresh)
            return self.fresh

    cache = Cache()
    program = SimpleNamespace(graph=SimpleNamespace(nodes=[SimpleNamespace(target=cache)]))

    class Ops:  # a stand-in whose "graph" re-runs the function
        is_tensor = staticmethod(lambda v: isinstance(v, torch.Tensor))
        warm_up = staticmethod(lambda fn, args, pool=None: fn(*args))
        storage_uses = staticmethod(lambda t: 1)
        capture = staticmethod(lambda fn, args, pool=None: ({"fn": fn, "args": args},
                                                          fn(*args)))
        replay = staticmethod(lambda graph: graph["fn"](*graph["args"]))

    runs = []

    def fn(x):
        runs.append(1)
        return None

    runner = CudaGraphRunner(fn, ops=Ops)
    runner._refresh = CudaGraphRunner(program, ops=Ops)._refresh  # the program's caches
    x = torch.randn(2)
    runner(x), runner(x), runner(x)
    assert calls == [True] and runner.captures == 1
    cache.fresh = False
    runner(x)
    assert calls == [True, False] and runner.captures == 2  # recaptured, not replayed stale


def test_explain_shows_the_layout_decision():
    model, x = Features().eval(), torch.randn(2, 3, 8, 8)
    plan = tpg.explain(model, x, backend="triton", compile_kernels=False)  # planned for CUDA
    assert plan.layout.startswith("channels_last:") and "memory layout: channels_last" in str(plan)
    off = tpg.explain(model, x, backend="triton", compile_kernels=False, layout=False)
    assert off.layout.startswith("off")
    cpu = tpg.explain(model, x, backend="reference", compile_kernels=False)
    assert "off: a convolution runs on cpu" in cpu.layout
    assert tpg.explain(lambda t: t.relu(), x, backend="reference").layout is None
    compiled = tpg.compile(model, backend="interpreter", options=ON)
    with torch.no_grad():
        compiled(x)
    assert "memory layout channels_last (forced)" in compiled.explain()


def test_global_pooling_of_nhwc_runs_on_eager_reduction():
    """One rows-kernel program per (n, c) would read H*W elements C apart: Triton declines."""
    plan = tpg.explain(resnet50ish(), torch.randn(2, 3, 32, 32), backend="triton",
                       compile_kernels=False)
    assert "short rows" in plan.declined["adaptive_avg_pool2d"]["triton"]
    assert plan.regions[-1].nodes[-1].startswith("relu")  # the last epilogue stays fused


def test_in_place_writes_keep_the_program_in_eager_layout():
    conv = nn.Conv2d(3, 4, 3).eval()

    def program(x, buf):
        y = conv(x)
        buf.add_(y.sum())  # a write into an input: a converted copy would not see it
        return y

    x, buf = torch.randn(1, 3, 6, 6), torch.zeros(1)
    plan = tpg.explain(program, x, buf, backend="triton", compile_kernels=False)
    assert plan.layout.startswith("off: ") and "in place" in plan.layout


def test_option_is_checked():
    with pytest.raises(ValueError, match="channels_last"):
        tpg.compile(lambda x: x, options={"channels_last": "yes"})


POOLS = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
         dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=(3, 2), stride=(2, 1))]


@pytest.mark.parametrize("op, kwargs", [(op, kw) for op in ("max_pool2d", "avg_pool2d")
                                        for kw in POOLS] +
                         [("max_pool2d", dict(kernel_size=3, padding=1, dilation=(2, 1)))])
def test_pool_meta_matches_eager(op, kwargs):
    x = torch.randn(2, 3, 11, 10)
    want = getattr(torch.nn.functional, op)(x, **kwargs)
    got = pool_meta(op)(TensorMeta(tuple(x.shape), "float32"), **kwargs)
    assert got.shape == tuple(want.shape)
