"""``shape_prop`` with example inputs: keep known metas, run only what no rule covers.

See :mod:`tensorplay_graph.passes.shape_prop` for the policy and why. Never run
here: registered custom ops (their bodies may launch kernels, count calls or write
into undeclared inputs) and nodes that declare ``_is_impure`` (``print``). Their
metadata, and that of everything computed from them, stays unknown (``unknown``);
``barriers`` keeps those nodes out of regions, and a compiled program learns them
from its first call (:func:`tensorplay_graph.interpreter.run_recording_metas`).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Dict

from ..frameworks import framework_of, private_copy, tensor_meta
from ..ir.effects import declares_impure, is_inplace, prim_effect
from ..ir.meta import TensorMeta
from ..ir.node import Node, map_aggregate, map_arg
from .normalize import graph_framework
from .shape_prop import SymbolicPropagator, _is_symbolic, _record, _symbolic_meta, meta_of_value

__all__ = ["KnownMetaPropagator", "is_plain_value", "unknown_metas"]


class _Hole:  # not a tuple: getitem and map_aggregate must not look inside
    """A value not known without running ``roots`` (nodes that lack meta and have no rule)."""

    def __init__(self, roots: frozenset) -> None:
        self.roots = roots


class _Deferred(Exception):
    """Raised by ``load`` when an argument is a ``_Hole``; ``args[0]`` is its roots."""


def _valid_meta(meta: Any) -> bool:
    if isinstance(meta, TensorMeta):
        return True
    return isinstance(meta, tuple) and any(isinstance(m, TensorMeta) for m in meta) and \
        all(m is None or isinstance(m, TensorMeta) for m in meta)


def _layout(meta: Any) -> Any:
    if isinstance(meta, TensorMeta):
        return (meta.shape, meta.dtype, meta.device, meta.stride)
    return tuple(_layout(m) for m in meta) if isinstance(meta, tuple) else meta


def is_plain_value(value: Any) -> bool:
    """A Python scalar / string, or a tuple / list of them (kept as ``node.meta["val"]``)."""
    if isinstance(value, (tuple, list)):
        return all(is_plain_value(v) for v in value)
    return isinstance(value, (bool, int, float, str))


def _symbolic_value(value: Any) -> Any:
    """A real value as the propagator's env holds it: tensors -> TensorMeta, rest unchanged."""
    return map_aggregate(value, lambda v: tensor_meta(v) if framework_of(v) is not None else v)


