"""The README's Python examples run as written."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("tensorplay")
pytest.importorskip("torch")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
README = os.path.join(ROOT, "README.md")
BLOCKS = re.findall(r"```python\n(.*?)```", open(README).read(), flags=re.S)


def run_block(source: str, tmp_path, env=None) -> subprocess.CompletedProcess:
    """Run one README block in a fresh interpreter that imports this checkout's package."""
    script = tmp_path / "readme_block.py"
    script.write_text(source)
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)


def test_readme_has_an_example_per_user():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    # Each block in a fresh interpreter: the examples register prims and ops globally.
    result = run_block(BLOCKS[index], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
