"""tpgraph print / show: in-process through main(argv), once through the installed command."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tensorplay_graph import cli

pytest.importorskip("tensorplay")

PROGRAM = textwrap.dedent("""
    def mlp(x, w):
        return (x @ w).relu() * 2 + 1

    def reduce(x, idx):
        return x.sum(dim=1, keepdim=True) - x[:, :2].mean() + idx.sum()

    VALUE = 3
""")


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return str(path)


def test_print_shows_table_and_code(program, capsys):
    assert cli.main(["print", f"{program}:mlp", "--input", "4x8", "--input", "8x3:float32"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert header.startswith("name") and "shape" in header
    assert "float32[4x3]" in out and "operator.matmul" in out
    assert 'def forward(self, x: "f32[4, 8]", w: "f32[8, 3]"):' in out
    assert 'matmul: "f32[4, 3]" = x @ w' in out and "try:" not in out  # print_readable


@pytest.mark.parametrize("framework", ["tensorplay", "torch"])
def test_print_with_dtypes_and_framework(program, capsys, framework):
    if framework == "torch":
        pytest.importorskip("torch")
    argv = ["print", f"{program}:reduce", "--input", "4x8:float64", "--input", "5:int64",
            "--framework", framework]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "float64[4x1]" in out and "int64[5]" in out and "x[:, :2]" in out


def test_explain_prints_plan_and_writes_every_stage(program, tmp_path, capsys):
    out_dir = tmp_path / "stages"
    argv = ["explain", f"{program}:mlp", "--input", "4x8", "--input", "8x3",
            "--backend", "reference", "-o", str(out_dir)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    # relu, mul and add fuse into one reference region; the matmul is not claimed.
    assert "region 0 [reference]: relu, mul, add" in out
    assert "matmul" in out.split("region 0")[1]
    dots = sorted(p.name for p in out_dir.glob("*.dot"))
    assert [name.split("_", 1)[1] for name in dots] == [
        "input.dot", "normalize.dot", "shape_prop.dot", "decompose.dot", "functionalize.dot",
        "channels_last.dot", "barriers.dot", "partition.dot"]
    assert (out_dir / "explain.svg").read_text().count("cluster_region_0") >= 1


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs the graphviz dot binary")
def test_show_writes_svg(program, tmp_path, capsys):
    target = tmp_path / "out.svg"
    assert cli.main(["show", f"{program}:mlp", "--input", "4x8", "--input", "8x3",
                     "-o", str(target)]) == 0
    svg = target.read_text()
    assert "<svg" in svg and "matmul" in svg and "relu" in svg
    assert str(target) in capsys.readouterr().out


@pytest.mark.parametrize("target, message", [
    ("{program}", "expected FILE.py:FN"),
    ("missing.py:f", "does not exist"),
    ("{program}:nope", "has no attribute 'nope'; defined there: VALUE, mlp, reduce"),
    ("{program}:VALUE", "is a int, not a function"),
    ("{program}:bad-name", "is not a Python name"),
])
def test_bad_target_errors(program, capsys, target, message):
    assert cli.main(["print", target.format(program=program), "--input", "4x8"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("spec, message", [
    ("4y8", "shape must look like 4x8"),
    ("4x8:float33", "unknown dtype 'float33'"),
    ("4x-1", "dimensions must be >= 0"),
])
def test_bad_input_spec(program, capsys, spec, message):
    assert cli.main(["print", f"{program}:mlp", "--input", spec]) == 2
    assert message in capsys.readouterr().err


def test_parse_input_spec():
    assert cli.parse_input_spec("4x8") == ((4, 8), "float32")
    assert cli.parse_input_spec("2,3,4:int32") == ((2, 3, 4), "int32")
    assert cli.parse_input_spec("scalar:float64") == ((), "float64")


def test_commands_are_a_table():
    assert {"print", "show"} <= set(cli.COMMANDS)
    parser = cli.build_parser()
    assert parser.parse_args(["show", "a.py:f", "-o", "x.png"]).output == "x.png"


def test_installed_command(program):
    exe = shutil.which("tpgraph", path=os.path.dirname(sys.executable))
    command = [exe] if exe else [sys.executable, "-m", "tensorplay_graph.cli"]
    # The installed command, importing this checkout's package (not the installed copy).
    root = os.path.dirname(os.path.dirname(os.path.abspath(cli.__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run(command + ["print", f"{program}:mlp", "--input", "4x8",
                                       "--input", "8x3"], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "= matmul.relu()" in result.stdout
