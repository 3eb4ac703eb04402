"""render(): every node in the DOT, styles by kind, clusters, barriers, kernels, escaping, files."""

import operator
import re
import shutil
from types import SimpleNamespace

import pytest

from tensorplay_graph.ir import Graph, GraphModule, TensorMeta
from tensorplay_graph.drawing import backend_colour, render

HAVE_DOT = shutil.which("dot") is not None


def lowered_graph():
    g = Graph()
    x = g.placeholder("x")
    w = g.get_attr("w")
    op = g.call_function(lambda a, b: a, (x, w), name="my_op")
    op.meta["tensor_meta"] = TensorMeta((4, 8), "float32")
    op.meta["barrier"] = SimpleNamespace(code="custom_op", reason="opaque custom op mylib::f")
    a = g.call_function(operator.add, (op, 1))
    a.meta["region"] = 0
    a.meta["backend"] = "triton"
    r = g.call_method("relu", (a,))
    r.meta["region"] = 0
    m = g.call_function(operator.matmul, (r, w))
    m.meta["region"] = 1
    m.meta["backend"] = "tilelang"
    k = g.call_function(operator.neg, (m,), name="kernel_call")
    k.meta["kernel"] = SimpleNamespace(name="triton_fused_neg_0", backend="triton")
    k.meta["tensor_meta"] = (TensorMeta((4, 8), "float32"), TensorMeta((4,), "int64"))
    g.output(k)
    return g


def node_statement(source, name):
    match = re.search(rf"^\s*\"?{name}\"? \[(label=.*)\]$", source, re.M)
    assert match, (name, source)
    return match.group(1)


def test_dot_has_every_node_edges_and_styles():
    g = lowered_graph()
    dot = render(GraphModule({"w": 1}, g))
    source = dot.source
    for node in g.nodes:
        node_statement(source, node.name)
    for node in g.nodes:
        for src in node.all_input_nodes:
            assert re.search(rf"\"?{src.name}\"? -> \"?{node.name}\"?", source)
    assert "shape=ellipse" in node_statement(source, "x")
    assert "shape=cylinder" in node_statement(source, "w")
    assert "shape=doubleoctagon" in node_statement(source, "output")
    assert "float32[4x8]" in node_statement(source, "my_op")


def test_clusters_coloured_by_backend():
    source = render(lowered_graph()).source
    assert "subgraph cluster_region_0" in source and "subgraph cluster_region_1" in source
    region0 = source.split("subgraph cluster_region_0")[1].split("}")[0]
    assert "region 0 [triton]" in region0 and backend_colour("triton") in region0
    assert re.search(r"^\s*add \[", region0, re.M) and re.search(r"^\s*relu \[", region0, re.M)
    region1 = source.split("subgraph cluster_region_1")[1].split("}")[0]
    assert "[tilelang]" in region1 and backend_colour("tilelang") in region1
    assert backend_colour("triton") != backend_colour("tilelang")
    assert backend_colour("mine") == backend_colour("mine")


def test_barrier_and_kernel_labels():
    source = render(lowered_graph()).source
    barrier = node_statement(source, "my_op")
    assert "BARRIER custom_op: opaque custom op mylib::f" in barrier and "shape=octagon" in barrier
    kernel = node_statement(source, "kernel_call")
    assert "kernel triton_fused_neg_0" in kernel and "shape=component" in kernel
    assert "(float32[4x8], int64[4])" in kernel
    g = Graph()
    n = g.call_function(operator.neg, (1,))
    n.meta["barrier"] = "plain string reason"
    assert "BARRIER plain string reason" in render(g).source


def test_dot_specials_are_escaped():
    g = Graph()
    x = g.placeholder("graph")  # a DOT keyword as node id
    n = g.call_function(operator.neg, (x,), name="node")
    n.meta["barrier"] = SimpleNamespace(code="x", reason='say "hi" <b>html</b> back\\slash\nnewline')
    g.output(n)
    source = render(g).source
    assert '"graph" -> "node"' in source
    label = node_statement(source, "node")
    assert r'say \"hi\" <b>html</b> back\\slash newline' in label
    assert "label=<" not in source  # never read as an HTML-like label


@pytest.mark.skipif(not HAVE_DOT, reason="needs the graphviz dot binary")
def test_svg_written_with_dot(tmp_path):
    g = lowered_graph()
    path = tmp_path / "graph.svg"
    dot = render(g, path=str(path))
    text = path.read_text()
    assert text.lstrip().startswith("<?xml") or "<svg" in text
    for node in g.nodes:
        assert f">{node.name}</text>" in text or node.name in text
    assert dot.source
    png = tmp_path / "graph.png"
    render(g, path=str(png))
    assert png.read_bytes()[:4] == b"\x89PNG"
    gv = tmp_path / "graph.dot"
    render(g, path=str(gv))
    assert gv.read_text() == dot.source


@pytest.mark.skipif(not HAVE_DOT, reason="needs the graphviz dot binary")
def test_graph_module_repr_svg():
    g = Graph()
    g.output(g.call_method("relu", (g.placeholder("x"),)))
    svg = GraphModule({}, g)._repr_svg_()
    assert svg is not None and "<svg" in svg and "relu" in svg


def test_package_attribute_is_the_function_after_submodule_import():
    import tensorplay_graph
    import tensorplay_graph.drawing  # noqa: F401  (a submodule import must not shadow it)
    g = Graph()
    g.output(g.placeholder("x"))
    assert "x" in tensorplay_graph.render(g).source


def test_missing_graphviz_is_a_clear_error(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "graphviz", None)
    g = Graph()
    g.output(g.placeholder("x"))
    with pytest.raises(ImportError, match="pip install graphviz"):
        render(g)
    assert GraphModule({}, g)._repr_svg_() is None


def test_render_rejects_what_is_not_a_graph():
    with pytest.raises(TypeError, match="GraphModule or a Graph, got int"):
        render(42)
