"""Kernel registration and dispatch, autocast, profiler spans, the native bridge."""

from __future__ import annotations

import warnings

import pytest

from tensorplay_graph import library as L
from test_library_helpers import fresh_ns, fw  # noqa: F401 - fixture


def _op(body=None, **kwargs):
    return L.custom_op(f"{fresh_ns()}::op", body or (lambda x: x + 1), mutates_args=(), **kwargs)


def test_device_kernel_beats_default_and_hot_swap(fw):
    op = _op()
    x = fw.tensor([1.0])
    assert fw.np(op(x)).tolist() == [2.0]
    op.register_kernel("cpu", lambda x: x + 10)
    assert fw.np(op(x)).tolist() == [11.0]

    @op.register_kernel("CPU")
    def _(x):
        return x + 100

    assert fw.np(op(x)).tolist() == [101.0]
    assert L.get_kernel(op, "cpu") is _
    assert fw.np(L.get_kernel(op, "default")(x)).tolist() == [2.0]


def test_device_types_restrict_the_body(fw):
    op = _op(device_types="cuda")
    with pytest.raises(NotImplementedError, match=r"register_kernel.*") as info:
        op(fw.tensor([1.0]))
    assert "'cpu'" in str(info.value) and "['cuda']" in str(info.value)
    op.register_kernel(["cpu"], lambda x: x * 3)
    assert fw.np(op(fw.tensor([1.0]))).tolist() == [3.0]


def test_no_kernel_at_all(fw):
    L.define(f"{(ns := fresh_ns())}::bare(Tensor x) -> Tensor")
    with pytest.raises(NotImplementedError, match=f"{ns}::bare has no kernel"):
        L.get_op(f"{ns}::bare")(fw.tensor([1.0]))


