"""Draw a Graph or GraphModule with graphviz.

Node kinds get their own shape and colour; labels carry the node name, its
target and the ``TensorMeta`` when present. Barrier nodes (``meta["barrier"]``)
are drawn as red octagons with the reason; nodes of one fusion region
(``meta["region"]``) are grouped in a cluster ``cluster_region_<id>``
coloured by backend; lowered kernel calls (``meta["kernel"]``) show the
kernel name.

``render(gm).source`` is DOT text and needs only the ``graphviz`` Python
package; writing a file (``path=...``) or SVG for notebooks also needs the
``dot`` binary.

>>> import operator
>>> from tensorplay_graph.ir import Graph
>>> g = Graph(); x = g.placeholder("x")
>>> _ = g.output(g.call_function(operator.neg, (x,)))
>>> "neg" in render(g).source
True
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, List, Optional

from .ir.graph import Graph
from .ir.node import Node, target_name

# (shape, style, fillcolor) per node kind.
NODE_STYLES: Dict[str, Dict[str, str]] = {
    "placeholder": {"shape": "ellipse", "style": "filled", "fillcolor": "#cfe2f3"},
    "get_attr": {"shape": "cylinder", "style": "filled", "fillcolor": "#fff2cc"},
    "call_function": {"shape": "box", "style": "filled", "fillcolor": "#ffffff"},
    "call_method": {"shape": "box", "style": "filled,rounded", "fillcolor": "#f3f3f3"},
    "output": {"shape": "doubleoctagon", "style": "filled", "fillcolor": "#d9d2e9"},
    "barrier": {"shape": "octagon", "style": "filled,bold", "fillcolor": "#f4cccc",
                "color": "#cc0000", "penwidth": "2"},
    "kernel": {"shape": "component", "style": "filled,bold", "fillcolor": "#d9ead3"},
}

BACKEND_COLOURS: Dict[str, str] = {
    "triton": "#d9ead3",
    "tilelang": "#fce5cd",
    "interpreter": "#eeeeee",
}
_PALETTE = ("#c9daf8", "#ead1dc", "#d0e0e3", "#fff2cc", "#e6b8af", "#b6d7a8")

_FORMATS = ("svg", "png", "pdf", "dot", "gv", "jpg", "jpeg", "json", "ps")


def backend_colour(backend: Optional[str]) -> str:
    """A stable fill colour for ``backend`` (known backends have fixed colours)."""
    if backend in BACKEND_COLOURS:
        return BACKEND_COLOURS[backend]
    digest = hashlib.sha1(str(backend).encode()).digest()[0]
    return _PALETTE[digest % len(_PALETTE)]


def _import_graphviz() -> Any:
    try:
        import graphviz
    except ImportError as exc:
        raise ImportError("render() needs the graphviz Python package: `pip install graphviz` "
                          "(and the `dot` binary, e.g. `apt-get install graphviz`, to write files)"
                          ) from exc
    return graphviz


def _escape(text: Any) -> str:
    """A user string made literal inside a DOT label (backslashes start escapes there)."""
    return str(text).replace("\\", "\\\\").replace("\n", " ").replace("\r", " ")


def _meta_text(meta: Any) -> Optional[str]:
    if meta is None:
        return None
    if isinstance(meta, (tuple, list)):
        return "(" + ", ".join(str(m) for m in meta) + ")"
    return str(meta)


def _reason(barrier: Any) -> str:
    reason = getattr(barrier, "reason", None)
    code = getattr(barrier, "code", None)
    if reason is None:
        return str(barrier)
    return f"{code}: {reason}" if code else str(reason)


def node_label(node: Node) -> List[str]:
    """The label lines of ``node`` (unescaped)."""
    lines = [node.name]
    kernel = node.meta.get("kernel")
    if kernel is not None:
        lines.append(f"kernel {getattr(kernel, 'name', kernel)}")
        backend = getattr(kernel, "backend", None)
        if backend:
            lines.append(f"[{backend}]")
    elif node.op not in ("placeholder", "output"):
        lines.append(target_name(node.target) if node.op != "call_method" else f".{node.target}()")
    meta = _meta_text(node.meta.get("tensor_meta"))
    if meta:
        lines.append(meta)
    if "barrier" in node.meta and node.meta["barrier"] is not None:
        lines.append(f"BARRIER {_reason(node.meta['barrier'])}")
    return lines


def node_style(node: Node) -> Dict[str, str]:
    """graphviz attributes for ``node``: barrier, then kernel, then its opcode."""
    if node.meta.get("barrier") is not None:
        return NODE_STYLES["barrier"]
    if node.meta.get("kernel") is not None:
        return NODE_STYLES["kernel"]
    return NODE_STYLES.get(node.op, NODE_STYLES["call_function"])


def render(gm_or_graph: Any, path: Optional[str] = None, format: str = "svg",
           name: Optional[str] = None) -> Any:
    """Draw ``gm_or_graph`` as a ``graphviz.Digraph`` (written to ``path`` when given).

    The output format follows ``path``'s suffix when it names one
    (``graph.png``), else ``format``. Writing needs the ``dot`` binary.
    """
    graph = getattr(gm_or_graph, "graph", gm_or_graph)
    if not isinstance(graph, Graph):
        raise TypeError(f"render() draws a GraphModule or a Graph, got {type(gm_or_graph).__name__}; "
                        "capture a program first: tensorplay_graph.render(tensorplay_graph.capture(fn, *inputs))")
    graphviz = _import_graphviz()
    title = name or type(gm_or_graph).__name__
    dot = graphviz.Digraph(name=_escape(title), graph_attr={"rankdir": "TB", "fontname": "Helvetica"},
                           node_attr={"fontname": "Helvetica", "fontsize": "11"},
                           edge_attr={"color": "#555555"})
    clusters: Dict[int, List[Node]] = {}
    for node in graph.nodes:
        region = node.meta.get("region")
        if isinstance(region, int) and not isinstance(region, bool):
            clusters.setdefault(region, []).append(node)
            continue
        _add_node(graphviz, dot, node)
    for region, members in sorted(clusters.items()):
        backend = next((n.meta["backend"] for n in members if n.meta.get("backend")), None)
        with dot.subgraph(name=f"cluster_region_{region}") as sub:
            label = f"region {region}" + (f" [{backend}]" if backend else "")
            sub.attr(label=graphviz.nohtml(_escape(label)), style="filled,rounded",
                     fillcolor=backend_colour(backend), color="#666666")
            for node in members:
                _add_node(graphviz, sub, node)
    for node in graph.nodes:
        for source in node.all_input_nodes:
            dot.edge(source.name, node.name)
    if path is not None:
        _write(graphviz, dot, path, format)
    return dot


def _add_node(graphviz: Any, dot: Any, node: Node) -> None:
    label = "\\n".join(_escape(line) for line in node_label(node))
    # nohtml: a label like "<lambda>" must not be read as an HTML-like label.
    dot.node(node.name, graphviz.nohtml(label), **node_style(node))


def _write(graphviz: Any, dot: Any, path: str, format: str) -> None:
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    fmt = suffix if suffix in _FORMATS else format
    if fmt in ("dot", "gv"):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(dot.source)
        return
    try:
        data = dot.pipe(format=fmt)
    except graphviz.ExecutableNotFound as exc:
        raise RuntimeError(f"cannot write {path}: the graphviz `dot` binary is not installed "
                           "(apt-get install graphviz / brew install graphviz); "
                           "render(...).source still gives the DOT text") from exc
    with open(path, "wb") as fh:
        fh.write(data)

