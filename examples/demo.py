"""The whole pipeline on a TensorPlay program, on the CPU.

A small transformer-ish block with a registered custom op in the middle:
capture it, explain what fuses and what is a barrier (and why), draw every
stage, compile it and check the compiled result against eager.
"""

from __future__ import annotations

import argparse
import os

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F

import tensorplay_graph as tpg
from tensorplay_graph.library import custom_op


@custom_op("demo::scaled_tanh", mutates_args=())
def scaled_tanh(x: tp.Tensor, scale: float) -> tp.Tensor:
    """An opaque user op: the compiler may not look inside, so it is a fusion barrier."""
    return tp.tanh(x) * scale


@scaled_tanh.register_fake
def _(x, scale):
    return tp.empty_like(x)


class Block(nn.Module):
    def __init__(self, dim: int = 512) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.gamma = nn.Parameter(tp.ones(dim))
        self.beta = nn.Parameter(tp.zeros(dim))

    def forward(self, x, residual):
        h = self.norm(x + residual)
        h = F.gelu(self.fc1(h))
        h = scaled_tanh(h, 0.5)                       # opaque: a fusion barrier
        h = (self.fc2(h) * 0.5 + x) * self.gamma - self.beta
        return tp.softmax(h, dim=-1)


def section(title: str) -> None:
    print(f"\n== {title} ==")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="out/demo", help="where the drawings go")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    model = Block()
    x, r = tp.randn(256, 512), tp.randn(256, 512)

    section("1. capture: the graph and its generated code")
    gm = tpg.capture(model, x, r)
    print(gm.graph)
    print(gm.code)
    tpg.render(gm, os.path.join(args.out, "captured.svg"))

    section("2. explain: what fuses on this CPU, what is a barrier, and why")
    cpu_plan = tpg.explain(model, x, r, backend=["tilelang", "reference"],
                           debug_dir=os.path.join(args.out, "stages"))
    print(cpu_plan)
    cpu_plan.render(os.path.join(args.out, "plan_cpu.svg"))

    section("3. explain: what Triton and TileLang would do on a GPU (planning needs no GPU)")
    gpu_plan = tpg.explain(model, x, r, backend=["triton", "tilelang"], assume_device="cuda",
                           compile_kernels=False)
    print(gpu_plan)
    gpu_plan.render(os.path.join(args.out, "plan_gpu.svg"))

    section("4. compile and check against eager")
    with tp.no_grad():
        expected = model(x, r)
        # "auto" on a CPU: no backend beats eager dispatch there, so none is chosen
        for backend in ("auto", ["tilelang", "reference"], "reference"):
            compiled = tpg.compile(model, backend=backend)
            got = compiled(x, r)
            err = float((got - expected).abs().max())
            lowered = next(iter(compiled.specializations.values())).lowered
            nodes = lowered.graph.nodes if lowered is not None else []
            kernels = [f"{n.meta['kernel'].name} ({n.meta['kernel'].backend})"
                       for n in nodes if "kernel" in n.meta]
            print(f"backend={backend!r}: kernels {', '.join(kernels) or '(none: eager dispatch)'}; "
                  f"max abs error vs eager {err:.2e}")
            if not tp.allclose(got, expected, rtol=1e-4, atol=1e-5):
                raise SystemExit(f"compiled result (backend={backend!r}) differs from eager")

    section("drawings")
    for root, _dirs, files in os.walk(args.out):
        for name in sorted(files):
            if name.endswith(".svg"):
                print(os.path.join(root, name))
    print("\nOK: the compiled results equal eager")


if __name__ == "__main__":
    main()
