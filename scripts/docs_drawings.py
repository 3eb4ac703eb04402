"""Draw the README's demo pictures into docs/: examples/demo.py's block, captured, planned for a
GPU and lowered on the CPU. Run it after changing drawing.py (tests/test_docs_drawings.py checks
the committed drawings say what this script draws):

    python scripts/docs_drawings.py            # writes docs/*.svg
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRAWINGS = ("captured.svg", "plan_gpu.svg", "lowered_reference.svg")
log = logging.getLogger("docs_drawings")


def _demo_module():
    spec = importlib.util.spec_from_file_location("tpg_demo", os.path.join(ROOT, "examples", "demo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def draw(out: str) -> list:
    """Write the drawings into ``out``; returns their paths."""
    sys.path.insert(0, ROOT)  # this checkout's package, not an installed one
    import tensorplay as tp
    import tensorplay_graph as tpg

    demo = _demo_module()
    tp.manual_seed(0)
    model = demo.Block(dim=64)  # small sizes: the labels stay short
    x, r = tp.randn(8, 64), tp.randn(8, 64)
    os.makedirs(out, exist_ok=True)
    paths = [os.path.join(out, name) for name in DRAWINGS]
    tpg.render(tpg.capture(model, x, r), paths[0], name="captured")
    plan = tpg.explain(model, x, r, backend=["triton", "tilelang"], assume_device="cuda",
                       compile_kernels=False)
    plan.render(paths[1])
    compiled = tpg.compile(model, backend="reference")
    with tp.no_grad():
        compiled(x, r)
    lowered = next(iter(compiled.specializations.values())).lowered
    tpg.render(lowered, paths[2], name="lowered")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs"), help="where the SVGs go")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in draw(args.out):
        log.info("wrote %s", path)


if __name__ == "__main__":
    main()
