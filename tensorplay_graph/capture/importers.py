"""Import graphs captured by the frameworks' own compilers into this IR.

``tensorplay.compile`` hands its backend a ``tensorplay.graph.GraphModule``;
``torch.compile`` (Dynamo) hands it a ``torch.fx.GraphModule``. Both follow
the fx node model, so one importer serves both:

* every node keeps its op, target, name, args and kwargs; ``call_module``
  (plain ``torch.fx`` traces) becomes a ``call_function`` of the submodule
  object, since our opcode set is closed;
* registered custom ops (ours, TensorPlay's ``tensorplay.library`` ops,
  ``torch.ops`` overloads) stay single ``call_function`` nodes with the op
  object as target -- the barrier pass recognises them there;
* ``get_attr`` values are copied by reference into the new module (so
  parameters keep their identity and their gradients), and tensor constants
  that TensorPlay inlines into ``args`` are lifted to ``get_attr`` nodes,
  because generated Python code cannot embed a tensor literal;
* ``meta["val"]`` (Dynamo: ``meta["example_value"]``) is kept as ``val`` and
  converted to ``meta["tensor_meta"]`` (:class:`TensorMeta`) -- except for
  symbolic sizes (Dynamo ``dynamic=True`` / automatic dynamic): reading a SymInt
  as an int would add a guard per size, so such nodes keep only ``val`` and
  :mod:`tensorplay_graph.dynamic_shapes` gives them concrete metas per call;
* torch graphs only (:mod:`.dynamo_graph`): functorch / autocast scopes become
  single eager nodes, higher-order ops and unread state switches eager fences,
  each with the reason ``explain()`` shows; ``torch.ops.aten.*`` targets take
  their public spelling where a prim expresses it (:mod:`.aten_targets`).

>>> gm = import_graph_module(tp_graph_module)            # doctest: +SKIP
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from ..errors import GraphCaptureError
from ..frameworks import adapter_for, is_tensor, tensor_meta
from ..ir.meta import TensorMeta

_STACK_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_IDENTIFIER = re.compile(r"[^0-9a-zA-Z_]")


def import_graph_module(source: Any) -> Any:
    """Import a ``tensorplay.graph`` or ``torch.fx`` GraphModule into our IR.

    Returns a :class:`tensorplay_graph.ir.GraphModule` that computes the same
    function; nodes carry ``meta["tensor_meta"]`` wherever the source recorded
    a tensor value.
    """
    from ..ir import Graph, GraphModule

    importer = _Importer(source, Graph())
    importer.run()
    return GraphModule(importer.attrs, importer.graph)


def import_tensorplay_graph(source: Any) -> Any:
    """Import TensorPlay's captured GraphModule (what ``tp.compile`` passes a backend);
    the GELU its tracer decomposes is folded back into one call (capture/patterns.py)."""
    gm = import_graph_module(source)
    from .patterns import fold_erf_gelu
    if fold_erf_gelu(gm.graph, adapter_for("tensorplay").functional().gelu):
        gm.recompile()
    return gm


def import_fx_graph(source: Any) -> Any:
    """Import a ``torch.fx.GraphModule`` (what ``torch.compile`` passes a backend)."""
    return import_graph_module(source)


def placeholder_defaults(source: Any) -> Dict[str, Any]:
    """``{placeholder name: default}`` for the source placeholders that have a default."""
    found = {}
    for node in source.graph.nodes:
        if node.op == "placeholder" and node.args:
            found[str(node.target)] = node.args[0]
    return found


class _Importer:
    """Walks the source graph once, building the new graph node by node."""

    def __init__(self, source: Any, graph: Any) -> None:
        self.source = source
        self.graph = graph
        self.env: Dict[Any, Any] = {}
        self.attrs: Dict[str, Any] = {}
        self._lifted: Dict[int, Any] = {}
        nodes = list(source.graph.nodes)
        self.nodes = nodes
        self.node_type = type(nodes[0]) if nodes else None
        self.is_torch = (self.node_type is not None and
                         self.node_type.__module__.startswith("torch."))

    def run(self) -> None:
        if self.is_torch:
            from .dynamo_graph import plan_units
            units = plan_units(self.nodes)
        else:
            units = self.nodes
        for unit in units:
            if not hasattr(unit, "op"):
                self._import_scope(unit)
                continue
            new = self._import_node(unit)
            if new is not None:
                self.env[unit] = new

    def _import_scope(self, scope: Any) -> None:
        """One call of an ``EagerScope`` and a ``getitem`` per value read after it."""
        import operator

        from .dynamo_graph import build_scope
        target = build_scope(scope, self.source)
        call = self.graph.create_node("call_function", target,
                                      tuple(self._map(v) for v in scope.inputs), {},
                                      name=target.__name__)
        vals = [n.meta.get("val", n.meta.get("example_value")) for n in scope.outputs]
        if vals and all(v is not None for v in vals):
            _set_meta(call.meta, tuple(vals))
        for i, node in enumerate(scope.outputs):
            new = self.graph.create_node("call_function", operator.getitem, (call, i), {},
                                         name=node.name)
            self._copy_meta(node, new)
            self.env[node] = new

    # -- one node ---------------------------------------------------------------
    def _import_node(self, node: Any) -> Any:
        op = node.op
        if op == "placeholder":
            if node.args:  # a default value
                new = self.graph.placeholder(node.name, default_value=self._map(node.args[0]))
            else:
                new = self.graph.placeholder(node.name)
        elif op == "get_attr":
            new = self._get_attr(str(node.target), self._attr_value(node))
        elif op in ("call_function", "call_method"):
            args, kwargs = self._map(tuple(node.args)), self._map(dict(node.kwargs))
            target = node.target
            if self.is_torch:
                op, target, args, kwargs = _torch_call(node, op, target, args, kwargs)
            new = self.graph.create_node(op, target, args, kwargs, name=node.name)
        elif op == "call_module":
            module = self._resolve(str(node.target))
            args, kwargs = self._map(tuple(node.args)), self._map(dict(node.kwargs))
            new = self.graph.create_node("call_function", module, args, kwargs, name=node.name)
        elif op == "output":
            self.graph.output(self._map(node.args[0] if node.args else None))
            return None
        else:
            raise GraphCaptureError(
                f"cannot import node {node.name!r}: opcode {op!r} is not one of "
                "placeholder/get_attr/call_function/call_method/call_module/output")
        self._copy_meta(node, new)
        return new

    def _get_attr(self, qualname: str, value: Any) -> Any:
        # Flatten dotted qualnames ("lin.weight" -> "lin_weight"): our module is
        # built from a flat dict, and the name stays readable in generated code.
        attr = self._fresh_attr(_IDENTIFIER.sub("_", qualname) or "attr")
        self.attrs[attr] = value
        new = self.graph.get_attr(attr)
        if is_tensor(value):
            _set_meta(new.meta, value)
        return new

    def _fresh_attr(self, base: str) -> str:
        if base[0].isdigit():
            base = "_" + base
        name, i = base, 0
        while name in self.attrs:
            i += 1
            name = f"{base}_{i}"
        return name

    # -- values -----------------------------------------------------------------
    def _attr_value(self, node: Any) -> Any:
        try:
            return self._resolve(str(node.target))
        except AttributeError:
            value = node.meta.get("val")
            if value is None:
                raise GraphCaptureError(
                    f"get_attr node {node.name!r}: the source module has no attribute "
                    f"{node.target!r} and the node records no value") from None
            return value

    def _resolve(self, qualname: str) -> Any:
        getter = getattr(self.source, "_get_attr", None)  # tensorplay.graph's own resolver
        if callable(getter):
            try:
                value = getter(qualname)
            except (AttributeError, KeyError, IndexError):
                value = None
            if value is not None:
                return value
        value = self.source
        for part in qualname.split("."):
            value = value[int(part)] if part.isdigit() and isinstance(value, (list, tuple)) \
                else getattr(value, part)
        return value

    def _map(self, value: Any) -> Any:
        if self.node_type is not None and isinstance(value, self.node_type):
            return self.env[value]
        if isinstance(value, tuple):
            mapped = [self._map(v) for v in value]
            return type(value)(*mapped) if hasattr(value, "_fields") else tuple(mapped)
        if isinstance(value, list):
            return [self._map(v) for v in value]
        if isinstance(value, dict):
            return {k: self._map(v) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(self._map(value.start), self._map(value.stop), self._map(value.step))
        if is_tensor(value):
            return self._lift_constant(value)
        return value

    def _lift_constant(self, value: Any) -> Any:
        lifted = self._lifted.get(id(value))
        if lifted is None:
            lifted = self._get_attr("_tensor_constant", value)
            self._lifted[id(value)] = lifted
        return lifted

    def _copy_meta(self, node: Any, new: Any) -> None:
        meta = node.meta
        value = meta.get("val", meta.get("example_value"))
        if value is not None:
            _set_meta(new.meta, value)
        stack = _stack_of(meta.get("stack_trace"))
        if stack:
            new.meta["stack"] = stack


def _torch_call(node: Any, op: str, target: Any, args: tuple, kwargs: dict) -> tuple:
    """A torch node's call, with aten targets respelled and eager targets wrapped."""
    from .aten_targets import public_call
    from .dynamo_graph import eager_target
    wrapped = eager_target(node)
    if wrapped is not None:
        return op, wrapped, args, kwargs
    return public_call(op, target, args, kwargs) or (op, target, args, kwargs)


