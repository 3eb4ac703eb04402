"""Eager data movement left between Triton regions in the zoo's transformers (planning only).

    PYTHONPATH=. python benchmarks/view_copies.py [llama gpt2 ...]   # a markdown table

For each model (tests/models/zoo.py, tiny CPU configs) the plan for backend "triton" (as if
on CUDA, nothing runs there) is counted: ``cat`` calls left to eager (one copy kernel each),
views that copy in eager (``reshape`` of a permuted tensor, ``contiguous()``: one copy
kernel each), kernel outputs whose eager layout is permuted and that a row-major kernel
would write and then copy (``to_eager_layout``), and views left eager that only alias (no
kernel). On the GPU each of the first three is one launch plus a pass over memory.
"""

from __future__ import annotations

import collections
import logging
import sys
from pathlib import Path
from typing import Dict, List

import tensorplay_graph as tpg
from tensorplay_graph.backends.triton.codegen_indexed import index_map
from tensorplay_graph.backends.triton.indexed_region import copies_in_eager
from tensorplay_graph.passes.eager_layout import needs_eager_layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
log = logging.getLogger("tensorplay_graph.benchmarks.view_copies")


def counts(name: str) -> Dict[str, int]:
    from models import zoo
    model, args, kwargs = zoo.BY_NAME[name].build()
    plan = tpg.explain(model, *args, backend="triton", compile_kernels=False, **kwargs)
    ops = [n for n in plan.graph_module.graph.nodes if n.op in ("call_function", "call_method")]
    members = collections.defaultdict(set)
    for n in ops:
        if n.meta.get("region") is not None:
            members[n.meta["region"]].add(n)
    c = collections.Counter(regions=len(plan.regions), op_nodes=len(ops),
                            in_regions=sum(len(m) for m in members.values()))
    for n in ops:
        prim = n.meta.get("prim")
        kind = getattr(prim, "kind", None)
        region = members.get(n.meta.get("region"))
        if region is None:
            if kind == "gather" or getattr(n.target, "__name__", "") == "cat":
                c["eager cat"] += 1
            elif kind == "view" and index_map(n) is not None and copies_in_eager(n):
                c["eager copying view"] += 1
            elif kind == "view":
                c["eager alias view"] += 1
            continue
        indexed = any(m.meta["prim"].kind in ("view", "gather") for m in region)
        escapes = any(u not in region for u in n.users)
        if escapes and not indexed and needs_eager_layout(n.meta.get("tensor_meta")):
            c["layout copy"] += 1
    return c


COLUMNS = ["regions", "in_regions", "op_nodes", "eager cat", "eager copying view", "layout copy",
           "eager alias view"]


def main(argv: List[str]) -> int:
    print("| model | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    for name in argv or ["llama", "gpt2"]:
        c = counts(name)
        print(f"| {name} | " + " | ".join(str(c.get(k, 0)) for k in COLUMNS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
