"""Autocast around or inside a compiled program (``capture/autocast.py``): the results must
have eager's dtypes and values, on lowered kernels too. Before, an autocast region inside the
program was dropped (float32 where eager gives bfloat16), ``autocast(enabled=False)`` inside
a call made under autocast was too, and a program lowered to the reference backend crashed
when called under autocast (bfloat16 tensors reached its float32 numpy kernels)."""

from __future__ import annotations

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}


def check(got, want):
    assert str(got.dtype) == str(want.dtype)
    np.testing.assert_allclose(np.asarray(got.float().tolist()),
                               np.asarray(want.float().tolist()), rtol=1e-2, atol=1e-2)


def plain(x, w):
    return (x @ w).relu() * 2.0


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
@pytest.mark.parametrize("backend", ["auto", "reference"])
@pytest.mark.parametrize("first", ["plain", "autocast"])
def test_calls_under_autocast_get_eagers_dtypes(fw, backend, first):
    lib = FRAMEWORKS[fw]
    patchable = [(cls, vars(cls)[name]) for cls in (tp.autocast, torch.autocast, tp.no_grad,
                                                   torch.no_grad) for name in ("__enter__",)]
    compiled = tpg.compile(plain, backend=backend)
    x, w = lib.randn(8, 8), lib.randn(8, 8)
    order = ["plain", "autocast"] if first == "plain" else ["autocast", "plain"]
    for how in order * 2:
        if how == "autocast":
            with lib.autocast("cpu", dtype=lib.bfloat16):
                check(compiled(x, w), plain(x, w))
        else:
            check(compiled(x, w), plain(x, w))
    # a capture abandoned for autocast leaves the frameworks' contexts as they were
    assert all(vars(cls)["__enter__"] is enter for cls, enter in patchable)


def region(lib):
    def f(x, w):
        with lib.autocast("cpu", dtype=lib.bfloat16):
            y = x @ w
        return y * 2.0
    return f


def disabled(lib):
    def f(x, w):
        with lib.autocast("cpu", enabled=False):
            return (x @ w) + 1.0
    return f


def _compiled_twice(make, lib):
    f = make(lib)
    compiled = tpg.compile(f)
    x, w = lib.randn(8, 8), lib.randn(8, 8)
    for _ in range(2):
        check(compiled(x, w), f(x, w))
    return f, compiled, x, w


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_an_autocast_region_inside_the_program_keeps_its_dtype(fw):
    _, compiled, _, _ = _compiled_twice(region, FRAMEWORKS[fw])
    assert "autocast" in compiled.explain()


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_a_disabled_autocast_region_stays_captured_and_disables_under_autocast(fw):
    lib = FRAMEWORKS[fw]
    f, compiled, x, w = _compiled_twice(disabled, lib)
    assert compiled.frontend == "tensorplay_graph" and compiled.captures == 1
    with lib.autocast("cpu", dtype=lib.bfloat16):
        got, want = compiled(x, w), f(x, w)
    assert str(want.dtype).endswith("float32")
    check(got, want)
