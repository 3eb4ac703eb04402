"""A real @triton.jit kernel inside a triton_op, run by Triton's CPU interpreter.

This directory runs in its own pytest process with TRITON_INTERPRET=1 set
before Python starts (see scripts/test.sh).
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest


import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from tensorplay_graph import library as L  # noqa: E402
from tensorplay_graph.capture import capture  # noqa: E402
from tensorplay_graph.errors import GraphCaptureError  # noqa: E402


@triton.jit
def _axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n_elements, BLOCK: tl.constexpr):
    # One program per BLOCK elements; every load/store masked (OOB stores corrupt memory).
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, alpha * x + y, mask=mask)


BLOCK = 1024


def _define_axpy():
    @L.triton_op(f"interp_{uuid.uuid4().hex[:6]}::axpy", mutates_args=())
    def axpy(x, y, alpha: float = 2.0):
        out = x.new_empty(x.shape)
        n = x.numel()
        L.wrap_triton(_axpy_kernel)[(triton.cdiv(n, BLOCK),)](x, y, out, alpha, n, BLOCK=BLOCK)
        return out

    axpy.register_fake(lambda x, y, alpha=2.0: x.new_empty(x.shape))
    return axpy


def _inputs(framework: str, n: int = 3000):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    if framework == "torch":
        return torch.from_numpy(x), torch.from_numpy(y), x, y
    tp = pytest.importorskip("tensorplay")
    return tp.tensor(x.tolist(), dtype=tp.float32), tp.tensor(y.tolist(), dtype=tp.float32), x, y


def _np(t):
    return np.asarray(t.tolist(), dtype="float32")


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_triton_op_runs_in_the_interpreter(framework):
    axpy = _define_axpy()
    x, y, xn, yn = _inputs(framework)
    out = axpy(x, y, alpha=3.0)
    assert type(out) is type(x)  # TensorPlay stays TensorPlay: the kernel wrote through DLPack
    np.testing.assert_allclose(_np(out), 3.0 * xn + yn, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_triton_op_captured_as_one_node(framework):
    axpy = _define_axpy()
    x, y, xn, yn = _inputs(framework)

    def program(a, b):
        return axpy(a * 2, b) + 1

    gm = capture(program, x, y)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is axpy]
    assert len(nodes) == 1 and axpy.is_triton_op
    np.testing.assert_allclose(_np(gm(x, y)), 2.0 * (2 * xn) + yn + 1, rtol=1e-5, atol=1e-5)


def test_raw_triton_launch_under_capture_raises():
    x, y, _, _ = _inputs("torch", 16)

    def program(a, b):
        out = torch.empty_like(a)
        L.wrap_triton(_axpy_kernel)[(1,)](a, b, out, 1.0, 16, BLOCK=16)
        return out

    with pytest.raises(GraphCaptureError, match="triton_op"):
        capture(program, x, y)


def test_wrap_triton_accepts_jit_functions_only():
    wrapped = L.wrap_triton(_axpy_kernel)
    assert L.wrap_triton(wrapped) is wrapped
    with pytest.raises(TypeError, match="JITFunction"):
        L.wrap_triton(lambda: None)
