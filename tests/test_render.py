"""render(): every node in the DOT, styles by kind, clusters, barriers (code on the node, reason in
the tooltip, a legend), kernels with their fused ops, shapes on edges, escaping, file naming."""

import operator
import re
import shutil
from types import SimpleNamespace

import pytest

from tensorplay_graph.ir import Graph, GraphModule, TensorMeta
from tensorplay_graph.drawing import BARRIER_MEANINGS, backend_colour, render, short_name
from tensorplay_graph.passes.barriers import Barrier

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


def edge_attrs(source, src, dst):
    match = re.search(rf"^\s*\"?{src}\"? -> \"?{dst}\"?(?: \[(.*)\])?$", source, re.M)
    assert match, (src, dst, source)
    return match.group(1) or ""


def test_shapes_and_dtypes_ride_on_edges():
    source = render(lowered_graph()).source
    assert 'label="float32[4x8]"' in edge_attrs(source, "my_op", "add")
    assert "float32" not in node_statement(source, "my_op")  # said once, on the edge
    assert "label" not in edge_attrs(source, "add", "relu")  # no meta, no label
    # a multi-output kernel: the whole tuple on its way out
    assert "(float32[4x8], int64[4])" in edge_attrs(source, "kernel_call", "output")


def test_getitem_edge_carries_the_selected_output():
    g = Graph()
    k = g.call_function(operator.neg, (g.placeholder("x"),), name="k")
    k.meta["tensor_meta"] = (TensorMeta((2,), "float16"), TensorMeta((3, 5), "int32"))
    item = g.call_function(operator.getitem, (k, 1))
    g.output(item)
    assert 'label="int32[3x5]"' in edge_attrs(render(g).source, "k", "getitem")


def test_short_op_names():
    torch = pytest.importorskip("torch")
    g = Graph()
    x = g.placeholder("x")
    r = g.call_function(torch.relu, (x,), name="r")
    s = g.call_function(operator.add, (r, x), name="s")
    m = g.call_method("sum", (s,), name="m")
    g.output(m)
    source = render(g).source
    assert "torch._VariableFunctionsClass" not in source
    assert node_statement(source, "r").startswith('label="r\\nrelu"')
    assert node_statement(source, "s").startswith('label="s\\nadd"')
    assert node_statement(source, "m").startswith('label="m\\n.sum()"')
    assert short_name(SimpleNamespace(__name__="mylib::op", __module__="x")) == "mylib::op"


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


def barrier_graph():
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.neg, (x,), name="opaque")
    a.meta["barrier"] = Barrier("custom_op", "mylib::f is a registered custom op: opaque")
    b = g.call_function(operator.abs, (a,), name="nobody")
    b.meta["barrier"] = Barrier("unsupported", "no backend supports abs here (triton: no)")
    c = g.call_function(operator.pos, (b,), name="later")
    c.meta["barrier"] = Barrier("unsupported", "another reason")
    g.output(c)
    return g


def test_barrier_code_on_node_reason_in_tooltip():
    source = render(barrier_graph()).source
    opaque, nobody = node_statement(source, "opaque"), node_statement(source, "nobody")
    assert "barrier: custom_op" in opaque and "barrier: unsupported" in nobody
    assert 'tooltip="mylib::f is a registered custom op: opaque"' in opaque
    assert 'tooltip="no backend supports abs here (triton: no)"' in nobody
    assert "registered custom op: opaque" not in opaque.split("tooltip")[0]  # not in the label
    style = lambda stmt: re.findall(r'(?:fillcolor|color|style)="[^"]*"', stmt)  # noqa: E731
    assert style(opaque) != style(nobody)  # custom-op barriers and unsupported nodes differ
    assert style(nobody) == style(node_statement(source, "later"))
    g = Graph()
    g.call_function(operator.neg, (1,)).meta["barrier"] = "plain string reason"
    assert "barrier: plain string reason" in render(g).source


