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
    "tensorplay_graph.frameworks",
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


def test_cache_dir_honours_xdg_and_cache_clear(tmp_path, monkeypatch, capsys):
    from tensorplay_graph.backends.source_files import cache_root
    from tensorplay_graph.cli import main
    monkeypatch.delenv("TPG_CACHE_DIR", raising=False)
    monkeypatch.delenv("TILELANG_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "tensorplay_graph"
    kernel = tmp_path / "tensorplay_graph" / "triton" / "k.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("x = 1\n")
    assert main(["cache", "info"]) == 0
    assert "1 files" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert not kernel.exists()
    assert "removed" in capsys.readouterr().out
