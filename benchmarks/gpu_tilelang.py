"""GPU benchmarks of the TileLang backend: torch eager vs torch.compile (Inductor) vs tilelang.

Run on the H200 (device tool), after unpacking the bundle of ../shared/tools/gpu-bundle:
    PYTHONPATH=/tmp/site:$PWD TILELANG_CACHE_DIR=/tmp/tlcache python3 benchmarks/gpu_tilelang.py --out $OUT
Workloads: gelu(A @ B + bias) 8192^3 bf16, and a transformer MLP block
(linear -> gelu -> linear + residual). Every figure of one run is measured in
that run (median of CUDA-event timings via triton's do_bench); the tile sweep
of the autotuner is printed too. Results go to <out>/gpu_tilelang.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

BF = torch.bfloat16
RESULTS: dict = {"rows": [], "sweeps": [], "errors": []}


def gemm_gelu(a, b, bias):
    return F.gelu(torch.matmul(a, b) + bias)


def mlp(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2) + x


def _rnd(*shape, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(BF)


S, D, H = 8192, 4096, 16384
WORKLOADS = [
    # name, program, inputs factory, flops
    ("gelu(A@B+bias) 8192^3 bf16", gemm_gelu,
     lambda: (_rnd(S, S, scale=0.05), _rnd(S, S, scale=0.05), _rnd(S)), 2 * S ** 3),
    ("MLP x8192x4096 -> 16384 -> 4096 (+res) bf16", mlp,
     lambda: (_rnd(S, D), _rnd(H, D, scale=0.02), _rnd(H), _rnd(D, H, scale=0.02), _rnd(D)),
     2 * 2 * S * D * H),
]


def bench(fn, args) -> float:
    from triton.testing import do_bench
    return do_bench(lambda: fn(*args), warmup=10, rep=200, return_mode="median")


def log(msg: str) -> None:
    print(msg, flush=True)


def tilelang_compiled(program, args, autotune: bool):
    from tensorplay_graph.capture import capture
    from tensorplay_graph.passes.pipeline import compile_graph
    gm = capture(program, *args)
    return compile_graph(gm, args, backends=["tilelang"],
                         backend_options={"tilelang": {"autotune": autotune}})


def kernels_of(gm) -> list:
    out = []
    for node in gm.graph.nodes:
        kernel = node.meta.get("kernel")
        if kernel is not None:
            out.append(kernel)
    return out


def run_workload(name, program, make_inputs, flops, out_dir) -> None:
    torch.manual_seed(0)
    args = make_inputs()
    ref = program(*args)
    row = {"workload": name, "flops": flops}
    row["eager_ms"] = bench(program, args)
    t0 = time.perf_counter()
    inductor = torch.compile(program)
    inductor(*args)
    row["inductor_compile_s"] = time.perf_counter() - t0
    row["inductor_ms"] = bench(inductor, args)
    log(f"  eager {row['eager_ms']:.3f} ms, inductor {row['inductor_ms']:.3f} ms")
    for label, autotune in (("tilelang_heuristic", False), ("tilelang_tuned", True)):
        try:
            t0 = time.perf_counter()
            gm = tilelang_compiled(program, args, autotune)
            out = gm(*args)
            out = out[0] if isinstance(out, (tuple, list)) else out
            row[f"{label}_compile_s"] = time.perf_counter() - t0
            row[f"{label}_max_err"] = (out.float() - ref.float()).abs().max().item()
            row[f"{label}_ms"] = bench(gm, args)
            row[f"{label}_kernels"] = [k.launch for k in kernels_of(gm)]
            log(f"  {label}: {row[label + '_ms']:.3f} ms, compile {row[label + '_compile_s']:.1f} s, "
                f"max err {row[label + '_max_err']:.3g}, {row[label + '_kernels']}")
            if autotune is False:
                row["tilelang_source"] = "\n\n".join(k.source for k in kernels_of(gm))
        except Exception as exc:
            RESULTS["errors"].append(f"{name} / {label}: {traceback.format_exc()}")
            log(f"  {label} FAILED: {type(exc).__name__}: {exc}")
    RESULTS["rows"].append(row)
    save(out_dir)


def report() -> None:
    log("\n| workload | eager ms | Inductor ms | TileLang ms (heuristic / tuned) | "
        "TFLOP/s eager / Inductor / TileLang | TileLang vs Inductor |")
    log("|---|---|---|---|---|---|")
    for r in RESULTS["rows"]:
        best = min((r[k] for k in ("tilelang_heuristic_ms", "tilelang_tuned_ms") if k in r), default=None)
        tf = lambda ms: r["flops"] / (ms * 1e-3) / 1e12  # noqa: E731
        heur = r.get("tilelang_heuristic_ms", float("nan"))
        tuned = r.get("tilelang_tuned_ms", float("nan"))
        if best is None:
            log(f"| {r['workload']} | {r['eager_ms']:.3f} | {r['inductor_ms']:.3f} | failed | "
                f"{tf(r['eager_ms']):.0f} / {tf(r['inductor_ms']):.0f} / - | - |")
            continue
        log(f"| {r['workload']} | {r['eager_ms']:.3f} | {r['inductor_ms']:.3f} | {heur:.3f} / {tuned:.3f} | "
            f"{tf(r['eager_ms']):.0f} / {tf(r['inductor_ms']):.0f} / {tf(best):.0f} | "
            f"{r['inductor_ms'] / best:.2f}x |")
    for s in RESULTS["sweeps"]:
        log(f"sweep {s}")


def save(out_dir: str) -> None:
    with open(os.path.join(out_dir, "gpu_tilelang.json"), "w") as handle:
        json.dump(RESULTS, handle, indent=1)


def collect_sweeps() -> None:
    from tensorplay_graph.backends.tilelang import cache
    try:
        RESULTS["sweeps"] = list(json.loads((cache.cache_dir() / "gemm_autotune.json").read_text()).values())
    except (OSError, ValueError):
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=".")
    parser.add_argument("--only", default="", help="substring of the workloads to run")
    opts = parser.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    RESULTS["device"] = torch.cuda.get_device_name()
    RESULTS["date"] = time.strftime("%Y-%m-%d %H:%M")
    RESULTS["versions"] = {"torch": torch.__version__, "python": sys.version.split()[0]}
    log(f"{RESULTS['device']}  torch {torch.__version__}  {RESULTS['date']}")
    for name, program, make_inputs, flops in WORKLOADS:
        if opts.only in name:
            log(name)
            run_workload(name, program, make_inputs, flops, opts.out)
            torch.cuda.empty_cache()
    collect_sweeps()
    save(opts.out)
    report()
    return 1 if RESULTS["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
