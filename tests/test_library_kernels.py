"""wrap_triton / wrap_tilelang outside capture: validation, pass-through, DLPack crossing."""

from __future__ import annotations

import pytest

from tensorplay_graph import library as L
from test_library_helpers import fw  # noqa: F401 - fixture


class _Launcher:
    """A grid-indexable launcher recording what it was launched with."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            args[1].copy_(args[0] * 2)  # writes through whatever view it received
            return "launched"

        return launch


class _TileKernel:
    _tilelang_kernel = True

    def __init__(self):
        self.seen = []

    def __call__(self, a):
        self.seen.append(type(a))
        return a + 1


def test_wrap_triton_passes_through_and_crosses_to_torch(fw):
    torch = pytest.importorskip("torch")
    launcher = _Launcher()
    wrapped = L.wrap_triton(launcher)
    assert L.wrap_triton(wrapped) is wrapped
    x, out = fw.tensor([1.0, 2.0]), fw.tensor([0.0, 0.0])
    assert wrapped[(1,)](x, out, BLOCK=4) == "launched"
    grid, args, kwargs = launcher.launches[0]
    assert grid == (1,) and kwargs == {"BLOCK": 4}
    assert all(isinstance(a, torch.Tensor) for a in args)  # TensorPlay crossed through DLPack
    assert fw.np(out).tolist() == [2.0, 4.0]  # zero-copy: the caller's tensor was written


@pytest.mark.parametrize("bad", [lambda: None, 3, "kernel"])
def test_wrap_triton_rejects_non_kernels(bad):
    if isinstance(bad, str):  # strings are indexable: accepted like any launcher, as in the seed
        assert isinstance(L.wrap_triton(bad), L.TritonKernelWrapper)
        return
    with pytest.raises(TypeError, match="JITFunction"):
        L.wrap_triton(bad)


def test_wrap_tilelang_duck_typed_and_round_trip(fw):
    kernel = _TileKernel()
    wrapped = L.wrap_tilelang(kernel)
    assert L.wrap_tilelang(wrapped) is wrapped
    out = wrapped(fw.tensor([1.0]))
    assert type(out) is type(fw.tensor([0.0])) and fw.np(out).tolist() == [2.0]
    assert kernel.seen[0].__module__.startswith("torch")


def test_wrap_tilelang_rejections_and_lazy_compile():
    with pytest.raises(TypeError, match="plain callable"):
        L.wrap_tilelang(lambda a: a)
    with pytest.raises(TypeError, match="callable"):
        L.wrap_tilelang(object())

    class Opted:
        _tilelang_kernel = False

        def __call__(self):
            return None

    with pytest.raises(TypeError):
        L.wrap_tilelang(Opted())

    class Factory:
        _tilelang_kernel = True

        def __call__(self, n):
            return _TileKernel()

    bound = L.wrap_tilelang(Factory()).compile(16)
    assert isinstance(bound, L.TileLangKernelWrapper) and isinstance(bound.kernel, _TileKernel)
