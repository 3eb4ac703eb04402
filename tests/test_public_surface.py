"""The public surface: dir() lists only __all__, every name resolves, python -m and --version."""

import importlib
import subprocess
import sys

import pytest

import tensorplay_graph

PACKAGES = [
    "tensorplay_graph", "tensorplay_graph.ir", "tensorplay_graph.capture",
    "tensorplay_graph.library", "tensorplay_graph.passes", "tensorplay_graph.backends",
    "tensorplay_graph.backends.triton", "tensorplay_graph.backends.tilelang",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_dir_is_all(name):
    module = importlib.import_module(name)
    assert sorted(dir(module)) == sorted(module.__all__)
    for public in module.__all__:
        assert getattr(module, public) is not None, public


def test_python_dash_m_is_the_cli():
    out = subprocess.run([sys.executable, "-m", "tensorplay_graph", "--version"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"tpgraph {tensorplay_graph.__version__}"


def test_cli_version_flag(capsys):
    from tensorplay_graph.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert tensorplay_graph.__version__ in capsys.readouterr().out


def test_package_ships_py_typed():
    from importlib import resources
    assert resources.files("tensorplay_graph").joinpath("py.typed").is_file()
