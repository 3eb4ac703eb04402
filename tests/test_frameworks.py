"""Each framework adapter answers its protocol as the framework itself does (one table, both
frameworks); adapters import their framework lazily; ``adapter_for`` names what it cannot find."""

import subprocess
import sys

import numpy as np
import pytest

from tensorplay_graph.frameworks import FrameworkAdapter, adapter_for, framework_of, loaded, registered
from tensorplay_graph.ir.meta import TensorMeta

@pytest.fixture(params=("tensorplay", "torch"))
def fw(request):
    module = pytest.importorskip(request.param)
    return request.param, module, adapter_for(request.param)


def test_registry_lists_both_adapters():
    assert registered() == ("tensorplay", "torch")
    for name in registered():
        adapter = adapter_for(name)
        assert isinstance(adapter, FrameworkAdapter) and adapter.name == name


def test_adapter_for_a_tensor_and_errors(fw):
    name, module, adapter = fw
    t = module.ones(2)
    assert adapter_for(t) is adapter and framework_of(t) == name and name in loaded()
    assert adapter.is_tensor(t) and not adapter.is_tensor(np.ones(2))
    with pytest.raises(ValueError, match="not a tensor of a known framework"):
        adapter_for(np.ones(2))
    with pytest.raises(ValueError, match="no framework adapter for 'jax'"):
        adapter_for("jax")


def test_factories_match_the_framework(fw):
    name, module, adapter = fw
    z = adapter.zeros((2, 3), "float32")
    assert type(z) is module.Tensor and z.dtype == module.float32 and tuple(z.shape) == (2, 3)
    assert bool(module.equal(z, module.zeros(2, 3)))
    e = adapter.empty((4,), "int64")
    assert e.dtype == module.int64 and tuple(e.shape) == (4,)
    f = adapter.full((2, 2), 7, "int32")
    assert f.dtype == module.int32 and f.tolist() == module.full((2, 2), 7, dtype=module.int32).tolist()
    assert adapter.dtype("bfloat16") == module.bfloat16
    meta = adapter.tensor_meta(module.ones(3, 4))
    assert isinstance(meta, TensorMeta) and meta.shape == (3, 4) and meta.stride == (4, 1)
    assert meta.dtype == "float32" and meta.device == "cpu"


def test_torch_zeros_keep_strides():
    torch = pytest.importorskip("torch")
    z = adapter_for("torch").zeros((3, 4), "float16", stride=(1, 3))
    assert z.stride() == (1, 3) and z.dtype == torch.float16 and not z.any()


def test_numpy_and_dlpack_round_trips(fw):
    name, module, adapter = fw
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = adapter.from_numpy(array)
    assert type(t) is module.Tensor and t.tolist() == array.tolist()
    back = adapter.to_numpy(t.requires_grad_(True) if name == "torch" else t)
    assert np.array_equal(back, array)
    other = "torch" if name == "tensorplay" else "tensorplay"
    pytest.importorskip(other)
    crossed = adapter_for(other).from_dlpack(t.detach())
    assert framework_of(crossed) == other and crossed.tolist() == array.tolist()


def test_grad_mode_and_no_grad(fw):
    name, module, adapter = fw
    assert adapter.is_grad_enabled() == module.is_grad_enabled()
    with adapter.no_grad():
        assert not adapter.is_grad_enabled() and not module.is_grad_enabled()
    with adapter.set_grad_enabled(False):
        assert adapter.grad_mode_query()() is False
    assert adapter.is_grad_enabled()
    assert adapter.autograd_function() is module.autograd.Function


def test_fork_rng_restores_the_stream(fw):
    name, module, adapter = fw
    module.manual_seed(3)
    with adapter.fork_rng():
        module.rand(4)
    after = module.rand(4).tolist()
    module.manual_seed(3)
    assert module.rand(4).tolist() == after


def test_private_generator_leaves_the_global_stream(fw):
    name, module, adapter = fw
    module.manual_seed(5)
    want = module.rand(3).tolist()
    module.manual_seed(5)
    first = adapter.randn((4,), "float32", generator=adapter.generator(None, 1)).tolist()
    assert module.rand(3).tolist() == want
    assert adapter.randn((4,), "float32", generator=adapter.generator(None, 1)).tolist() == first


def test_types_and_default_float(fw):
    name, module, adapter = fw
    assert adapter.tensor_type() is module.Tensor and adapter.module_type() is module.nn.Module
    assert adapter.default_float() == "float32"
    assert adapter.functional() is sys.modules[f"{name}.nn.functional"]
    assert adapter.method("relu") is module.Tensor.relu
    with pytest.raises(ValueError, match="not a module of"):
        adapter.loaded_module("numpy")


def test_adapters_import_their_framework_lazily():
    code = ("import sys, tensorplay_graph\n"
            "from tensorplay_graph.frameworks import adapter_for, framework_of, loaded\n"
            "adapters = [adapter_for(n) for n in ('tensorplay', 'torch')]\n"
            "assert framework_of(1.0) is None and loaded() == ()\n"
            "assert not [m for m in ('torch', 'tensorplay') if m in sys.modules], sys.modules.keys()\n")
    subprocess.run([sys.executable, "-c", code], check=True)
