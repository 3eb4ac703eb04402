"""``shape_prop``: ``meta["tensor_meta"]`` on every tensor-valued node.

Two modes:

* without example inputs -- start from the placeholders' ``tensor_meta`` (or
  ``meta["val"]``) and apply each node's prim meta rule; registered custom ops
  (ours and TensorPlay's ``tensorplay.library`` ops) run their ``register_fake``
  function on zero tensors of the right metadata; shape queries (``x.size(0)``,
  ``x.shape``, ``getitem`` on tuples, int arithmetic) are evaluated;
* with example inputs -- the graph is *not* executed where metadata is known:
  placeholders take the inputs' metadata, a node's existing valid
  ``tensor_meta`` (capture and the importers set one on every tensor node, from
  the run they already made) is kept, a missing one comes from the rules above.
  Only nodes that lack metadata *and* have no rule (an opaque custom op without
  ``register_fake``; ``nonzero``, ``item``) run for real (``Interpreter``), with
  their inputs and every earlier mutating or random node, so their values equal
  a full run's; that run uses private copies of the inputs when the graph writes
  into them, and stands in zeros for random nodes (it never draws from the
  caller's random stream). Custom ops and ``print`` never run here. A placeholder meta that disagrees
  with its example input makes every node's meta be recomputed. Why: compile()
  already ran the program to capture it; running it again would double compile
  cost and repeat undeclared side effects of opaque ops (counters, collectives).

A node with no way to infer its metadata raises ``ShapeError`` naming the node,
the op and the fix. Non-tensor values (ints) get no ``tensor_meta``; tuple
results get a tuple of ``TensorMeta`` (``None`` for non-tensor elements).

>>> shape_prop(gm, torch.randn(4, 8))                    # doctest: +SKIP
>>> shape_prop(gm)   # placeholders already carry tensor_meta     # doctest: +SKIP
"""

from __future__ import annotations

import builtins
import operator
import sys
from typing import Any, Dict

from ..errors import ShapeError
from ..frameworks import adapter_for, framework_of, loaded, tensor_meta
from ..ir.meta import TensorMeta
from ..ir.node import Node, map_aggregate, map_arg, target_name
from .normalize import graph_framework

__all__ = ["shape_prop", "meta_of_value"]

_SHAPE_METHODS = {"size", "dim", "numel", "ndimension", "stride"}
_SHAPE_ATTRS = {"shape": lambda m: m.shape, "ndim": lambda m: m.ndim, "dtype": lambda m: m.dtype,
                "device": lambda m: m.device}
_PURE_MODULES = ("_operator", "builtins", "math")


def meta_of_value(value: Any) -> Any:
    """TensorMeta of a tensor; a tuple of them (None for non-tensors) for a sequence; else None."""
    if framework_of(value) is not None:
        return tensor_meta(value)
    if isinstance(value, (tuple, list)) and any(framework_of(v) is not None for v in value):
        return tuple(meta_of_value(v) for v in value)
    return None


def _record(node: Node, value: Any) -> None:
    meta = meta_of_value(value) if not _is_symbolic(value) else _symbolic_meta(value)
    if meta is not None:
        node.meta["tensor_meta"] = meta


def _is_symbolic(value: Any) -> bool:
    return isinstance(value, TensorMeta) or (
        isinstance(value, (tuple, list)) and any(isinstance(v, TensorMeta) for v in value))


def _symbolic_meta(value: Any) -> Any:
    if isinstance(value, TensorMeta):
        return value
    return tuple(v if isinstance(v, TensorMeta) else None for v in value)


def shape_prop(gm: Any, *example_inputs: Any) -> Any:
    """Fill ``meta["tensor_meta"]``: from meta rules, running (part of) the graph on
    ``example_inputs`` only where no meta is known and no rule applies (module docstring)."""
    graph = getattr(gm, "graph", gm)
    # A program without placeholders is fully given: () are all its example inputs.
    if example_inputs or not any(n.op == "placeholder" for n in graph.nodes):
        from .shape_prop_data import KnownMetaPropagator
        KnownMetaPropagator(gm, example_inputs).run()
    else:
        SymbolicPropagator(gm).run()
    return gm


# ----------------------------------------------------------------------------- without data

def _custom_op_kind(target: Any) -> Any:
    """``"ours"`` or the framework name (a framework's own custom op) for registered ops, else None."""
    ours = sys.modules.get("tensorplay_graph.library.custom_op")
    if ours is not None and isinstance(target, ours.CustomOpDef):
        return "ours"
    for framework in loaded():
        if isinstance(target, adapter_for(framework).foreign_custom_op_types()):
            return framework
    return None


def _zeros(meta: TensorMeta, framework: str) -> Any:
    """A real zero tensor with ``meta``'s shape, dtype and strides (on the CPU)."""
    strided = not meta.is_contiguous and meta.numel
    return adapter_for(framework).zeros(meta.shape, meta.dtype, stride=meta.stride if strided else None)


