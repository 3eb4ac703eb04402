"""PassManager: order, timings, lint after each pass, per-stage dumps."""

import operator
import shutil

import pytest

from tensorplay_graph.errors import GraphLintError
from tensorplay_graph.ir import Graph, GraphModule
from tensorplay_graph.passes.manager import PassManager


def small():
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.add, (x, 1))
    b = g.call_function(operator.mul, (a, 2))
    g.output(b)
    return GraphModule({}, g)


def test_runs_in_order_and_times_each_pass():
    seen = []

    def first(gm):
        seen.append("first")

    def second(gm):
        seen.append("second")
        return gm

    pm = PassManager([first, ("renamed", second)])
    gm = pm(small())
    assert seen == ["first", "second"] and pm.names == ["first", "renamed"]
    assert list(pm.timings) == ["first", "renamed"] and all(t >= 0 for t in pm.timings.values())
    assert gm(3) == 8


def test_lint_failure_names_the_pass():
    def breaks(gm):
        nodes = list(gm.graph.nodes)
        nodes[1].prepend(nodes[2])  # mul before its input add: use before definition

    with pytest.raises(GraphLintError, match="after pass 'breaks'"):
        PassManager([breaks])(small())
    PassManager([breaks], lint=False)(small())  # lint off: no check


def test_error_in_pass_names_it():
    def bad(gm):
        raise KeyError("nope")

    with pytest.raises(KeyError) as info:
        PassManager([bad])(small())
    assert "bad" in "".join(getattr(info.value, "__notes__", []))


def test_duplicate_names_rejected():
    with pytest.raises(ValueError, match="unique"):
        PassManager([("a", lambda g: None), ("a", lambda g: None)])


@pytest.mark.parametrize("via_env", [False, True])
def test_debug_dump_every_stage(tmp_path, monkeypatch, via_env):
    out = tmp_path / "dump"
    if via_env:
        monkeypatch.setenv("TPG_DEBUG_DIR", str(out))
        pm = PassManager([("noop", lambda g: None)])
    else:
        monkeypatch.delenv("TPG_DEBUG_DIR", raising=False)
        pm = PassManager([("noop", lambda g: None)], debug_dir=out)
    pm(small())
    files = sorted(p.name for p in out.iterdir())
    expected = {"00_input.txt", "00_input.dot", "01_noop.txt", "01_noop.dot"}
    if shutil.which("dot"):
        expected |= {"00_input.svg", "01_noop.svg"}
    assert expected <= set(files), files
    text = (out / "01_noop.txt").read_text()
    assert "stage: noop" in text and "add" in text and "mul" in text
    assert "digraph" in (out / "00_input.dot").read_text()


def test_no_dump_without_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("TPG_DEBUG_DIR", raising=False)
    pm = PassManager([("noop", lambda g: None)])
    assert pm.debug_dir is None
