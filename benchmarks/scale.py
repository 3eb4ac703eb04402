"""Pipeline scaling: the whole pass pipeline on synthetic graphs of 1k, 10k and 100k nodes.

Graph shape (capture-free): 4 float32 placeholders, then a chain where node i
reads nodes i-1 and i-3 (``mul``) or i-1 and a scalar (``add``), with a registered
custom op (a barrier) every 17th node -- regions of ~16 pointwise nodes for the
reference backend. Prints per-pass times (lint off), the 100k/10k time ratio,
peak memory during the pipeline and memory retained by the compiled module per
node (tracemalloc, in a separate run from the timing), and, as the anchor for
the partition step, torch.fx's ``CapabilityBasedPartitioner`` on the same graph
shape (1k, 2k, 4k nodes by default; 10k did not finish in 400 s) next to
our ``partition`` pass.

Run: ``.venv/bin/python benchmarks/scale.py [--sizes 1000 10000 100000]``
"""

from __future__ import annotations

import argparse
import gc
import operator
import time
import tracemalloc

import torch

from tensorplay_graph.ir import Graph, GraphModule, TensorMeta
from tensorplay_graph.library import custom_op
from tensorplay_graph.passes.pipeline import build_passes, compile_graph

BARRIER_EVERY = 17


@custom_op("bench_scale::opaque", mutates_args=())
def opaque(a: torch.Tensor) -> torch.Tensor:
    return a.clone()


opaque.register_fake(lambda a: torch.empty_like(a))


def build(n: int) -> GraphModule:
    """Our GraphModule of ``n`` call nodes (see the module docstring)."""
    g = Graph()
    values = [g.placeholder(f"x{i}") for i in range(4)]
    for x in values:
        x.meta["tensor_meta"] = TensorMeta((8,), "float32")
    for i in range(n):
        a, b = values[-1], values[-3]
        if i % BARRIER_EVERY == BARRIER_EVERY - 1:
            v = g.call_function(opaque, (a,))
        elif i % 3 == 0:
            v = g.call_function(operator.mul, (a, b))
        else:
            v = g.call_function(operator.add, (a, 1.5))
        values.append(v)
    g.output(values[-1])
    return GraphModule({}, g)


def build_fx(n: int):
    """The same graph shape as a torch.fx GraphModule (custom op as a plain function)."""
    import torch.fx as fx

    g = fx.Graph()
    values = [g.placeholder(f"x{i}") for i in range(4)]
    for i in range(n):
        a, b = values[-1], values[-3]
        if i % BARRIER_EVERY == BARRIER_EVERY - 1:
            v = g.call_function(torch.clone, (a,))
        elif i % 3 == 0:
            v = g.call_function(operator.mul, (a, b))
        else:
            v = g.call_function(operator.add, (a, 1.5))
        values.append(v)
    g.output(values[-1])
    return fx.GraphModule(torch.nn.Module(), g)


def time_pipeline(n: int) -> dict:
    gm = build(n)
    managers: list = []
    t0 = time.perf_counter()
    compile_graph(gm, (), backends=["reference"], lint=False, manager_out=managers)
    total = time.perf_counter() - t0
    return {"total": total, **managers[0].timings}


def memory_pipeline(n: int) -> tuple:
    """(peak bytes during the pipeline, bytes the compiled module keeps), both per node."""
    gc.collect()
    tracemalloc.start()
    gm = build(n)
    built, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    compiled = compile_graph(gm, (), backends=["reference"], lint=False)
    gm = None
    gc.collect()
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del compiled
    return (peak - built) / n, retained / n


def time_partition_ours(n: int) -> float:
    gm = build(n)
    passes = dict(build_passes((), ["reference"], upto="partition"))
    for name in ("normalize", "shape_prop", "barriers"):
        passes[name](gm)
    t0 = time.perf_counter()
    passes["partition"](gm)
    return time.perf_counter() - t0


def time_partition_fx(n: int) -> float:
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    class Pointwise(OperatorSupport):
        def is_node_supported(self, submodules, node) -> bool:
            return node.op == "call_function" and node.target in (operator.add, operator.mul)

    gm = build_fx(n)
    t0 = time.perf_counter()
    CapabilityBasedPartitioner(gm, Pointwise(), allows_single_node_partition=True).propose_partitions()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    # torch.fx's partitioner grows ~quadratically: 10k nodes did not finish in 400 s here.
    parser.add_argument("--fx-sizes", type=int, nargs="*", default=[1000, 2000, 4000])
    args = parser.parse_args()
    time_pipeline(200)  # warm prim tables and the reference kernel cache
    times = {}
    for n in args.sizes:
        timing = min((time_pipeline(n) for _ in range(2 if n <= 10000 else 1)),
                     key=lambda t: t["total"])
        times[n] = timing["total"]
        peak, retained = memory_pipeline(n)
        passes = "  ".join(f"{k} {v:.3f}" for k, v in timing.items() if k != "total")
        print(f"{n:>7} nodes: total {timing['total']:.3f} s ({timing['total'] / n * 1e6:.1f} us/node)"
              f" | {passes} | peak {peak:.0f} B/node, retained {retained:.0f} B/node")
    for small, big in zip(args.sizes, args.sizes[1:]):
        print(f"time ratio {big}/{small}: {times[big] / times[small]:.2f} "
              f"(linear: {big / small:.0f})")
    for n in args.fx_sizes:
        ours, fx = time_partition_ours(n), time_partition_fx(n)
        print(f"partition {n:>6} nodes: ours {ours:.3f} s, torch.fx CapabilityBasedPartitioner "
              f"{fx:.3f} s ({fx / ours:.0f}x ours)", flush=True)


if __name__ == "__main__":
    main()
