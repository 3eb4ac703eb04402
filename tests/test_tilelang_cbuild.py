"""TileLang C builds: plain C where the lowered source is plain C, one build per distinct C."""

import os
import tempfile

import numpy as np
import pytest

os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tpg-tilelang-"))

tilelang = pytest.importorskip("tilelang")
torch = pytest.importorskip("torch")

from tensorplay_graph.backends.tilelang import cbuild  # noqa: E402
from tensorplay_graph.backends.tilelang.pointwise import (  # noqa: E402
    PointwiseDesc, PwInput, PwOutput, PwStep, compile_pointwise)


def _desc(sources):
    return PointwiseDesc((65536,), (PwInput("x", (65536,), "float32"),),
                         (PwStep("s", "T.sqrt(a0_0 * a0_1)", operands=(("a0_0", "x", False), ("a0_1", "2.0", True))),
                          PwStep("t", "T.trunc(a1_0)", operands=(("a1_0", "s", False),))),
                         (PwOutput("t", "float32"),), sources)


def test_plain_c_kernel_is_built_as_c_and_once_per_distinct_source(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    first = compile_pointwise(_desc(("a = x * 2",)), "c")
    second = compile_pointwise(_desc(("b = y * 2",)), "c")  # other comments, same C
    assert first.key != second.key and first.c_source == second.c_source
    built = list((tmp_path / "tensorplay_graph").glob("tl_*.so"))
    assert len(built) == 1
    assert "tl_templates" not in built[0].with_suffix(".cc").read_text()
    x = torch.linspace(-4, 1e6, 65536)
    # numpy's float32 sqrt is correctly rounded, as the C kernel's sqrtf; torch's AVX-512 sqrt
    # is not always (sqrt(790320.9375) gives 889.0, not 888.99994), and trunc shows that ulp.
    want = torch.from_numpy(np.trunc(np.sqrt(x.numpy() * np.float32(2))))
    torch.testing.assert_close(second(x)[0], want, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("line", [
    "half h = half(x[0]);",                  # TileLang's half type (C++ header)
    "*(float4*)(out0 + 0) = v;",             # TileLang's vector types
    "out0[0] = tl::clamp(x[0], a, b);",      # its C++ helpers
    "out0[0] = expf(x[0]);",                 # libm outside the allow list
    "out0[0] = pow(x[0], 2.0f);",            # overloaded in C++: float there, double in C
])
def test_anything_beyond_plain_c_keeps_tilelangs_header(line):
    source = compile_pointwise(_desc(()), "c").c_source
    assert cbuild.plain_c(source) is not None
    source = source.replace("return 0;", line + "\n  return 0;")
    assert cbuild.plain_c(source) is None
