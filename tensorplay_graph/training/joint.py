"""The joint forward + backward graph of a captured program, in our IR.

:func:`build_joint` copies the captured graph (parameters that require grad become
inputs), then walks it backwards from its outputs, calling each prim's VJP rule
(:mod:`tensorplay_graph.prims.vjps`) to append the backward nodes -- prims again -- after
the forward ones. Nodes no prim rule covers (custom ops, framework functions without a
prim) are kept opaque (:mod:`.opaque`). Anything that cannot be differentiated here
raises :class:`NeedsEager` with the reason: the program then trains through eager
autograd, never with a wrong gradient.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..frameworks import framework_of, is_tensor, tensor_meta
from ..ir import Graph, GraphModule
from ..ir.meta import TensorMeta
from ..ir.node import Node, map_arg, op_name
from ..prims.emit import OPAQUE, Emitter, NotDifferentiable
from .functional import STOP_GRADIENT, emit_cat, simplify, vjp_rule
from .opaque import OpaqueForward, Slot, tape_backward, tape_value
from .sequences import returned_sequences, unpack_sequences
from .slices import slice_span
from ..ir.graph_module import get_attr_path

__all__ = ["JointGraph", "NeedsEager", "build_joint"]


class NeedsEager(Exception):
    """The program cannot be differentiated in our IR (the message says why)."""


@dataclass
class JointGraph:
    """Forward + backward in one graph; ``outputs`` / ``grads`` are its values of interest."""

    gm: Any
    framework: str
    primals: List[Node]            # user inputs, then parameters that require grad
    params: List[str]              # qualified names of those parameters
    tangents: List[Node]           # one per differentiable output
    outputs: List[Node]            # the forward outputs (flat)
    template: Any                  # the output structure, with Slot(i) for outputs[i]
    differentiable: List[int]      # indices into outputs that have a tangent
    grads: List[Optional[Node]]    # per primal
    opaque: List[str] = field(default_factory=list)


def _floating(meta: Any) -> bool:
    if isinstance(meta, TensorMeta):
        return meta.is_floating
    return isinstance(meta, tuple) and any(isinstance(m, TensorMeta) and m.is_floating
                                           for m in meta)


def _copy_program(gm: Any, args: Sequence[Any]) -> Tuple[Any, List[Node], List[str], list, Any]:
    """The captured graph with grad parameters as trailing placeholders; (gm, primals,
    param names, param values, output value)."""
    graph, val, attrs = Graph(), {}, {}
    primals, names, values = [], [], []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val[node] = graph.node_copy(node)
            primals.append(val[node])
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = get_attr_path(gm, node.target)
            if is_tensor(value) and value.requires_grad:
                val[node] = graph.placeholder(node.name)
                val[node].meta = dict(node.meta, tensor_meta=tensor_meta(value))
                primals.append(val[node])
                names.append(node.target)
                values.append(value)
            else:
                attrs[node.target] = value
    output = None
    for node in gm.graph.nodes:
        if node in val:
            continue
        if node.op == "output":
            output = map_arg(node.args[0] if node.args else None, lambda n: val[n])
            break
        val[node] = graph.node_copy(node, lambda n: val[n])
    graph.output(output)
    return GraphModule(attrs, graph), primals, names, values, output


#: Ops whose outputs never require grad in eager: everywhere, and in TensorPlay 1.0.0 only.
_CONSTANT_OPS = frozenset({"detach"})
_TENSORPLAY_CONSTANT_OPS = _CONSTANT_OPS | {"sign", "floordiv", "floor_divide"}


def _mark_eager_constants(graph: Any, framework: Optional[str]) -> None:
    """``STOP_GRADIENT`` on float values eager autograd does not track: ``detach()``, and
    TensorPlay's ``//`` and ``sign`` (their outputs never require grad there; torch's do,
    with zero gradients).

    Why: a compiled output must require grad exactly where eager's does. (Capture's
    recorded ``requires_grad`` cannot tell: it is False on values computed from a parameter
    in some TensorPlay programs.)
    """
    names = _TENSORPLAY_CONSTANT_OPS if framework == "tensorplay" else _CONSTANT_OPS
    for node in graph.nodes:
        name = op_name(node)
        if node.op in ("call_function", "call_method") and name in names:
            node.meta[STOP_GRADIENT] = True


def _prepare(jgm: Any, examples: Sequence[Any], framework: Optional[str]) -> None:
    from ..passes.functionalize import functionalize
    from ..passes.normalize import normalize
    from ..passes.shape_prop import shape_prop
    normalize(jgm)
    shape_prop(jgm, *examples)
    unpack_sequences(jgm.graph)
    functionalize(jgm)
    normalize(jgm)
    simplify(jgm, framework or "")
    from ..ir.effects import declares_impure, is_inplace, prim_effect
    for node in jgm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        # random draws are fine: they run once, in the forward, in program order
        if is_inplace(node) or prim_effect(node) == "side_effect" or (
                node.op == "call_function" and declares_impure(node.target)):
            raise NeedsEager(f"node {node.name} writes into a tensor or has side effects; "
                             f"autograd must see it")


def build_joint(gm: Any, args: Sequence[Any]) -> JointGraph:
    """The joint graph of captured ``gm`` for a call with ``args`` (its placeholders' values)."""
    from ..passes.normalize import graph_framework
    jgm, primals, names, values, output = _copy_program(gm, args)
    framework = next((framework_of(v) for v in list(args) + values if is_tensor(v)), None) \
        or graph_framework(jgm.graph)
    _mark_eager_constants(jgm.graph, framework)
    _prepare(jgm, tuple(args) + tuple(values), framework)
    graph = jgm.graph
    output = graph.output_node().args[0]  # rewrites may have replaced an output node
    leaves: List[Node] = []
    template = map_arg(output, lambda n: (leaves.append(n), Slot(len(leaves) - 1))[1])
    grad_inputs = [p for p, a in zip(primals, list(args) + values)
                   if is_tensor(a) and a.requires_grad and _floating(p.meta.get("tensor_meta"))]
    needs = _requires_grad(graph, grad_inputs)
    for leaf in leaves:
        if leaf.op == "placeholder" or leaves.count(leaf) > 1:
            raise NeedsEager(f"the program returns {leaf.name} as is or twice; autograd must "
                             f"see that aliasing")
    for leaf in returned_sequences(leaves):
        if leaf in needs:
            raise NeedsEager(f"the program returns {leaf.name}, a sequence of tensors, as one "
                             f"value; eager autograd gives each of its elements a gradient")
    builder = _Backward(graph, framework, needs)
    differentiable = [i for i, leaf in enumerate(leaves)
                      if leaf in needs and isinstance(leaf.meta.get("tensor_meta"), TensorMeta)]
    last = [n for n in graph.nodes if n.op == "placeholder"][-1]
    tangents = []
    with graph.inserting_after(last):
        for i in reversed(differentiable):
            tangent = graph.placeholder(f"tangent_{i}")
            meta = leaves[i].meta["tensor_meta"]
            tangent.meta["tensor_meta"] = TensorMeta(meta.shape, meta.dtype, meta.device)
            tangents.insert(0, tangent)
            builder.grads[leaves[i]] = tangent
    builder.run()
    leaves = [builder.replaced.get(leaf, leaf) for leaf in leaves]
    grads = [builder.grads.get(p) if p in needs else None for p in primals]
    out_node = graph.output_node()
    graph.erase_node(out_node)
    graph.output(tuple(leaves) + tuple(g for g in grads if g is not None))
    return JointGraph(jgm, framework, primals, names, tangents, leaves, template,
                      differentiable, grads, builder.opaque)


#: Fields of the named tuples ops return (``max(dim)``, ``sort``, ``topk``, ...).
_FIELDS = {"values": 0, "indices": 1}


def _element_index(node: Node) -> Optional[int]:
    """``i`` when ``node`` reads element ``i`` of its first argument: ``pieces[i]``, or a
    named field (``x.max(dim).values``, as TensorPlay's graphs spell it); else None."""
    if node.op != "call_function" or len(node.args) != 2:
        return None
    if node.target is operator.getitem and isinstance(node.args[1], int):
        return node.args[1]
    if node.target is getattr and node.args[1] in _FIELDS:
        return _FIELDS[node.args[1]]
    return None


def _plain_meta(node: Node) -> TensorMeta:
    """``node``'s shape, dtype and device with contiguous strides (a fresh gradient)."""
    meta = node.meta["tensor_meta"]
    return TensorMeta(meta.shape, meta.dtype, meta.device)


def _requires_grad(graph: Any, inputs: List[Node]) -> set:
    needs = set(inputs)
    for node in graph.nodes:
        if node.op in ("call_function", "call_method") and \
                any(i in needs for i in node.all_input_nodes) and \
                _floating(node.meta.get("tensor_meta")) and not node.meta.get(STOP_GRADIENT):
            needs.add(node)
    return needs


class _Backward:
    """Appends gradient nodes for ``needs`` in reverse order (the reverse-mode sweep)."""

    def __init__(self, graph: Any, framework: str, needs: set) -> None:
        self.graph, self.needs, self.framework = graph, needs, framework
        self.e = Emitter(graph, framework)
        self.grads: Dict[Node, Node] = {}
        self.parts: Dict[Node, Dict[int, Node]] = {}  # tuple-valued node -> index -> grad
        self.opaque: List[str] = []
        self.replaced: Dict[Node, Node] = {}  # opaque node -> the node reading its tape
        #: target -> slice-gradient nodes not yet added up (pieces that tile a dim: one cat)
        self.pending: Dict[Node, List[Node]] = {}

    def run(self) -> None:
        nodes = [n for n in self.graph.nodes if n in self.needs and n.op != "placeholder"]
        with self.graph.inserting_before(self.graph.output_node()):
            for node in reversed(nodes):
                self._settle(node)
                self._node(node)
            for target in list(self.pending):
                self._settle(target)

    def accumulate(self, target: Any, grad: Any) -> None:
        if not isinstance(target, Node) or target not in self.needs or grad is None:
            return
        meta = target.meta["tensor_meta"]
        grad = self.e.to_dtype(self.e.sum_to(grad, meta.shape), meta.dtype)
        if slice_span(grad) is not None:
            self.pending.setdefault(target, []).append(grad)
            return
        self._add(target, grad)

    def _add(self, target: Node, grad: Node) -> None:
        old = self.grads.get(target)
        self.grads[target] = grad if old is None else self.e.add(old, grad)

    def _settle(self, target: Node) -> None:
        """Add up ``target``'s slice gradients: one ``cat`` when they tile one dim exactly
        (``rotate_half``, q / k / v slices), else each scattered into zeros."""
        pieces = self.pending.pop(target, None)
        if not pieces:
            return
        spans = [slice_span(p) for p in pieces]
        dims = {dim for dim, _, _ in spans}
        order = sorted(range(len(pieces)), key=lambda i: spans[i][1])
        size = target.meta["tensor_meta"].shape
        tiles = len(dims) == 1 and len(pieces) > 1 and spans[order[0]][1] == 0 and \
            spans[order[-1]][2] == size[spans[0][0]] and \
            all(spans[a][2] == spans[b][1] for a, b in zip(order, order[1:])) and \
            getattr(self.e.fw, "cat", None) is not None
        if not tiles:
            for piece in pieces:
                self._add(target, piece)
            return
        values = [pieces[i].args[0] for i in order]
        self._add(target, emit_cat(self.e, values, spans[0][0], target.meta["tensor_meta"]))
        for piece in pieces:
            self.graph.erase_node(piece)

    def _node(self, node: Node) -> None:
        base = node.args[0] if node.args else None
        index = _element_index(node)
        if index is not None and isinstance(base, Node) and \
                isinstance(base.meta.get("tensor_meta"), tuple):
            if node in self.grads:  # one element of a tuple result (split, chunk, max)
                # ``pieces[-1]`` is element n-1; two reads of one element add up
                index = index % len(base.meta["tensor_meta"])
                parts = self.parts.setdefault(base, {})
                old = parts.get(index)
                parts[index] = self.grads[node] if old is None else \
                    self.e.add(old, self.grads[node])
            return
        grad = self.grads.get(node)
        parts = self.parts.get(node)
        if grad is None and parts is None:
            return  # no output of the program depends on it
        prim = node.meta.get("prim")
        if prim is None:
            rule = vjp_rule(node, self.framework)
            found = None if rule is None else rule(self.e, grad, parts, node, self.needs)
            if found is None:
                return self._opaque(node, grad, parts)
            for target, value in found.items():
                self.accumulate(target, value)
            return
        if prim.vjp is None:
            raise NeedsEager(f"prim {prim.name} (node {node.name}) has no VJP rule; add one "
                             f"in tensorplay_graph/prims/vjps.py")
        args = node.meta["prim_args"]
        try:
            found = prim.vjp(self.e, grad, node, **args)
        except NotDifferentiable as exc:
            raise NeedsEager(f"prim {prim.name} (node {node.name}): {exc}") from None
        if found is OPAQUE:
            return self._opaque(node, grad, parts)
        for name, value in found.items():
            target = args.get(name)
            if isinstance(target, (list, tuple)) and isinstance(value, (list, tuple)):
                for item, grad in zip(target, value):  # a list of tensors (cat's pieces)
                    self.accumulate(item, grad)
            else:
                self.accumulate(target, value)

    def _opaque(self, node: Node, grad: Optional[Node], parts: Optional[Dict[int, Node]]) -> None:
        from ..passes.barriers import custom_op_of
        op = custom_op_of(node.target) if node.op == "call_function" else None
        label = str(getattr(op, "name", None) or getattr(node.target, "__name__", node.target))
        if op is not None and not getattr(op, "has_autograd", True) and \
                (op.is_triton_op or op.is_tile_lang_op):
            kind = "triton_op" if op.is_triton_op else "tile_lang_op"
            raise NeedsEager(f"{op.name} is a {kind} without register_autograd: its kernel does "
                             f"not differentiate; register a backward to train through it compiled")
        inputs = list(dict.fromkeys(node.all_input_nodes))
        slots = [i for i, n in enumerate(inputs) if n in self.needs]
        template = map_arg((node.args, node.kwargs), lambda n: Slot(inputs.index(n)))
        forward = OpaqueForward(node.op, node.target, template, slots,
                                "".join(c if c.isalnum() else "_" for c in label))
        with self.graph.inserting_before(node):
            tape = self.graph.call_function(forward, tuple(inputs))
            value = self.graph.call_function(tape_value, (tape,))
        value.meta = {k: v for k, v in node.meta.items() if k not in ("prim", "prim_args")}
        # Metas the pipeline can trust without running the op: the tape stands for the
        # op's result (its trailing None: the autograd record, not a tensor).
        result = node.meta.get("tensor_meta")
        tape.meta["tensor_meta"] = (result if isinstance(result, tuple) else (result,)) + (None,)
        node.replace_all_uses_with(value)
        self.replaced[node] = value
        self.graph.erase_node(node)
        self.opaque.append(label)
        if parts is not None:
            count = len(node.meta.get("tensor_meta") or ())
            cotangents = [parts.get(i) for i in range(count)]
        else:
            cotangents = [grad]
        backward = self.graph.call_function(tape_backward, (tape,) + tuple(cotangents))
        backward.meta["tensor_meta"] = tuple(_plain_meta(inputs[s]) for s in slots)
        for k, slot in enumerate(slots):
            target = inputs[slot]
            piece = self.graph.call_function(operator.getitem, (backward, k))
            piece.meta["tensor_meta"] = _plain_meta(target)
            self.accumulate(target, piece)