class KnownMetaPropagator(SymbolicPropagator):
    """Keeps valid metas, infers missing ones, runs for real only the nodes no rule covers."""

    def __init__(self, gm: Any, example_inputs: tuple, run_real: bool = True) -> None:
        super().__init__(gm)
        self.example_inputs = example_inputs
        self.run_real = run_real
        #: Nodes whose metadata stays unknown (they, or an input, may not run here).
        self.unknown: set = set()
        self.real: Dict[Node, Any] = {}  # nodes run for real -> their values
        self.trusted = True
        self._interpreter: Any = None
        self._effects = ExitStack()

    def run(self) -> None:
        self._seed_placeholders()
        with self._effects:
            while True:
                demanded = self._propagate()
                self.unknown |= {n for n in demanded if _never_run(n)}
                demanded -= self.unknown
                if not self.run_real:
                    self.unknown |= demanded
                    return
                if not demanded:
                    return
                self._run_real(demanded)

    def _seed_placeholders(self) -> None:
        placeholders = list(self.graph.find_nodes(op="placeholder"))
        for node, value in zip(placeholders, self.example_inputs):
            meta = meta_of_value(value)
            old = node.meta.get("tensor_meta")
            if old is not None and _layout(old) != _layout(meta):
                self.trusted = False  # captured for other inputs: downstream metas are stale
            if meta is not None:
                node.meta["tensor_meta"] = meta
            self.env[node] = value if meta is None else meta

    def placeholder(self, node: Node) -> Any:  # one past the example inputs: its default
        return node.args[0] if node.args else super().placeholder(node)

    def load(self, args: Any, holes_as_none: bool = False) -> Any:
        roots: set = set()

        def get(n: Node) -> Any:
            value = self.env[n]
            if isinstance(value, _Hole):
                roots.update(value.roots)
                return None
            return value

        loaded = map_arg(args, get)
        if roots and not holes_as_none:
            raise _Deferred(frozenset(roots))
        return loaded

    def output(self, node: Node) -> Any:
        # A non-tensor output of an opaque tuple op needs no run: its meta entry is None.
        return self.load(node.args[0] if node.args else None, holes_as_none=True)

    def _propagate(self) -> set:
        """One pass over the graph; returns the nodes that must run for real."""
        demanded: set = set()
        for node in self.graph.nodes:
            if node.op == "placeholder" and node in self.env:
                continue
            if node in self.real:
                self.env[node] = _symbolic_value(self.real[node])
                continue
            meta = node.meta.get("tensor_meta")
            if node.op in ("call_function", "call_method") and self.trusted and _valid_meta(meta):
                # Non-tensor elements of a tuple are unknown until their producer runs.
                self.env[node] = meta if isinstance(meta, TensorMeta) else tuple(
                    m if m is not None else _Hole(frozenset({node})) for m in meta)
                continue
            if node.op in ("call_function", "call_method") and self.trusted and \
                    is_plain_value(node.meta.get("val")):  # an importer's recorded int / bool
                self.env[node] = node.meta["val"]
                continue
            try:
                value = getattr(self, node.op)(node)
            except _Deferred as deferred:  # an input is unknown; its producer is demanded
                demanded |= deferred.args[0]
                self.env[node] = _Hole(deferred.args[0])
                continue
            except Exception:  # no rule, or the rule cannot see data: run it for real
                demanded.add(node)
                self.env[node] = _Hole(frozenset({node}))
                continue
            self.env[node] = value
            if _is_symbolic(value):
                node.meta["tensor_meta"] = _symbolic_meta(value)
        return demanded

    def _run_real(self, demanded: set) -> None:
        from ..interpreter import Interpreter, NodeExecutionError, describe_failure

        order = {n: i for i, n in enumerate(self.graph.nodes)}
        if self._interpreter is None:
            self._copy_leaves = any(is_inplace(n) for n in self.graph.nodes)
            self._interpreter = Interpreter(self.gm, garbage_collect_values=False)
            placeholders = list(self.graph.find_nodes(op="placeholder"))
            for node, value in zip(placeholders, self.example_inputs):
                self._interpreter.env[node] = private_copy(value) if self._copy_leaves else value
        needed: set = set()
        for node in demanded:
            closure = self._closure(node, order)
            if any(_never_run(n) for n in closure):
                self.unknown.add(node)  # it reads (or follows) what may not run here
            else:
                needed |= closure
        interpreter = self._interpreter
        for node in sorted(needed, key=order.__getitem__):
            if node in interpreter.env:
                continue
            try:
                value = _random_stand_in(node)  # never draw from the caller's stream here
                if value is None:
                    value = interpreter.run_node(node)
            except Exception as exc:
                if isinstance(exc, NodeExecutionError):
                    raise
                raise NodeExecutionError(describe_failure(node, exc), node, exc) from exc
            if self._copy_leaves and node.op == "get_attr":
                value = private_copy(value)
            interpreter.env[node] = value
            self.real[node] = value
            _record(node, value)

    def _closure(self, node: Node, order: Dict[Node, int]) -> set:
        """``node``, its inputs, and every earlier write / random draw with their inputs.

        Values (hence data-dependent shapes) must equal a full run's: writes and random
        draws that precede the node run too, in graph order.
        """
        needed = {node} | {n for n in self.graph.nodes
                           if order[n] < order[node] and _has_effect(n)}
        stack = list(needed)
        while stack:
            fresh = [s for s in stack.pop().all_input_nodes if s not in needed]
            needed.update(fresh)
            stack += fresh
        return needed


def unknown_metas(gm: Any, example_inputs: tuple) -> set:
    """The nodes whose metadata is not known without running them (nothing runs here)."""
    propagator = KnownMetaPropagator(gm, example_inputs, run_real=False)
    propagator.run()
    return {n for n in propagator.unknown if n.users}  # an unread value needs no metadata


def _random_stand_in(node: Node) -> Any:
    """Zeros with a random node's metadata (None for other nodes, or an unknown meta)."""
    meta = node.meta.get("tensor_meta")
    if prim_effect(node) != "random" or not isinstance(meta, TensorMeta):
        return None
    from ..capture.randomness import zeros_like_meta
    return zeros_like_meta(meta, graph_framework(node.graph))


def _never_run(node: Node) -> bool:
    """Custom ops and declared-impure nodes: their effects belong to the program's own run."""
    if node.op != "call_function":
        return False
    target = node.target
    custom = all(hasattr(target, a) for a in ("mutates_args", "is_triton_op", "is_tile_lang_op"))
    return custom or declares_impure(target)


def _has_effect(node: Node) -> bool:
    """Writes into a value or draws random numbers (either changes what later nodes read)."""
    return is_inplace(node) or prim_effect(node) == "random"