def _set_meta(meta: Dict[str, Any], value: Any) -> None:
    meta["val"] = value
    converted = _tensor_meta_of(value)
    if converted is not None:
        meta["tensor_meta"] = converted


def _tensor_meta_of(value: Any) -> Optional[Any]:
    """TensorMeta of a tensor, a tuple of them for a tuple of tensors, else None."""
    if is_tensor(value):
        if _has_symbolic_sizes(value):
            return None  # kept symbolic: int() on a SymInt would guard Dynamo on it
        try:
            return tensor_meta(value)
        except (TypeError, ValueError, RuntimeError):
            return None  # a tensor without strides (sparse, nested): no static meta
    if isinstance(value, (tuple, list)) and value and all(is_tensor(v) for v in value):
        metas = tuple(_tensor_meta_of(v) for v in value)
        return metas if all(isinstance(m, TensorMeta) for m in metas) else None
    return None


def _has_symbolic_sizes(value: Any) -> bool:
    return adapter_for(value).has_symbolic_sizes(value)


def _stack_of(trace: Any) -> Optional[str]:
    """``"file:line in fn"`` of the innermost frame of an fx ``stack_trace``."""
    if not isinstance(trace, str):
        return None
    frames = _STACK_FRAME.findall(trace)
    if not frames:
        return None
    path, line, fn = frames[-1]
    return f"{path}:{line} in {fn}"
