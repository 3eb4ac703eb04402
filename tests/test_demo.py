"""The README's main job: examples/demo.py runs to its end and its compiled results equal eager."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("tensorplay")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_runs_and_checks_against_eager(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "demo.py"),
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "OK: the compiled results equal eager" in out.stdout
    assert "tilelang_region" in out.stdout  # the CPU plan really compiled a TileLang C kernel
    assert (tmp_path / "plan_cpu.svg").exists()