class SymbolicPropagator:
    """Walks the graph once; env maps a node to a TensorMeta, tuple, or Python value."""

    def __init__(self, gm: Any) -> None:
        self.gm = gm
        self.graph = getattr(gm, "graph", gm)
        self.env: Dict[Node, Any] = {}
        self._framework = None

    def framework(self) -> str:
        if self._framework is None:
            self._framework = graph_framework(self.graph)
            present = loaded()
            if self._framework not in present:  # fake kernels run on an imported framework
                self._framework = "torch" if "torch" in present or not present else present[0]
        return self._framework

    def run(self) -> None:
        for node in self.graph.nodes:
            value = getattr(self, node.op)(node)
            self.env[node] = value
            if _is_symbolic(value):
                node.meta["tensor_meta"] = _symbolic_meta(value)

    def load(self, args: Any) -> Any:
        return map_arg(args, lambda n: self.env[n])

    # -- opcodes -------------------------------------------------------------------
    def placeholder(self, node: Node) -> Any:
        meta = node.meta.get("tensor_meta")
        if meta is None and "val" in node.meta:
            value = node.meta["val"]
            meta = meta_of_value(value)
            if meta is None:
                return value
        if meta is None:
            raise ShapeError(
                f"shape_prop: placeholder {node.name} has no meta['tensor_meta'] (or meta['val']); "
                f"pass example inputs (shape_prop(gm, *inputs)) or set "
                f"node.meta['tensor_meta'] = TensorMeta(shape, dtype) on it")
        return meta

    def get_attr(self, node: Node) -> Any:
        value = self.gm
        for atom in node.target.split("."):
            value = getattr(value, atom)
        meta = meta_of_value(value)
        return value if meta is None else meta

    def output(self, node: Node) -> Any:
        return self.load(node.args[0] if node.args else None)

    def call_method(self, node: Node) -> Any:
        return self._call(node)

    def call_function(self, node: Node) -> Any:
        return self._call(node)

    # -- calls ---------------------------------------------------------------------
    def _call(self, node: Node) -> Any:
        if node.target is operator.getitem:
            base = self.load(node.args[0])
            if isinstance(base, (tuple, list)):
                return base[self.load(node.args[1])]
        prim = node.meta.get("prim")
        if prim is not None:  # the prim rule reads prim_args only: skip loading args
            return self._apply_prim(node, prim)
        args, kwargs = self.load(node.args), self.load(node.kwargs)
        kind = _custom_op_kind(node.target)
        if kind is not None:
            return self._fake(node, kind, args, kwargs)
        if node.op == "call_method" and isinstance(args[0], TensorMeta) and \
                node.target in _SHAPE_METHODS:
            return self._shape_query(node, args, kwargs)
        if node.target is builtins.getattr and isinstance(args[0], TensorMeta) and \
                args[1] in _SHAPE_ATTRS:
            return _SHAPE_ATTRS[args[1]](args[0])
        if node.op == "call_function" and getattr(node.target, "__module__", None) in _PURE_MODULES \
                and not _is_symbolic(list(args) + list(kwargs.values())):
            return node.target(*args, **kwargs)  # int arithmetic on sizes
        raise ShapeError(
            f"shape_prop: node {node.name} ({node.op} {target_name(node.target)}) has no meta rule: "
            f"it maps to no prim and is not a custom op with register_fake. Pass example inputs "
            f"(shape_prop(gm, *inputs)), add a prim record for it in tensorplay_graph/prims, or "
            f"wrap it in a custom op with register_fake")

    def _apply_prim(self, node: Node, prim: Any) -> Any:
        from ..prims.rules import framework_rules

        prim_args = self.load(node.meta.get("prim_args", {}))
        try:
            with framework_rules(self.framework()):  # TensorPlay promotes unlike torch
                return prim.meta(**prim_args)
        except ShapeError as exc:
            raise ShapeError(f"shape_prop: node {node.name} (prim {prim.name}, target "
                             f"{target_name(node.target)}): {exc}") from exc
        except Exception as exc:  # a bug or bad argument inside a meta rule
            raise ShapeError(f"shape_prop: node {node.name} (prim {prim.name}): meta rule failed "
                             f"with {type(exc).__name__}: {exc}; check the node's arguments "
                             f"{prim_args!r}") from exc

    def _shape_query(self, node: Node, args: tuple, kwargs: dict) -> Any:
        meta, rest = args[0], list(args[1:]) + list(kwargs.values())
        if node.target in ("dim", "ndimension"):
            return meta.ndim
        if node.target == "numel":
            return meta.numel
        table = meta.shape if node.target == "size" else meta.stride
        return table[rest[0]] if rest else tuple(table)

    def _fake(self, node: Node, kind: str, args: tuple, kwargs: dict) -> Any:
        op = node.target
        fake_fn = getattr(op, "_fake_fn", None)
        if fake_fn is None:
            raise ShapeError(
                f"shape_prop: custom op {target_name(op)} at node {node.name} has no fake kernel; "
                f"register one with @{target_name(op)}.register_fake or pass example inputs")
        framework = kind if kind != "ours" else self.framework()
        devices = [m.device for m in list(args) + list(kwargs.values()) if isinstance(m, TensorMeta)]

        def realize(value: Any) -> Any:
            return _zeros(value, framework) if isinstance(value, TensorMeta) else value

        try:
            out = fake_fn(*map_aggregate(args, realize), **map_aggregate(kwargs, realize))
        except Exception as exc:
            raise ShapeError(f"shape_prop: fake kernel of {target_name(op)} failed at node "
                             f"{node.name}: {type(exc).__name__}: {exc}") from exc
        device = devices[0] if devices else "cpu"
        return map_aggregate(out, lambda v: tensor_meta(v).with_(device=device)
                             if framework_of(v) is not None else v)
