"""docs/ holds what scripts/docs_drawings.py draws now: the same nodes, labels, tooltips and
edges (coordinates may differ between graphviz versions, words may not)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("tensorplay")
if shutil.which("dot") is None:
    pytest.skip("needs the graphviz dot binary", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "docs_drawings.py")


def words(svg_text):
    """What a reader sees: the text elements, the node / edge titles and the tooltips
    (kernel names' source digests masked: another lowering rule changes them, not the labels)."""
    svg_text = re.sub(r"_[0-9a-f]{12,}\b", "_<digest>", svg_text)
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg_text)
    titles = re.findall(r"<title>([^<]*)</title>", svg_text)
    tooltips = re.findall(r'xlink:title="([^"]*)"', svg_text)
    return sorted(texts), sorted(titles), sorted(tooltips)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs")
    done = subprocess.run([sys.executable, SCRIPT, "--out", str(out)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.parametrize("name", ["captured.svg", "plan_gpu.svg", "lowered_reference.svg"])
def test_committed_drawing_is_up_to_date(fresh, name):
    committed = os.path.join(ROOT, "docs", name)
    assert os.path.isfile(committed), f"run `python scripts/docs_drawings.py` to draw docs/{name}"
    now = words((fresh / name).read_text())
    assert now[0], "the drawing has labels"
    assert words(open(committed, encoding="utf-8").read()) == now, (
        f"docs/{name} is stale: run `python scripts/docs_drawings.py` and commit docs/")


def test_drawings_show_the_new_labels(fresh):
    plan = (fresh / "plan_gpu.svg").read_text()
    assert "barrier: custom_op" in plan and "demo::scaled_tanh" in plan
    assert "registered custom op: opaque" in plan  # legend
    assert "float32[8x64]" in plan  # shapes on edges
    assert "torch._VariableFunctionsClass" not in plan and "tensorplay.functional" not in plan
    assert re.search(r">fuses [a-z_]+(, [a-z_]+)*<", (fresh / "lowered_reference.svg").read_text())
