"""Draw a Graph or GraphModule with graphviz.

Node kinds get their own shape and colour; a node shows its name and short op name
(``relu``, ``readme::soft_clip``), and every edge the shape / dtype of the value it
carries. Barrier nodes (``meta["barrier"]``) are octagons labelled with their code; the
full reason is the node's tooltip and the legend says what each code means. Opaque user
ops (custom / Triton / TileLang ops) are orange, nodes no backend generates red and
dashed, order-keeping ones (mutation, side effect, random) double-bordered. Nodes of one
fusion region (``meta["region"]``) are grouped in a cluster ``cluster_region_<id>``
coloured by backend; lowered kernel calls (``meta["kernel"]``) show the kernel and the
ops it fused.

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
import html
import logging
import operator
import os
from typing import Any, Dict, List, Optional, Tuple

from .ir.codegen import op_qualname
from .ir.graph import Graph
from .ir.node import Node, target_name

__all__ = ["render", "node_label", "node_style", "short_name", "fused_ops", "backend_colour",
           "BARRIER_MEANINGS", "compiled_html"]

# (shape, style, fillcolor) per node kind.
NODE_STYLES: Dict[str, Dict[str, str]] = {
    "placeholder": {"shape": "ellipse", "style": "filled", "fillcolor": "#cfe2f3"},
    "get_attr": {"shape": "cylinder", "style": "filled", "fillcolor": "#fff2cc"},
    "call_function": {"shape": "box", "style": "filled", "fillcolor": "#ffffff"},
    "call_method": {"shape": "box", "style": "filled,rounded", "fillcolor": "#f3f3f3"},
    "output": {"shape": "doubleoctagon", "style": "filled", "fillcolor": "#d9d2e9"},
    "kernel": {"shape": "component", "style": "filled,bold", "fillcolor": "#d9ead3"},
}

#: barrier code -> what it means (the legend's text)
BARRIER_MEANINGS: Dict[str, str] = {
    "custom_op": "registered custom op: opaque, runs its own kernel",
    "triton_op": "triton_op: runs its own Triton kernel",
    "tile_lang_op": "tile_lang_op: runs its own TileLang kernel",
    "mutation": "writes a tensor in place: keeps its order",
    "side_effect": "has a side effect: keeps its order",
    "random": "draws random numbers: keeps its order",
    "data_dependent": "result shape or value depends on the data",
    "alias": "returns an alias of its input",
    "no_meta": "shape unknown before the program runs",
    "no_prim": "no prim: no backend can generate it",
    "unsupported": "no requested backend generates it",
}
_BARRIER_BASE = {"shape": "octagon", "style": "filled,bold", "penwidth": "2"}
#: barrier code -> style: opaque user ops, ungenerated ops, order-keeping ops, the rest
BARRIER_STYLES: Dict[str, Dict[str, str]] = {
    **{code: {**_BARRIER_BASE, "fillcolor": "#fce5cd", "color": "#e69138"}
       for code in ("custom_op", "triton_op", "tile_lang_op")},
    **{code: {**_BARRIER_BASE, "fillcolor": "#f4cccc", "color": "#cc0000",
              "style": "filled,bold,dashed"} for code in ("unsupported", "no_prim")},
    **{code: {**_BARRIER_BASE, "fillcolor": "#ead1dc", "color": "#741b47", "peripheries": "2"}
       for code in ("mutation", "side_effect", "random")},
}
_OTHER_BARRIER = {**_BARRIER_BASE, "fillcolor": "#fff2cc", "color": "#bf9000"}

BACKEND_COLOURS: Dict[str, str] = {
    "triton": "#d9ead3",
    "tilelang": "#fce5cd",
    "interpreter": "#eeeeee",
}
_PALETTE = ("#c9daf8", "#ead1dc", "#d0e0e3", "#fff2cc", "#e6b8af", "#b6d7a8")

_GETITEM = operator.getitem
logger = logging.getLogger(__name__)
_FORMATS = ("svg", "png", "pdf", "dot", "gv", "jpg", "jpeg", "json", "ps")
_OPS_PER_LINE = 4


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


def short_name(target: Any) -> str:
    """The op name a reader expects: ``relu`` for ``torch._VariableFunctionsClass.relu``,
    ``add`` for ``operator.add``, ``ns::op`` for a registered custom op."""
    if isinstance(target, str):
        return target
    qualname = op_qualname(target)
    if qualname is not None:
        return qualname
    name = getattr(target, "__name__", None)
    if isinstance(name, str) and name:
        return name
    return target_name(target).rsplit(".", 1)[-1]


def _op_text(node: Node) -> str:
    return f".{node.target}()" if node.op == "call_method" else short_name(node.target)


def fused_ops(node: Node) -> List[str]:
    """Short names of the ops a kernel call runs (from ``meta["subgraph"]``, else its prim)."""
    subgraph = node.meta.get("subgraph")
    records = getattr(subgraph, "records", None)
    if records is not None:  # lower's RegionGraph: (name, op, target, ...) per node
        return [f".{r[2]}()" if r[1] == "call_method" else short_name(r[2]) for r in records]
    if subgraph is not None and hasattr(subgraph, "nodes"):
        return [_op_text(n) for n in subgraph.nodes if n.op in ("call_function", "call_method")]
    prim = node.meta.get("prim")
    return [prim.name] if getattr(prim, "name", None) else []


def _meta_text(meta: Any) -> Optional[str]:
    if meta is None:
        return None
    if isinstance(meta, (tuple, list)):
        return "(" + ", ".join(str(m) for m in meta) + ")"
    return str(meta)


def _barrier_parts(barrier: Any) -> Tuple[Optional[str], str]:
    """``(code, full reason)`` of a ``Barrier`` (or of any object / string used as one)."""
    code = getattr(barrier, "code", None)
    reason = getattr(barrier, "reason", None)
    return code, str(barrier if reason is None else reason)


def node_label(node: Node) -> List[str]:
    """The label lines of ``node`` (unescaped)."""
    lines = [node.name]
    kernel = node.meta.get("kernel")
    if kernel is not None:
        backend = getattr(kernel, "backend", None)
        name = getattr(kernel, "name", kernel)
        lines.append(f"kernel {name}" + (f" [{backend}]" if backend else ""))
        ops = fused_ops(node)
        for i in range(0, len(ops), _OPS_PER_LINE):
            lines.append(("fuses " if i == 0 else "") + ", ".join(ops[i:i + _OPS_PER_LINE]))
    elif node.op not in ("placeholder", "output") and _op_text(node) != node.name:
        lines.append(_op_text(node))  # a node named after its op says it once
    if not node.users and node.op != "output":
        meta = _meta_text(node.meta.get("tensor_meta"))  # otherwise on the outgoing edges
        if meta:
            lines.append(meta)
    barrier = node.meta.get("barrier")
    if barrier is not None:
        code, reason = _barrier_parts(barrier)
        lines.append(f"barrier: {code}" if code else f"barrier: {reason}")
    return lines


def node_style(node: Node) -> Dict[str, str]:
    """graphviz attributes for ``node``: barrier (by code), then kernel, then its opcode."""
    barrier = node.meta.get("barrier")
    if barrier is not None:
        code, reason = _barrier_parts(barrier)
        return {**BARRIER_STYLES.get(code, _OTHER_BARRIER), "tooltip": _escape(reason)}
    if node.meta.get("kernel") is not None:
        return NODE_STYLES["kernel"]
    return NODE_STYLES.get(node.op, NODE_STYLES["call_function"])


def edge_label(source: Node, user: Node) -> Optional[str]:
    """The shape / dtype of the value ``source`` hands to ``user``."""
    meta = source.meta.get("tensor_meta")
    if isinstance(meta, (tuple, list)):
        index = user.args[1] if len(user.args) == 2 and user.args[0] is source else None
        if user.target is _GETITEM and isinstance(index, int) and -len(meta) <= index < len(meta):
            return _meta_text(meta[index])
    return _meta_text(meta)


def render(gm_or_graph: Any, path: Optional[str] = None, format: str = "svg",
           name: Optional[str] = None, legend: bool = True) -> Any:
    """Draw ``gm_or_graph`` as a ``graphviz.Digraph`` (written out when ``path`` is given).

    ``path`` with a drawing suffix (``graph.svg``, ``graph.png``) is written in that
    format; any other ``path`` is named as python-graphviz names it: the DOT source at
    ``path`` and the drawing at ``path.<format>`` (``render(gm, "plan")`` writes ``plan``
    and ``plan.svg``). ``legend`` adds a key of the barrier codes drawn. Writing needs the
    ``dot`` binary.
    """
    graph = getattr(gm_or_graph, "graph", gm_or_graph)
    if not isinstance(graph, Graph):
        raise TypeError(f"render() draws a GraphModule or a Graph, got {type(gm_or_graph).__name__}; "
                        "capture a program first: tensorplay_graph.render(tensorplay_graph.capture(fn, *inputs))")
    if format not in _FORMATS:
        raise ValueError(f"render(format={format!r}): use one of {', '.join(_FORMATS)}")
    graphviz = _import_graphviz()
    title = name or type(gm_or_graph).__name__
    dot = graphviz.Digraph(name=_escape(title), graph_attr={"rankdir": "TB", "fontname": "Helvetica"},
                           node_attr={"fontname": "Helvetica", "fontsize": "11"},
                           edge_attr={"color": "#555555", "fontname": "Helvetica",
                                      "fontsize": "9", "fontcolor": "#555555"})
    clusters: Dict[int, List[Node]] = {}
    for node in graph.nodes:
        region = node.meta.get("region")
        if isinstance(region, int) and not isinstance(region, bool) and "kernel" not in node.meta:
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
            label = edge_label(source, node)
            dot.edge(source.name, node.name, **({"label": graphviz.nohtml(_escape(label))}
                                                 if label else {}))
    if legend:
        _add_legend(graphviz, dot, graph)
    if path is not None:
        _write(graphviz, dot, str(path), format)
    return dot


def _add_node(graphviz: Any, dot: Any, node: Node) -> None:
    label = "\\n".join(_escape(line) for line in node_label(node))
    # nohtml: a label like "<lambda>" must not be read as an HTML-like label.
    dot.node(node.name, graphviz.nohtml(label), **node_style(node))


def _add_legend(graphviz: Any, dot: Any, graph: Graph) -> None:
    """A key with one sample node per barrier code drawn (and for kernel calls)."""
    codes = []
    kernels = False
    for node in graph.nodes:
        barrier = node.meta.get("barrier")
        code = None if barrier is None else _barrier_parts(barrier)[0]
        if code is not None and code not in codes:
            codes.append(code)
        kernels = kernels or node.meta.get("kernel") is not None
    if not codes and not kernels:
        return
    with dot.subgraph(name="cluster_legend") as sub:
        sub.attr(label="legend", style="rounded", color="#999999", fontsize="10")
        previous = None
        entries = [(f"barrier: {c}", BARRIER_MEANINGS.get(c, ""),
                    BARRIER_STYLES.get(c, _OTHER_BARRIER)) for c in sorted(codes)]
        if kernels:
            entries.append(("kernel", "one generated kernel: the ops it fused",
                            NODE_STYLES["kernel"]))
        for i, (title, meaning, style) in enumerate(entries):
            key = f"_legend_{i}"
            label = "\\n".join(_escape(t) for t in (title, meaning) if t)
            sub.node(key, graphviz.nohtml(label), **{**style, "fontsize": "9"})
            if previous is not None:  # stack the entries
                sub.edge(previous, key, style="invis")
            previous = key


def _write(graphviz: Any, dot: Any, path: str, format: str) -> None:
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    if suffix in _FORMATS:
        fmt, target = suffix, path
    else:  # python-graphviz naming: the DOT source at path, the drawing at path.<format>
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(dot.source)
        fmt, target = format, f"{path}.{format}"
    if fmt in ("dot", "gv"):
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(dot.source)
        return
    try:
        data = dot.pipe(format=fmt)
    except graphviz.ExecutableNotFound as exc:
        raise RuntimeError(f"cannot write {target}: the graphviz `dot` binary is not installed "
                           "(apt-get install graphviz / brew install graphviz); "
                           "render(...).source still gives the DOT text") from exc
    with open(target, "wb") as fh:
        fh.write(data)


def compiled_html(compiled: Any) -> str:
    """HTML for a ``CompiledFunction`` in Jupyter: what it is and the drawing of its latest
    specialization (the lowered program when there is one, else the captured graph)."""
    parts = [f"<p><b>{html.escape(repr(compiled))}</b></p>"]
    specs = list(getattr(compiled, "specializations", {}).values())
    if not specs:
        return parts[0] + "<p>not compiled yet: it captures and compiles on its first call</p>"
    spec = specs[-1]
    program = getattr(spec, "lowered", None)
    if not hasattr(program, "graph"):  # not lowered (yet), or eager dispatch: the captured graph
        program = getattr(spec, "captured", None)
        parts.append("<p>latest specialization: the captured graph (run through eager dispatch"
                     " until a backend lowers it)</p>")
    else:
        parts.append("<p>latest specialization: the lowered program</p>")
    if not hasattr(program, "graph"):
        return "".join(parts)
    try:
        svg = render(program, name=getattr(compiled, "__name__", None)).pipe(format="svg")
        parts.append(svg.decode("utf-8"))
    except Exception as exc:  # no graphviz / dot: the node table instead of the drawing
        logger.info("no SVG for %r: %s", compiled, exc)
        parts.append(f"<pre>{html.escape(str(program.graph))}</pre>")
    return "".join(parts)
