"""The README's Python examples run as written."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("tensorplay")
pytest.importorskip("torch")

README = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")
BLOCKS = re.findall(r"```python\n(.*?)```", open(README).read(), flags=re.S)


def test_readme_has_an_example_per_user():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    # Each block in a fresh interpreter: the examples register prims and ops globally.
    script = tmp_path / f"readme_{index}.py"
    script.write_text(BLOCKS[index])
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
