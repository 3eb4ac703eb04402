"""Hand-written variants of the add + layer_norm + gelu rows kernel, timed on the GPU.

    source benchmarks/gpu_setup.sh && python benchmarks/layer_norm_rows_gpu.py

32768 x 4096 bf16 (as ``gpu.py``'s workload), one row per program, 4 warps, Triton's
``do_bench`` (median, L2 flushed); Inductor and a copy of the same bytes timed in the same
run. What the variants isolate (each the generated kernel's shape, written out by hand):

* moments: ``check`` (sum, max, min, then the squared deviations: a constant row exact by
  ``max == min``), ``corrected`` (sum, then ``sum(d)`` and ``sum(d^2)`` of ``d = x - mean``,
  deviations of rows with a mean over 2^60 scaled by 2^-64: what ``prims/norms.py`` emits),
  ``plain`` (sum, squared deviations: no exactness for constant rows; the floor);
* ``early``: weight and bias loaded before the reductions (held in registers across them);
* ``nomask``: no mask (rows fill their block);
* ``bcast``: weight and bias addressed by column only (no row offset times a zero stride).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile

import torch
import torch.nn.functional as F
from triton.testing import do_bench

M, N = 32768, 4096
ERF = ("(1.0 - ((((1.061405429 * T - 1.453152027) * T + 1.421413741) * T - 0.284496736) * T "
       "+ 0.254829592) * T * tl.exp(-z * z)) * tl.where(z < 0, -1.0, 1.0)")
MOMENTS = {
    "check": """
    s = tl.sum(tl.where(mask, add, 0.0), axis=0)
    top = tl.max(tl.where(mask, add, float('-inf')), axis=0)
    bot = tl.min(tl.where(mask, add, float('inf')), axis=0)
    mean = s / N_F
    same = ((top - bot) == 0) & (s == s)
    dev = tl.where(same, 0.0, add - mean)
    var = tl.sum(tl.where(mask, dev * dev, 0.0), axis=0) / N_F""",
    "corrected": """
    s = tl.sum(tl.where(mask, add, 0.0), axis=0)
    m0 = s / N_F
    k = tl.where(tl.abs(m0) > 1.152921504606847e18, 5.421010862427522e-20, 1.0)
    d0 = tl.where(mask, (add - m0) * k, 0.0)
    s1 = tl.sum(d0, axis=0)
    s2 = tl.sum(d0 * d0, axis=0)
    c = s1 / N_F
    mean = m0 + c / k
    sq = s2 - s1 * c
    var = tl.where(sq < 0, 0.0, sq) / N_F / k / k
    dev = add - mean""",
    "plain": """
    mean = tl.sum(tl.where(mask, add, 0.0), axis=0) / N_F
    dev = tl.where(mask, add - mean, 0.0)
    var = tl.sum(dev * dev, axis=0) / N_F""",
}
TEMPLATE = """
import triton
import triton.language as tl

@triton.jit
def kern(x_ptr, r_ptr, w_ptr, b_ptr, o_ptr, n_cols, sx, sr, sw, sb, so, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    N_F = 4096.0
    x = tl.load(x_ptr + row * sx + cols, mask=mask, other=0).to(tl.float32)
    r = tl.load(r_ptr + row * sr + cols, mask=mask, other=0).to(tl.float32)
{EARLY}
    add = (x + r).to(tl.bfloat16).to(tl.float32)
{MOMENTS}
    rstd = 1.0 / tl.sqrt(var + 1e-05)
{LATE}
    ln = ((dev * rstd) * w + b).to(tl.bfloat16).to(tl.float32)
    z = ln * 0.7071067811865476
    T = 1.0 / (1.0 + 0.3275911 * tl.abs(z))
    g = 0.5 * ln * (1.0 + {ERF})
    tl.store(o_ptr + row * so + cols, g.to(tl.bfloat16), mask=mask)
"""
LOADS = """    w = tl.load(w_ptr + row * sw + cols, mask=mask, other=0).to(tl.float32)
    b = tl.load(b_ptr + row * sb + cols, mask=mask, other=0).to(tl.float32)"""


def build(moments: str, early: bool, nomask: bool, bcast: bool):
    src = (TEMPLATE.replace("{MOMENTS}", MOMENTS[moments]).replace("{ERF}", ERF)
           .replace("{EARLY}", LOADS if early else "").replace("{LATE}", "" if early else LOADS))
    if nomask:
        src = src.replace(", mask=mask, other=0)", ")").replace(", mask=mask)", ")")
        for masked in ("add", "add - mean", "(add - m0) * k"):
            src = src.replace(f"tl.where(mask, {masked}, 0.0)", masked)
    if bcast:
        src = src.replace("row * sw + cols", "cols").replace("row * sb + cols", "cols")
    path = os.path.join(tempfile.mkdtemp(), "layer_norm_variant.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("layer_norm_variant", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kern


def main():
    x, r = (torch.randn(M, N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w, b = (torch.randn(N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    want = F.gelu(F.layer_norm(x + r, (N,), w, b))
    out = torch.empty_like(x)
    src = torch.empty(3 * M * N // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    bench = lambda fn: do_bench(fn, warmup=10, rep=100, return_mode="median")  # noqa: E731
    t_copy = bench(lambda: dst.copy_(src))
    inductor = torch.compile(lambda x, r, w, b: F.gelu(F.layer_norm(x + r, (N,), w, b)))
    inductor(x, r, w, b)
    t_ind = bench(lambda: inductor(x, r, w, b))
    print(f"copy of the same bytes {t_copy:.4f} ms; Inductor {t_ind:.4f} ms")
    for moments in MOMENTS:
        for early, nomask, bcast in ((1, 0, 0), (0, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1)):
            kern = build(moments, early, nomask, bcast)
            call = lambda: kern[(M,)](x, r, w, b, out, N, N, N, 0, 0, N,  # noqa: E731
                                      BLOCK_N=N, num_warps=4)
            call()
            err = (out.float() - want.float()).abs().max().item()
            t = bench(call)
            print(f"{moments:9s} early={early} nomask={nomask} bcast={bcast}: {t:.4f} ms, "
                  f"{t_copy / t:.1%} of copy, {t_ind / t:.2f}x Inductor, max |err| {err:.3g}")


if __name__ == "__main__":
    main()
