"""GPU benchmarks of the product: tensorplay_graph.compile(program, backend="triton")
vs torch eager and torch.compile (Inductor), all measured in the same run.

Run on the H200 (device tool):  PYTHONPATH=$PWD python benchmarks/gpu.py --out $OUT
Workloads are rows of WORKLOADS: (name, plain torch program, inputs factory, ideal bytes
moved, launch bound). Each program goes through the whole product path: capture ->
normalize -> shape_prop -> barriers -> partition -> lower -> cleanup -> run. Results print
as JSON lines and go to <out>/gpu_results.json. (TileLang rows: benchmarks/gpu_tilelang.py.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# before torch: the benchmark's caches start empty (cold compiles)
from gpu_common import (M, N, BF, _rnd, add_ln_gelu, as_tuple, bench_gpu,  # noqa: E402,F401
                        bench_wall, chain, check, column_sum, copy_bandwidth, cross_entropy,
                        cross_entropy_upcast, first_call, fresh_caches, kernel_only, peak_mb,
                        softmax, summary)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tensorplay_graph as tpg  # noqa: E402

# The region builder is a test fixture (tests/interp/triton_regions.py), not shipped.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "interp"))

ONLY = []  # --workloads filter




V = 32000  # vocabulary of the cross-entropy rows (8192 tokens)


def _logits():
    target = torch.randint(0, V, (8192,), device="cuda")
    target[::97] = -100  # a few ignored tokens, as padding gives
    return _rnd(8192, V, dtype=BF), target


#: What each workload must lower to, beyond "one region kernel, nothing eager": text every
#: generated kernel source holds, and how many @triton.jit functions the region has.
EXPECT = {
    "column sum 32768x4096 bf16 over dim 0": {"holds": ["BLOCK_R", "tickets_ptr"], "jit": 1},
    "cross_entropy(logits.float()) 8192x32000 bf16": {"holds": ["cross_entropy_rows_max"], "jit": 2},
    "cross_entropy 8192x32000 bf16": {"holds": ["cross_entropy_rows_max"], "jit": 2},
}

WORKLOADS = [
    # name, program, inputs, bytes moved (ideal), launch_bound
    ("pointwise chain 64M fp32", chain, lambda: (_rnd(64 * 2 ** 20), _rnd(64 * 2 ** 20)), 3 * 4 * 64 * 2 ** 20, False),
    ("softmax 32768x4096 bf16", softmax, lambda: (_rnd(M, N, dtype=BF),), 2 * 2 * M * N, False),
    ("add+layer_norm+gelu 32768x4096 bf16", add_ln_gelu,
     lambda: (_rnd(M, N, dtype=BF), _rnd(M, N, dtype=BF), _rnd(N, dtype=BF), _rnd(N, dtype=BF)), 3 * 2 * M * N, False),
    ("pointwise chain 1024 fp32 (launch bound)", chain, lambda: (_rnd(1024), _rnd(1024)), 3 * 4 * 1024, True),
    ("column sum 32768x4096 bf16 over dim 0", column_sum, lambda: (_rnd(M, N, dtype=BF),), 2 * M * N, False),
    ("cross_entropy(logits.float()) 8192x32000 bf16", cross_entropy_upcast, _logits, 2 * 8192 * V, False),
    ("cross_entropy 8192x32000 bf16", cross_entropy, _logits, 2 * 8192 * V, False),
]


def expect_kernels(name, program, args):
    """The region's generated source holds what ``EXPECT`` says (the intended kernel kind)."""
    want = EXPECT.get(name)
    if want is None:
        return
    source = tpg.explain(program, *args, backend="triton").kernels[0].source
    jits = source.count("@triton.jit")
    missing = [text for text in want["holds"] if text not in source]
    assert not missing and jits == want["jit"], \
        f"{name}: expected {want}, got {jits} kernels lacking {missing}:\n{source}"