def test_torch_meta_device_dispatch():
    torch = pytest.importorskip("torch")
    op = _op(device_types="cpu")
    op.register_kernel("meta", lambda x: x.new_empty(x.shape))
    out = op(torch.empty(2, 3, device="meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (2, 3)


def test_composite_and_module_level_register_kernel(fw):
    op = _op(device_types="cpu")
    L.register_kernel(op, "CompositeExplicitAutograd", lambda x: x * 5)
    L.register_kernel(op.name, (), lambda x: x * 6)  # empty iterable: the default slot too
    assert fw.np(L.get_kernel(op, "CompositeImplicitAutograd")(fw.tensor([1.0]))).tolist() == [6.0]
    assert fw.np(op(fw.tensor([1.0]))).tolist() == [2.0]

    @L.register_kernel(op, "cpu")
    def _(x):
        return x * 7

    assert fw.np(op(fw.tensor([1.0]))).tolist() == [7.0]
    with pytest.raises(TypeError, match="kernel must be callable"):
        op.register_kernel("cpu", 3)


def test_get_kernel_errors():
    op = _op(device_types="cpu")
    with pytest.raises(LookupError, match="dispatch key 'cuda'"):
        L.get_kernel(op, "cuda")
    with pytest.raises(LookupError):
        L.get_kernel(op, "default")  # a concrete kernel never answers for the default slot
    with pytest.raises(TypeError, match="dispatch_key must be a str"):
        L.get_kernel(op, None)


def test_set_kernel_enabled_falls_back_and_restores(fw):
    op = _op()
    op.register_kernel("cpu", lambda x: x * 10)
    x = fw.tensor([1.0])
    with op.set_kernel_enabled("cpu", False):
        assert fw.np(op(x)).tolist() == [2.0]
        with pytest.raises(LookupError):
            L.get_kernel(op, "cpu")
        with pytest.warns(UserWarning, match="already disabled"):
            with op.set_kernel_enabled("cpu", False):
                assert fw.np(op(x)).tolist() == [2.0]
        assert fw.np(op(x)).tolist() == [2.0]  # inner exit restored "disabled"
        with op.set_kernel_enabled("cpu", True):
            assert fw.np(op(x)).tolist() == [10.0]
        assert fw.np(op(x)).tolist() == [2.0]
    assert fw.np(op(x)).tolist() == [10.0]
    with pytest.warns(UserWarning, match="already enabled"):
        with op.set_kernel_enabled("cpu", True):
            pass


def test_set_kernel_enabled_without_kernels_warns():
    L.define(f"{(ns := fresh_ns())}::bare")
    op = L.get_op(f"{ns}::bare")
    with pytest.warns(UserWarning, match="no kernel was registered"):
        with op.set_kernel_enabled("cuda", False):
            pass


def test_disabled_kernel_without_default_raises(fw):
    op = _op(device_types="cpu")
    with op.set_kernel_enabled("cpu", False):
        with pytest.raises(NotImplementedError, match="register_kernel"):
            op(fw.tensor([1.0]))


def test_kwargs_reach_kernels_on_every_path(fw):
    op = L.custom_op(f"{fresh_ns()}::scale", lambda x, factor=1.0, bias=None: x * factor +
                     (0 if bias is None else bias), mutates_args=())
    x = fw.tensor([1.0, 2.0])
    assert fw.np(op(x, factor=3.0)).tolist() == [3.0, 6.0]
    assert fw.np(op(x=x, factor=2.0)).tolist() == [2.0, 4.0]
    assert fw.np(op(x, 2.0, bias=x)).tolist() == [3.0, 6.0]
    op.register_autograd(lambda ctx, g: (g * ctx.factor, None, None),
                         setup_context=lambda ctx, inputs, out: setattr(ctx, "factor", inputs[1]))
    leaf = fw.tensor([1.0, 2.0], requires_grad=True)
    out = op(leaf, factor=4.0)
    out.sum().backward()
    assert fw.np(out).tolist() == [4.0, 8.0] and fw.np(leaf.grad).tolist() == [4.0, 4.0]


def test_non_tensor_and_nested_arguments(fw):
    op = L.custom_op(f"{fresh_ns()}::total", lambda xs, n: sum(xs) * n, mutates_args=())
    op.register_kernel("cpu", lambda xs, n: sum(xs) * n * 10)
    x = fw.tensor([1.0])
    assert fw.np(op([x, x], 2)).tolist() == [40.0]  # key from the tensor inside the list
    assert op([1, 2], 3) == 9  # no tensor: the default kernel


def test_tensor_subclass_dispatch(fw):
    op = _op()
    param = fw.module.nn.Parameter(fw.tensor([1.0]))
    assert fw.np(op(param)).tolist() == [2.0]
    assert fw.np(op(param)).tolist() == [2.0]  # second call takes the learned fast path


# -- autocast ----------------------------------------------------------------

def test_register_autocast_casts_floating_inputs(fw):
    seen = []

    def kernel(x, idx):
        seen.append((str(x.dtype), str(idx.dtype)))
        return x + 1

    op = L.custom_op(f"{fresh_ns()}::cast", kernel, mutates_args=())
    L.register_autocast(op, "cpu", fw.dtype("bfloat16"))
    x, idx = fw.tensor([1.0]), fw.tensor([1], dtype="int64")
    op(x, idx)
    with fw.autocast("bfloat16"):
        out = op(x, idx)
    assert seen[0][0].endswith("float32")
    assert seen[1][0].endswith("bfloat16") and seen[1][1].endswith("int64")
    assert str(out.dtype).endswith("bfloat16")
    assert op.autocast_rules == {"cpu": "bfloat16"}


def test_register_autocast_errors(fw):
    op = _op()
    with pytest.raises(TypeError, match="floating-point dtype"):
        op.register_autocast("cpu", fw.dtype("int32"))
    with pytest.raises(TypeError, match="floating-point dtype"):
        op.register_autocast("cpu", "int8")
    with pytest.raises(TypeError, match="device_type must be a str"):
        op.register_autocast(None, fw.dtype("float16"))
    op.register_autocast("cuda", "float16")  # a string names a dtype too
    assert fw.np(op(fw.tensor([1.0]))).tolist() == [2.0]  # no autocast: untouched


# -- profiler ------------------------------------------------------------------

def _span_names(fw, prof):
    if fw.name == "tensorplay":
        return [event.name for event in prof.events()]
    return [event.key for event in prof.key_averages()]


def test_profiler_span_named_after_the_op(fw):
    op = _op()
    op(fw.tensor([1.0]))  # warm the fast path: it must notice the profiler anyway
    with fw.profile() as prof:
        op(fw.tensor([1.0]))
    assert op.name in _span_names(fw, prof)
    with fw.profile() as prof:
        fw.tensor([1.0]) + 1
    assert op.name not in _span_names(fw, prof)


def test_profiler_span_with_autograd(fw):
    op = _op()
    op.register_autograd(lambda ctx, g: g)
    with fw.profile() as prof:
        op(fw.tensor([1.0], requires_grad=True)).sum().backward()
    assert op.name in _span_names(fw, prof)


# -- native bridge ---------------------------------------------------------------

def test_run_native_calls_the_registered_kernel():
    tp = pytest.importorskip("tensorplay")
    op = L.custom_op(f"{fresh_ns()}::pair", lambda x, y: (x + y, x - y), mutates_args=())
    out = op.run_native([tp.ones(2), tp.ones(2)])
    assert [t.tolist() for t in out] == [[2.0, 2.0], [0.0, 0.0]]
    op.register_kernel("cpu", lambda x, y: (x * y, x))
    out = op.run_native([tp.ones(2) * 3, tp.ones(2)], device_type="cpu")
    assert out[0].tolist() == [3.0, 3.0]


def test_run_native_without_bridge(monkeypatch):
    tp = pytest.importorskip("tensorplay")
    op = _op()
    monkeypatch.delattr(tp._C, "_call_native_op")
    with pytest.raises(RuntimeError, match="native custom-op bridge is unavailable"):
        op.run_native([tp.ones(2)])
    assert op(tp.ones(1)).tolist() == [2.0]  # the Python path keeps working


def test_run_native_refuses_tensorplay_owned_names():
    tp = pytest.importorskip("tensorplay")
    import tensorplay.library as tp_library

    ns = fresh_ns()
    tp_library.custom_op(f"{ns}::op", lambda x: x * 2, mutates_args=())
    ours = L.custom_op(f"{ns}::op", lambda x: x * 3, mutates_args=())
    with pytest.raises(RuntimeError, match="tensorplay.library"):
        ours.run_native([tp.ones(1)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tp_library.get_op(f"{ns}::op").run_native([tp.ones(1)])[0].tolist() == [2.0]
