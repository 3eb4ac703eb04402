"""Split a joint graph into forward and backward graphs: saved values by a min-cut.

As functorch's ``min_cut_rematerialization_partition`` (Inductor's partitioner): every
forward value the backward reads is either saved by the forward or recomputed by the
backward from saved values. Cheap ops (pointwise, views, reading an opaque node's tape)
and layer / RMS norms may be recomputed; everything else (matmuls, reductions, softmax,
opaque ops, inputs) must come from the forward. In a flow network where each forward value costs
its size in bytes, the minimum cut between the inputs / must-compute values (source)
and the backward's reads (sink) is the cheapest set of values to save: e.g. one input
of a chain of pointwise ops instead of every intermediate the chain's VJPs read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from ..ir import Graph, GraphModule
from ..ir.meta import TensorMeta
from ..ir.node import Node
from .joint import JointGraph
from .opaque import tape_value
from ..ir.graph_module import get_attr_path

__all__ = ["SplitProgram", "split_joint"]

_RECOMPUTABLE_KINDS = ("pointwise", "view")
#: Row-wise prims cheap enough to run again in the backward (one read of the row, one
#: write): saving a norm's input is then enough, as Inductor recomputes its output from
#: the input and the statistics instead of keeping both (one activation per norm less).
_RECOMPUTABLE_ROWS = ("layer_norm", "rms_norm")


@dataclass
class SplitProgram:
    """The two graphs: forward ``(primals) -> (*outputs, *saved values that are not
    primals)``, backward ``(*saved, *tangents) -> grads of the primals that need one``;
    ``saved_primals`` maps a position in ``saved`` to the primal saved there (the caller
    passes the input itself: a forward output aliasing its input would keep the forward
    from a CUDA-graph replay)."""

    forward: Any
    backward: Any
    saved: List[str]
    saved_bytes: int
    recomputed: List[str]
    saved_primals: Dict[int, int] = field(default_factory=dict)
    #: ``(name, bytes, "shape dtype")`` of each saved tensor, largest first
    saved_sizes: List[Tuple[str, int, str]] = field(default_factory=list)


def _bytes(node: Node) -> int:
    meta = node.meta.get("tensor_meta")
    if isinstance(meta, TensorMeta):
        return max(meta.nbytes, 1)
    return 1  # ints, tapes: saving them is free


def _recomputable(node: Node) -> bool:
    if node.op == "get_attr":
        return True
    if node.target is tape_value:
        return True
    prim = node.meta.get("prim")
    if prim is None or (prim.kind not in _RECOMPUTABLE_KINDS and
                        prim.name not in _RECOMPUTABLE_ROWS):
        return False
    return not (prim.random or prim.side_effect or prim.data_dependent)


def _backward_nodes(graph: Any, tangents: List[Node]) -> Set[Node]:
    found = set(tangents)
    for node in graph.nodes:
        if node.op != "output" and any(i in found for i in node.all_input_nodes):
            found.add(node)
    return found


def _ancestors(roots: List[Node], stop: Set[Node]) -> Set[Node]:
    seen: Set[Node] = set()
    stack = [r for r in roots if isinstance(r, Node)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(node.all_input_nodes)
    return seen


def choose_saved(joint: JointGraph) -> List[Node]:
    """The forward values the backward graph receives (the minimum cut)."""
    import networkx as nx
    graph = joint.gm.graph
    # only backward nodes some gradient depends on (a VJP rule may emit a gradient for an
    # input that needs none: dead code, which must not make the forward save its operands)
    live = _ancestors([g for g in joint.grads if g is not None], set())
    backward = _backward_nodes(graph, joint.tangents) & live
    reads = {i for n in backward for i in n.all_input_nodes if i not in backward}
    candidates = _ancestors(list(reads), set())
    flow = nx.DiGraph()
    flow.add_nodes_from(["source", "sink"])
    for node in candidates:
        if node.op == "get_attr":
            continue  # the backward reads it again: free
        inner, outer = node.name + ":in", node.name + ":out"
        if node.op == "placeholder" or not _recomputable(node):
            flow.add_edge("source", inner)
        # a view costs its base's bytes; +1 prefers saving the base (an input, often) itself
        view = node.meta.get("prim") is not None and node.meta["prim"].kind == "view"
        flow.add_edge(inner, outer, capacity=_bytes(node) + (1 if view else 0))
        for user in node.users:
            if user in backward:
                flow.add_edge(outer, "sink")
            elif user in candidates:
                flow.add_edge(outer, user.name + ":in")
    if not nx.has_path(flow, "source", "sink"):
        return []
    _, (reachable, _rest) = nx.minimum_cut(flow, "source", "sink")
    order = {n: i for i, n in enumerate(graph.nodes)}
    saved = [n for n in candidates if n.op != "get_attr" and n.name + ":in" in reachable
             and n.name + ":out" not in reachable]
    return sorted(saved, key=order.__getitem__)  # an edge without capacity is infinite


def _copy(graph_nodes: List[Node], keep: Set[Node], mapping: Dict[Node, Any],
          target: Graph) -> None:
    for node in graph_nodes:
        if node in keep and node not in mapping:
            if node.op == "placeholder":
                raise AssertionError(f"partition: {node.name} reaches the backward unsaved")
            mapping[node] = target.node_copy(node, lambda n: mapping[n])


def split_joint(joint: JointGraph) -> SplitProgram:
    """Forward and backward GraphModules of ``joint`` (see :class:`SplitProgram`)."""
    graph = joint.gm.graph
    nodes = [n for n in graph.nodes if n.op != "output"]
    saved = choose_saved(joint)
    attrs = {n.target: get_attr_path(joint.gm, n.target) for n in nodes if n.op == "get_attr"}

    fw, fmap = Graph(), {}
    for p in joint.primals:
        fmap[p] = fw.node_copy(p)
    primal_index = {p: i for i, p in enumerate(joint.primals)}
    saved_primals = {i: primal_index[n] for i, n in enumerate(saved) if n in primal_index}
    produced = [n for n in saved if n not in primal_index]
    _copy(nodes, _ancestors(joint.outputs + produced, set(joint.primals)), fmap, fw)
    fw.output(tuple(fmap[n] for n in joint.outputs + produced))

    bw, bmap = Graph(), {}
    for node in saved:
        bmap[node] = bw.placeholder(f"saved_{node.name}")
        meta = node.meta.get("tensor_meta")
        if isinstance(meta, TensorMeta):  # a tape is not a tensor: no meta to check it by
            bmap[node].meta["tensor_meta"] = meta
    for tangent in joint.tangents:
        bmap[tangent] = bw.node_copy(tangent)
    grads = [g for g in joint.grads if g is not None]
    keep = _ancestors(grads, set(saved) | set(joint.tangents))
    _copy(nodes, keep, bmap, bw)
    bw.output(tuple(bmap[g] for g in grads))
    backward_set = _backward_nodes(graph, joint.tangents)
    recomputed = [n.name for n in nodes if n in keep and n not in backward_set
                  and n not in saved and n.op not in ("get_attr", "placeholder")]
    return SplitProgram(GraphModule(attrs, fw) if attrs else GraphModule({}, fw),
                        GraphModule(attrs, bw) if attrs else GraphModule({}, bw),
                        [n.name for n in saved], sum(_bytes(n) for n in saved), recomputed,
                        saved_primals, _sizes(saved))


def _sizes(saved: List[Node]) -> List[Tuple[str, int, str]]:
    found = []
    for node in saved:
        meta = node.meta.get("tensor_meta")
        if isinstance(meta, TensorMeta):
            shape = "x".join(map(str, meta.shape)) or "scalar"
            found.append((node.name, meta.nbytes, f"{shape} {meta.dtype}"))
    return sorted(found, key=lambda item: -item[1])




def example_arguments(captured: Any, joint: Any, split: Any, inputs: Sequence[Any]
                      ) -> Tuple[list, list]:
    """Example arguments of ``split``'s forward and backward graphs for a call of
    ``captured`` with ``inputs``: the primals (inputs, then ``joint``'s parameters), and the
    saved values (the forward run once, without grad) followed by all-ones tangents."""
    from ..frameworks import adapter_for
    torch = adapter_for("torch").module
    primals = list(inputs) + [get_attr_path(captured, n) for n in joint.params]
    with torch.no_grad():
        results = split.forward(*primals)
    produced = iter(results[len(joint.outputs):])
    chosen = getattr(split, "saved_primals", {})  # saved inputs are passed, not returned
    saved = [primals[chosen[i]] if i in chosen else next(produced)
             for i in range(len(split.saved))]
    tangents = [torch.ones_like(results[i]) for i in joint.differentiable]
    return primals, saved + tangents