# ----------------------------------------------------------------------------- steps
def run_workloads(results):
    copy_gbs = copy_bandwidth()
    results["copy_GBps"] = copy_gbs
    print(f"device copy bandwidth: {copy_gbs:.0f} GB/s", flush=True)
    for index, (name, program, make, nbytes, launch_bound) in enumerate(WORKLOADS):
        if ONLY and not any(word in name for word in ONLY):
            continue
        args = make()
        ref = program(*args)
        tol = 1e-4 if args[0].dtype == torch.float32 else 6e-2
        fresh_caches()
        ours = tpg.compile(program, backend="triton")
        out, ours_cold = first_call(ours, args)
        check(out, ref, tol)
        shape = summary(ours)
        assert shape["eager"] == [] and len(shape["kernels"]) == 1, f"{name}: lowered to {shape}"
        expect_kernels(name, program, args)
        fresh_caches()
        ind = torch.compile(program)
        _, ind_cold = first_call(ind, args)
        row = {"workload": name, "lowered": shape, "cold_s_ours": ours_cold,
               "cold_s_inductor": ind_cold, "cold_ratio": ours_cold / ind_cold}
        if index == 0:
            row["note"] = "Inductor's first compile of the process (starts its compile workers)"
        fns = {"eager": program, "inductor": ind, "ours": ours}
        kernel = kernel_only(ours, args)
        if kernel is not None:
            fns["ours_kernel_only"] = kernel
        if launch_bound:
            graphs = tpg.compile(program, backend="triton", options={"cuda_graphs": True})
            for _ in range(3):
                check(graphs(*args), ref, tol)
            fns["ours+cuda_graphs"] = graphs
            fns["inductor_reduce_overhead"] = torch.compile(program, mode="reduce-overhead")
            for key, fn in fns.items():
                row[f"us_{key}"] = bench_wall(fn, args)
        else:
            for key, fn in fns.items():
                row[f"ms_{key}"] = bench_gpu(fn, args)
                row[f"GBps_{key}"] = nbytes / row[f"ms_{key}"] / 1e6
            row["pct_copy_bw_ours"] = 100 * row["GBps_ours"] / copy_gbs
        for key in ("eager", "inductor", "ours"):
            row[f"peak_MB_{key}"] = peak_mb(fns[key], args)
            row[f"peak_extra_MB_{key}"] = peak_mb(fns[key], args, extra=True)
        unit = "us" if launch_bound else "ms"
        row["speedup_vs_inductor"] = row[f"{unit}_inductor"] / row[f"{unit}_ours"]
        row["speedup_vs_eager"] = row[f"{unit}_eager"] / row[f"{unit}_ours"]
        if launch_bound:
            row["time_vs_inductor"] = row["us_ours"] / row["us_inductor"]
            row["cuda_graphs_time_vs_inductor"] = row["us_ours+cuda_graphs"] / row["us_inductor"]
        results["workloads"].append(row)
        print(json.dumps(row), flush=True)
        del args, ours, ind, fns, kernel, ref, out
        torch.cuda.empty_cache()


