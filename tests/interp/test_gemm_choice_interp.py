"""The cuBLAS candidate of a GEMM choice (backends/cublas_gemm.py): the framework's matmul, then
the epilogue as one Triton kernel (run here in Triton's interpreter) -- equal to eager; and the
race picks it or the TileLang kernel by the (injected) timings."""

import os
import tempfile

import pytest

os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tpg-tilelang-"))
pytest.importorskip("tilelang")
torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends import gemm_choice  # noqa: E402
from tensorplay_graph.backends.tilelang import gemm  # noqa: E402

BF = torch.bfloat16


def mlp(x, w1, b1, w2, b2):
    """linear(+bias folded into the cuBLAS call) -> silu; linear -> residual add."""
    return F.linear(F.silu(F.linear(x, w1, b1)), w2, b2) + x


def gemm_bias_relu(a, b, bias):
    """matmul, then bias and relu: an epilogue of two nodes in one Triton kernel."""
    return torch.relu(a @ b + bias) * 0.5


def _args():
    g = torch.Generator().manual_seed(0)
    return {mlp: (torch.randn(128, 64, generator=g).to(BF), torch.randn(128, 64, generator=g).to(BF),
                  torch.randn(128, generator=g).to(BF), torch.randn(64, 128, generator=g).to(BF),
                  torch.randn(64, generator=g).to(BF)),
            gemm_bias_relu: (torch.randn(64, 128, generator=g).to(BF),
                             torch.randn(128, 64, generator=g).to(BF),
                             torch.randn(64, generator=g).to(BF))}


class RunningTimer:
    """Runs each candidate once (cuBLAS really runs here; TileLang cannot on the CPU) and
    reports the times the test chose."""

    def __init__(self, ms):
        self.ms, self.calls = ms, []

    def unavailable(self):
        return None

    def device_name(self):
        return "Fake H200"

    def __call__(self, candidate):
        self.calls.append(candidate.name)
        fn = candidate.kernel()
        if candidate.name == "cublas":
            (out,) = fn(*candidate.make_args())
            assert out.dtype == BF
        return self.ms[candidate.name]


@pytest.fixture(autouse=True)
def cold(tmp_path, monkeypatch):
    monkeypatch.setenv("TPG_CACHE_DIR", str(tmp_path / "tpg"))
    monkeypatch.setenv("TPG_TILELANG_COMPILE_THREADS", "1")
    monkeypatch.setenv("TPG_STRICT_LOWERING", "1")
    monkeypatch.setattr(gemm, "_BUILT", {})
    monkeypatch.setattr(gemm, "_compile_program", lambda *a: (lambda *args: None))
    gemm_choice.forget_in_process()
    yield
    gemm_choice.forget_in_process()


def _compile(fn, policy, timer=None):
    backend_options = {"tilelang": {"device": "cuda", **({"timer": timer} if timer else {})}}
    return tpg.compile(fn, backend=["triton", "tilelang"],
                       options={"gemm": policy, "cuda_graphs": False,
                                "backend_options": backend_options})


@pytest.mark.parametrize("fn", [mlp, gemm_bias_relu], ids=lambda f: f.__name__)
def test_cublas_with_its_triton_epilogue_equals_eager(fn):
    """The race's cuBLAS candidate: matmul, then the GEMM's epilogue as one Triton kernel."""
    args = _args()[fn]
    timer = RunningTimer({"cublas": 1.0, "tilelang": 1.25})
    compiled = _compile(fn, "measure", timer)
    # eager rounds the matmul to bf16 before the epilogue: so does this candidate
    torch.testing.assert_close(compiled(*args), fn(*args), rtol=1.6e-2, atol=1e-2)
    assert timer.calls[:2] == ["cublas", "tilelang"]
    assert "cublas (cublas 1.0000 ms, tilelang 1.2500 ms; measured now)" in compiled.explain()
    steps = [k for kernel in _kernels(compiled) for k in kernel.launch.get("kernels", [])
             if isinstance(k, dict)]
    assert steps and {k["kind"] for k in steps} == {"cublas"} and all(k["epilogue"] for k in steps)
    source = next(kernel.source for kernel in _kernels(compiled) if kernel.backend == "tilelang")
    assert "@triton.jit" in source and "cuBLAS through eager dispatch" in source


@pytest.mark.parametrize("fn", [mlp, gemm_bias_relu], ids=lambda f: f.__name__)
def test_cublas_policy_plans_epilogues_apart_and_equals_eager(fn):
    """gemm="cublas": each GEMM is eager's call; its epilogue is an ordinary Triton region."""
    args = _args()[fn]
    compiled = _compile(fn, "cublas")
    torch.testing.assert_close(compiled(*args), fn(*args), rtol=1.6e-2, atol=1e-2)
    backends = {kernel.backend for kernel in _kernels(compiled)}
    assert backends == {"tilelang", "triton"}
    steps = [k for kernel in _kernels(compiled) if kernel.backend == "tilelang"
             for k in kernel.launch["kernels"]]
    assert {k["kind"] for k in steps} == {"cublas"} and not any(k["epilogue"] for k in steps)


def _kernels(compiled):
    (spec,) = compiled.specializations.values()
    return [n.meta["kernel"] for n in spec.lowered.graph.nodes if "kernel" in n.meta]
