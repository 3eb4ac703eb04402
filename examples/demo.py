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
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x, residual):
        h = self.norm(x + residual)
        h = F.gelu(self.fc1(h))
        h = scaled_tanh(h, 0.5)
        h = self.fc2(h) * 0.5 + x
        return tp.softmax(h, dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="out/demo", help="where the drawings go")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    model = Block()
    x, r = tp.randn(8, 64), tp.randn(8, 64)

    gm = tpg.capture(model, x, r)
    print("== captured graph ==")
    print(gm.graph)
    print("== generated code ==")
    print(gm.code)

    explanation = tpg.explain(model, x, r, backend="reference")
    print("== explain ==")
    print(explanation)

    for name, drawing in (("captured", tpg.render(gm)), ("explained", explanation.render())):
        path = os.path.join(args.out, name)
        print("wrote", drawing.render(path, format="svg", cleanup=True))
        with open(path + ".dot", "w") as f:
            f.write(drawing.source)

    compiled = tpg.compile(model, backend="reference", options={"debug_dir": os.path.join(args.out, "stages")})
    expected = model(x, r)
    got = compiled(x, r)
    err = float((got - expected).abs().max())
    print(f"== compiled vs eager: max abs error {err:.2e} ==")
    if not tp.allclose(got, expected, rtol=1e-4, atol=1e-5):
        raise SystemExit("compiled result differs from eager")
    print("OK: compiled result equals eager")


if __name__ == "__main__":
    main()