def test_legend_explains_each_code_drawn_once():
    source = render(barrier_graph()).source
    legend = source.split("subgraph cluster_legend")[1]
    assert legend.count("barrier: unsupported") == 1 and legend.count("barrier: custom_op") == 1
    assert BARRIER_MEANINGS["custom_op"] in legend and BARRIER_MEANINGS["unsupported"] in legend
    assert "shape=component" not in legend and "mutation" not in legend
    assert "cluster_legend" in render(lowered_graph()).source  # kernels get an entry
    assert "cluster_legend" not in render(barrier_graph(), legend=False).source
    plain = Graph()
    plain.output(plain.placeholder("x"))
    assert "cluster_legend" not in render(plain).source


def test_kernel_node_lists_the_ops_it_fused():
    source = render(lowered_graph()).source
    kernel = node_statement(source, "kernel_call")
    assert "kernel triton_fused_neg_0 [triton]" in kernel and "shape=component" in kernel
    g = Graph()
    x = g.placeholder("x")
    sub = Graph()
    sx = sub.placeholder("x")
    ops = [sub.call_function(operator.add, (sx, 1)), sub.call_method("exp", (sx,))]
    for i in range(4):
        ops.append(sub.call_function(operator.mul, (ops[-1], 2)))
    sub.output(ops[-1])
    call = g.call_function(operator.neg, (x,), name="call")
    call.meta.update(kernel=SimpleNamespace(name="k0", backend="reference"), subgraph=sub)
    g.output(call)
    label = node_statement(render(g).source, "call")
    assert "fuses add, .exp(), mul, mul\\nmul, mul" in label


def test_lowered_program_draws_fused_ops(tmp_path):
    torch = pytest.importorskip("torch")
    import tensorplay_graph as tpg
    fn = lambda x: torch.relu(x * 2.0 + 1.0).sum(-1)  # noqa: E731
    compiled = tpg.compile(fn, backend="reference")
    x = torch.randn(4, 8)
    assert torch.allclose(compiled(x), fn(x))
    lowered = next(iter(compiled.specializations.values())).lowered
    source = render(lowered).source
    kernels = [line for line in source.splitlines() if "shape=component" in line]
    assert kernels and any("fuses mul, add, relu" in line for line in kernels), source


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


@pytest.mark.skipif(not HAVE_DOT, reason="needs the graphviz dot binary")
def test_files_named_as_python_graphviz_names_them(tmp_path):
    import graphviz
    g = barrier_graph()
    render(g, str(tmp_path / "plan"), format="svg")
    graphviz.Digraph().render(str(tmp_path / "theirs"), format="svg")  # python-graphviz's own
    ours = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("plan"))
    theirs = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("theirs"))
    assert [n.replace("plan", "theirs") for n in ours] == theirs == ["theirs", "theirs.svg"]
    assert (tmp_path / "plan").read_text() == render(g).source
    svg = (tmp_path / "plan.svg").read_text()
    # the tooltip reaches the SVG as the node's link title: hovering shows the full reason
    assert 'xlink:title="no backend supports abs here (triton: no)"' in svg
    with pytest.raises(ValueError, match="format='svgz!'.*svg"):
        render(g, str(tmp_path / "x"), format="svgz!")


@pytest.mark.skipif(not HAVE_DOT, reason="needs the graphviz dot binary")
def test_explanation_render_names_files_like_graphviz(tmp_path):
    torch = pytest.importorskip("torch")
    import tensorplay_graph as tpg
    plan = tpg.explain(lambda x: torch.relu(x + 1), torch.randn(4, 4), backend="reference")
    plan.render(str(tmp_path / "plan"), format="svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan", "plan.svg"]
    assert "<svg" in (tmp_path / "plan.svg").read_text()


def test_compiled_function_shows_its_plan_in_jupyter():
    torch = pytest.importorskip("torch")
    import tensorplay_graph as tpg
    compiled = tpg.compile(lambda x: torch.relu(x * 2.0), backend="reference")
    assert "not compiled yet" in compiled._repr_html_()
    compiled(torch.randn(4, 4))
    html = compiled._repr_html_()
    assert "the lowered program" in html
    if HAVE_DOT:
        assert "<svg" in html and "fuses mul, relu" in html
    else:
        assert "<pre>" in html
