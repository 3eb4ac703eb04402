"""The GPU workload benchmark's programs and tools (``benchmarks/gpu.py``): the plain torch
programs it compiles, empty caches for cold compiles, timers, peak memory, the copy-bandwidth
anchor and result checks.

Import it before torch / triton: it points their caches at a fresh directory first.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

# Cold-compile measurements need empty caches: set before triton / torch import them.
_TMP = tempfile.mkdtemp(prefix="tpg_bench_")
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_TMP, "triton"))
os.environ.setdefault("TPG_CACHE_DIR", os.path.join(_TMP, "tpg"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_TMP, "inductor"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

M, N, BF = 32768, 4096, torch.bfloat16


def chain(x, y):
    a = x * y + 1.0
    a = torch.sigmoid(a) * x
    a = torch.relu(a - 0.5) * 2.0
    return a + y


def softmax(x):
    return torch.softmax(x, -1)


def add_ln_gelu(x, r, w, b):
    return F.gelu(F.layer_norm(x + r, (N,), w, b))


def column_sum(x):
    return x.sum(0)


def cross_entropy_upcast(logits, target):
    return F.cross_entropy(logits.float(), target)


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


def _rnd(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def fresh_caches():
    """Empty Triton / tensorplay_graph / Inductor caches (disk and memory) for a cold compile."""
    import torch._dynamo
    from tensorplay_graph.backends.triton import cache
    root = tempfile.mkdtemp(prefix="cold_", dir=_TMP)
    for var, sub in (("TRITON_CACHE_DIR", "triton"), ("TPG_CACHE_DIR", "tpg"),
                     ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
        os.environ[var] = os.path.join(root, sub)
    cache._DEFAULT = None
    for name in [m for m in sys.modules if m.startswith("tensorplay_graph_triton_")]:
        del sys.modules[name]  # generated kernel modules hold Triton's in-memory binaries
    torch._dynamo.reset()


def first_call(fn, args):
    """(result, seconds) of ``fn(*args)`` including the device work."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn(*args)
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def bench_gpu(fn, args, reps=50):
    """Median ms from CUDA events (kernel-bound workloads), L2 flushed by triton's do_bench."""
    from triton.testing import do_bench
    return do_bench(lambda: fn(*args), warmup=10, rep=reps * 2, return_mode="median")


def bench_wall(fn, args, iters=2000):
    """Wall-clock µs per call (launch-bound workloads): what the CPU-side path costs."""
    for _ in range(50):
        fn(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def peak_mb(fn, args, extra=False):
    """Peak MB allocated during a call (inputs included); ``extra``: above what was allocated
    before it (the call's own temporaries and result)."""
    fn(*args)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn(*args)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - (before if extra else 0)) / 2 ** 20


def copy_bandwidth():
    x = _rnd(64 * 2 ** 20)
    y = torch.empty_like(x)
    ms = bench_gpu(lambda a: y.copy_(a), (x,))
    return 2 * x.numel() * 4 / ms / 1e6  # GB/s


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def check(out, ref, tol):
    for o, r in zip(as_tuple(out), as_tuple(ref)):
        assert o.shape == r.shape and o.dtype == r.dtype, (o.shape, r.shape, o.dtype, r.dtype)
        torch.testing.assert_close(o.float(), r.float(), atol=tol, rtol=tol)


def summary(compiled):
    from triton_regions import lowered_summary
    return lowered_summary(compiled)


def kernel_only(compiled, args):
    """The generated kernel alone, when the program lowered to one kernel over its inputs."""
    from triton_regions import lowered_module
    gm = lowered_module(compiled)
    calls = [n for n in gm.graph.nodes if "kernel" in n.meta]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(calls) != 1 or list(calls[0].args) != placeholders[:len(args)]:
        return None
    return calls[0].meta["kernel"]
