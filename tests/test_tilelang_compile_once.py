"""TileLang GEMMs: the same GEMM + epilogue in every layer compiles once, in the background."""

import os
import tempfile

import pytest

os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tpg-tilelang-"))
pytest.importorskip("tilelang")

from tensorplay_graph.backends.tilelang import gemm  # noqa: E402
from tensorplay_graph.backends.tilelang.gemm import EpInput, EpStep, GemmDesc, GemmKernel  # noqa: E402


def layer_gemm(prefix: str, n: int = 256) -> GemmDesc:
    """One layer's linear + bias + gelu, named after the layer as capture names its nodes."""
    bias, lin = f"{prefix}_bias", f"{prefix}_linear"
    return GemmDesc(128, n, 64, "bfloat16", "bfloat16", True, 0,
                    (EpInput(bias, "col", "bfloat16"),),
                    (EpStep(lin, f"(acc_v + {bias}_v)"),
                     EpStep(f"{prefix}_gelu", f"{lin}_v * 0.5 * (1 + T.erf({lin}_v * 0.7071))")),
                    f"{prefix}_gelu", (f"{prefix}_linear = linear(x, w, {bias})",))


def test_layers_share_one_program_and_keep_readable_sources():
    k1, k2 = GemmKernel(layer_gemm("h_0")), GemmKernel(layer_gemm("h_1"))
    assert k1.source != k2.source and "h_0_linear_v" in k1.source   # what explain() shows
    assert k1.compiled_source == k2.compiled_source and k1.key == k2.key
    assert "st0_v = (acc_v + ep0_v)" in k1.compiled_source
    assert "st1_v = st0_v * 0.5 * (1 + T.erf(st0_v * 0.7071))" in k1.compiled_source
    assert "C_local[i, j] = st1_v" in k1.compiled_source
    assert GemmKernel(layer_gemm("h_0", n=512)).key != k1.key        # other shape: its own


@pytest.mark.parametrize("threads", ["1", "4"])
def test_identical_kernels_compile_once(monkeypatch, threads):
    monkeypatch.setenv("TPG_TILELANG_COMPILE_THREADS", threads)
    monkeypatch.setattr(gemm, "_BUILT", {})
    compiled = []

    def fake_compile(source, key, n_params, label):
        compiled.append(key)
        return lambda *args: ("ran", key)
    monkeypatch.setattr(gemm, "_compile_program", fake_compile)
    kernels = [GemmKernel(layer_gemm(f"h_{i}")).build_async() for i in range(6)]
    kernels.append(GemmKernel(layer_gemm("h_0", n=512)).build_async())
    fns = {k.build()._fn(None)[1] for k in kernels}
    assert len(compiled) == 2 and len(fns) == 2
