"""Fraction of a program's op nodes that land in fusion regions, per small model.

    PYTHONPATH=. python benchmarks/fusion_coverage.py [backend ...]   # a markdown table

Planning only (``explain(..., compile_kernels=False)``): nothing runs on a GPU. Triton is
planned as if every tensor lived on CUDA. Models: a ResNet-style conv-bn-relu block in eval
(``ReLU(inplace=True)``, ``out += identity``), an MLP with dropout in eval, and a pre-norm
transformer block with dropout in eval, each in torch and (where it has the ops) TensorPlay.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Dict, List, Tuple

import tensorplay_graph as tpg

log = logging.getLogger("tensorplay_graph.benchmarks.fusion_coverage")


def models(nn: Any, F: Any, fw: Any) -> Dict[str, Tuple[Any, Tuple[Any, ...]]]:
    """The three small models of framework ``fw`` (torch or tensorplay), in eval mode."""

    class ConvBlock(nn.Module):
        def __init__(self, c: int = 8) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.relu = nn.ReLU(inplace=True)
            self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(c, 4)

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            out += x
            out = self.relu(out)
            return self.fc(fw.flatten(self.pool(out), 1))

    class MLP(nn.Module):
        def __init__(self, d: int = 16) -> None:
            super().__init__()
            self.fc1, self.fc2, self.fc3 = nn.Linear(d, 4 * d), nn.Linear(4 * d, 4 * d), nn.Linear(4 * d, d)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            h = self.drop(F.gelu(self.fc1(x)))
            h = F.dropout(F.relu(self.fc2(h), inplace=True), 0.1, training=self.training)
            return self.fc3(h)

    class Block(nn.Module):
        def __init__(self, d: int = 16, heads: int = 2) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            att = fw.softmax((q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5, dim=-1)
            y = (self.drop(att) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.drop(self.proj(y))
            h = self.fc1(self.ln2(x))
            h.mul_(0.5)
            x += self.drop(self.fc2(F.gelu(h)))
            return x

    return {"conv-bn-relu block": (ConvBlock().eval(), (fw.randn(2, 8, 6, 6),)),
            "MLP + dropout": (MLP().eval(), (fw.randn(4, 16),)),
            "transformer block": (Block().eval(), (fw.randn(2, 5, 16),))}


def frameworks() -> List[Tuple[str, Any, Any, Any]]:
    out = []
    try:
        import torch
        out.append(("torch", torch.nn, torch.nn.functional, torch))
    except ImportError:
        pass
    try:
        import tensorplay
        import tensorplay.nn
        out.append(("tensorplay", tensorplay.nn, tensorplay.nn.functional, tensorplay))
    except ImportError:
        pass
    return out


def coverage(model: Any, inputs: Tuple[Any, ...], backend: str) -> Tuple[int, int, int, str]:
    """(nodes in regions, op nodes, launches, one-line summary of what stayed outside).

    Launches: regions plus op nodes outside regions that compute (views, ``getitem`` on
    tuples and shape queries cost no kernel).
    """
    plan = tpg.explain(model, *inputs, backend=backend.split("+"), compile_kernels=False)
    ops = [n for n in plan.graph_module.graph.nodes if n.op in ("call_function", "call_method")]
    inside = sum(len(r.nodes) for r in plan.regions)
    free = ("view", )
    outside = [n for n in ops if n.meta.get("region") is None and
               getattr(n.meta.get("prim"), "kind", None) not in free and n.name not in
               ("getitem", "chunk") and not n.name.startswith(("getitem_", "size"))]
    codes: Dict[str, int] = {}
    for code in plan.barrier_codes.values():
        codes[code] = codes.get(code, 0) + 1
    return (inside, len(ops), len(plan.regions) + len(outside),
            ", ".join(f"{c}={k}" for c, k in sorted(codes.items())))


def main(argv: List[str]) -> int:
    backends = argv or ["reference", "triton", "triton+tilelang"]
    print("| framework | model | backend | in regions / op nodes | fraction | launches | barriers |")
    print("|---|---|---|---|---|---|---|")
    for fw_name, nn, F, fw in frameworks():
        fw.manual_seed(0)
        for name, (model, inputs) in models(nn, F, fw).items():
            for backend in backends:
                try:
                    inside, total, launches, codes = coverage(model, inputs, backend)
                except Exception as exc:  # a framework lacking an op: report, go on
                    print(f"| {fw_name} | {name} | {backend} | failed: {type(exc).__name__}: "
                          f"{str(exc)[:80]} | | |")
                    continue
                print(f"| {fw_name} | {name} | {backend} | {inside} / {total} | "
                      f"{inside / max(total, 1):.0%} | {launches} | {codes} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