def _make_scale_op():
    import triton
    import triton.language as tl
    from tensorplay_graph.library import triton_op, wrap_triton

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

    @triton_op("tpgbench::scale2", mutates_args=())
    def scale2(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        wrap_triton(scale_kernel)[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out

    scale2.register_fake(lambda x: torch.empty_like(x))
    return scale2


_SCALE_OP = []


def scale_op():
    if not _SCALE_OP:
        _SCALE_OP.append(_make_scale_op())
    return _SCALE_OP[0]


def make_model(op, blocks=4, width=1024):
    """Blocks (x + r -> layer_norm -> gelu) separated by the ``op`` barrier."""
    def model(x, r, w, b):
        for i in range(blocks):
            x = F.gelu(F.layer_norm(x + r, (width,), w, b))
            if i < blocks - 1:
                x = op(x)
        return x
    return model


def model_workload(results, blocks=4, rows=8192, width=1024):
    op = scale_op()
    program = make_model(op, blocks, width)
    args = (_rnd(rows, width, dtype=BF), _rnd(rows, width, dtype=BF), _rnd(width, dtype=BF),
            _rnd(width, dtype=BF))
    fresh_caches()
    ours = tpg.compile(program, backend="triton")
    out, cold = first_call(ours, args)
    shape = summary(ours)
    assert shape["eager"] == [] and len(shape["kernels"]) == 2 * blocks - 1, shape
    fresh_caches()
    ind = torch.compile(make_model(torch.compiler.disable(op), blocks, width))
    _, ind_cold = first_call(ind, args)
    ref = program(*args)
    # bf16 through 4 blocks: eager rounds every op to bf16, the fused kernels round once.
    bad = ((out.float() - ref.float()).abs() > 0.1 + 0.1 * ref.float().abs()).float().mean().item()
    assert bad < 1e-4, f"model: {bad:.2e} of the outputs differ from eager beyond bf16 tolerance"
    graphs = tpg.compile(program, backend="triton", options={"cuda_graphs": True})
    for _ in range(3):
        graphs(*args)
    torch.testing.assert_close(graphs(*args).float(), out.float(), atol=1e-2, rtol=1e-2)
    row = {"workload": f"model: {blocks} x (add+layer_norm+gelu {rows}x{width} bf16) with "
                       f"{blocks - 1} triton_op barriers", "lowered": shape,
           "cold_s_ours": cold, "cold_s_inductor": ind_cold, "cold_ratio": cold / ind_cold}
    fns = {"eager": program, "inductor": ind, "ours": ours, "ours+cuda_graphs": graphs}
    for key, fn in fns.items():
        row[f"ms_{key}"] = bench_gpu(fn, args)
        row[f"us_wall_{key}"] = bench_wall(fn, args, iters=300)
    for key in ("eager", "inductor", "ours"):
        row[f"peak_MB_{key}"] = peak_mb(fns[key], args)
    row["speedup_vs_inductor"] = row["ms_inductor"] / row["ms_ours"]
    row["speedup_vs_eager"] = row["ms_eager"] / row["ms_ours"]
    results["workloads"].append(row)
    print(json.dumps(row), flush=True)


def correctness(results):
    """The product path on the shared case table (fp32/fp16/bf16), barriers, auto, CUDA graphs."""
    from triton_regions import TOLERANCE, as_function, cases
    report = {}

    def attempt(key, body):
        try:
            report[key] = body()
        except Exception as exc:  # report every failure, keep going
            report[key] = f"FAIL {type(exc).__name__}: {str(exc)[:300]}"

    for name, program, factory in cases():
        for dt in ("float32", "float16", "bfloat16"):
            def body(program=program, factory=factory, dt=dt):
                args = factory("cuda", getattr(torch, dt))
                fn = as_function(program, len(args))
                compiled = tpg.compile(fn, backend="triton")
                got, want = as_tuple(compiled(*args)), as_tuple(fn(*args))
                atol, rtol = TOLERANCE[dt]
                for g, w in zip(got, want):
                    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
                    torch.testing.assert_close(g.float(), w.float(), atol=atol, rtol=rtol, equal_nan=True)
                shape = summary(compiled)
                assert shape["kernels"] and not shape["eager"], f"not lowered: {shape}"
                return f"ok ({len(shape['kernels'])} kernel(s))"
            attempt(f"{name}/{dt}", body)

    def barriers():
        program = make_model(scale_op(), 3, 256)
        args = (_rnd(64, 256), _rnd(64, 256), _rnd(256), _rnd(256))
        compiled = tpg.compile(program, backend="triton")
        check(compiled(*args), program(*args), 1e-4)
        shape = summary(compiled)
        assert sum(k.startswith("triton_op_") for k in shape["kernels"]) == 2 and not shape["eager"], shape
        return f"ok {shape}"
    attempt("triton_op barriers", barriers)

    def auto():
        compiled = tpg.compile(chain, backend="auto")
        args = (_rnd(4096), _rnd(4096))
        check(compiled(*args), chain(*args), 1e-5)
        shape = summary(compiled)
        assert shape["kernels"] == ["triton_region_0"], shape
        return f"ok {shape}"
    attempt("backend=auto picks triton", auto)

    def cuda_graphs():
        compiled = tpg.compile(chain, backend="triton", options={"cuda_graphs": True})
        x, y = _rnd(1024), _rnd(1024)
        for _ in range(3):  # warm-up, capture over x/y, direct replay
            check(compiled(x, y), chain(x, y), 1e-5)
        runner = next(iter(compiled.specializations.values())).lowered
        assert type(runner).__name__ == "CudaGraphRunner" and runner.captures == 1, runner
        x2, y2 = _rnd(1024), _rnd(1024)
        keep = x.clone()
        check(compiled(x2, y2), chain(x2, y2), 1e-5)  # other tensors: private buffers
        x.mul_(3)  # the direct graph reads the caller's tensors as they are now
        check(compiled(x, y).clone(), chain(x, y), 1e-5)
        assert torch.equal(x, keep * 3), "CudaGraphRunner wrote into a caller's tensor"
        return f"ok ({runner.captures} graphs)"
    attempt("cuda_graphs option", cuda_graphs)

    results["correctness"] = report
    fails = [k for k, v in report.items() if v.startswith("FAIL")]
    print(f"correctness (product path): {len(report) - len(fails)}/{len(report)} ok; "
          f"failures: {json.dumps({k: report[k] for k in fails}, indent=1)}", flush=True)


def launch_overhead(results):
    """Where a launch-bound call's CPU time goes (µs per call), and whether the direct launch is on."""
    from triton_regions import lowered_module
    args = (_rnd(1024), _rnd(1024))
    compiled = tpg.compile(chain, backend="triton")
    compiled(*args)
    gm = lowered_module(compiled)
    kernel = kernel_only(compiled, args)
    plan = next(c.cell_contents for c in kernel.fn.__closure__
                if type(c.cell_contents).__name__ == "KernelPlan")
    outs = plan(*args)
    spec, allocate = next(iter(plan._specs.values()))[:2]
    operands = args + tuple(outs)
    parts = {
        "tpg.compile call": lambda: compiled(*args),
        "lowered GraphModule call": lambda: gm(*args),
        "kernel call": lambda: kernel(*args),
        "plan call": lambda: plan(*args),
        "specialized launch (outputs preallocated)": lambda: spec.launch(operands),
        "jit_fn[grid](...) launch": lambda: spec.jit_fn[spec.grid](*spec._args(operands), **spec.options),
        "torch.empty": lambda: torch.empty((1024,), dtype=torch.float32, device="cuda"),
        "torch.empty_like": lambda: torch.empty_like(args[0]),
        "output allocation (plan)": lambda: allocate(args),
    }
    report = {}
    for name, fn in parts.items():
        fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(5000):
            fn()
        torch.cuda.synchronize()
        report[name] = (time.perf_counter() - start) / 5000 * 1e6
    report["launcher_state"] = spec._state
    report["fast_path_active"] = spec._state == "fast"
    check(compiled(*args), chain(*args), 1e-5)  # still right after thousands of direct launches
    results["launch_overhead_us"] = report
    print(json.dumps(report, indent=1), flush=True)


#: ``--column-configs``: the column-sum configurations to sweep instead of the default list
COLUMN_CONFIGS: list = []


def sweep(results):
    """Column-sum tile / split configurations and cross-entropy row warps, fresh compiles each
    (``TPG_TRITON_COLUMN_CONFIG``, ``TPG_TRITON_ROW_WARPS``): which defaults to keep. With
    ``--column-configs`` only those column sums."""
    report = {}
    x = _rnd(M, N, dtype=BF)
    ref = column_sum(x)
    configs = COLUMN_CONFIGS or [
        f"{r},{k},{w}" + (f",{sp}" if sp else "") for r, k, w in
        ((32, 256, 8), (64, 128, 8), (16, 256, 4), (32, 128, 4), (64, 256, 8), (16, 512, 8))
        for sp in ("", 16, 32, 64, 128)]
    rows = [] if COLUMN_CONFIGS else [
        (f"cross_entropy warps {w}", ("TPG_TRITON_ROW_WARPS", str(w)), cross_entropy_upcast,
         None, None) for w in (4, 8, 16, 32)]
    for key, env, program, args, want in (
            [("colsum " + c, ("TPG_TRITON_COLUMN_CONFIG", c), column_sum, (x,), ref) for c in configs]
            + rows):
        os.environ[env[0]] = env[1]
        try:
            if args is None:
                args = _logits()
                want = program(*args)
            compiled = tpg.compile(program, backend="triton")
            check(compiled(*args), want, 6e-2)
            ms = bench_gpu(compiled, args)
            nbytes = sum(a.numel() * a.element_size() for a in args)
            report[key] = {"ms": ms, "GBps": nbytes / ms / 1e6}
        except Exception as exc:  # a config that does not build is a result too
            report[key] = f"FAIL {type(exc).__name__}: {str(exc)[:200]}"
        finally:
            del os.environ[env[0]]
        print(key, report[key], flush=True)
    results["sweep"] = report


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--only", default="workloads,model,correctness,overhead",
                        help="comma-separated steps (also: sweep)")
    parser.add_argument("--workloads", default="",
                        help="only the workloads whose name contains one of these comma-separated words")
    parser.add_argument("--column-configs", default="",
                        help="sweep: ';'-separated BLOCK_R,BLOCK_K,WARPS[,SPLIT] column-sum configs")
    opts = parser.parse_args(argv)
    ONLY[:] = [w for w in opts.workloads.split(",") if w]
    COLUMN_CONFIGS[:] = [c for c in opts.column_configs.split(";") if c]
    os.makedirs(opts.out, exist_ok=True)
    import triton
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "device": torch.cuda.get_device_name(),
               "torch": torch.__version__, "triton": triton.__version__, "workloads": []}
    torch.cuda.init()
    steps = {"correctness": correctness, "workloads": run_workloads, "model": model_workload,
             "overhead": launch_overhead, "sweep": sweep}
    for step in opts.only.split(","):
        if step not in steps:
            continue
        start = time.perf_counter()
        try:
            steps[step](results)
        except Exception as exc:
            import traceback
            traceback.print_exc()
            results[f"error_{step}"] = f"{type(exc).__name__}: {exc}"
        results.setdefault("step_s", {})[step] = time.perf_counter() - start
        with open(os.path.join(opts.out, "gpu_results.json"), "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
