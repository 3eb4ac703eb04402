"""What torch.fx graphs from Dynamo hold that no kernel may run: eager scopes and effects.

Dynamo records interpreter state changes as graph nodes. Three kinds need care
before our passes see the graph (``_Importer`` asks :func:`plan_units`):

* **scopes** -- nodes between a functorch / autocast *enter* and its *exit*
  (``_vmap_increment_nesting`` ... ``_vmap_decrement_nesting``, ``_enter_autocast``
  ... ``_exit_autocast``, ``torch.func.grad`` / ``jvp`` nesting, forward-AD dual
  levels). Values inside a vmap scope are functorch batched tensors, which have
  no storage; ops inside an autocast scope run in autocast's dtypes. The whole
  scope becomes ONE node whose target, an :class:`EagerScope`, runs the source
  nodes eagerly through ``torch.fx`` -- so no region includes them or reads a
  batched value, and their order is kept;
* **higher-order ops** (``torch.ops.higher_order.cond`` / ``while_loop`` /
  ``associative_scan`` / ``wrap`` / ``invoke_subgraph`` ...) run their subgraph
  modules eagerly, as an :class:`EagerCall` fence (a HOP may hide effects);
* **effects** -- calls that nobody reads yet Dynamo kept (it removes dead pure
  code itself): ``_set_grad_enabled``, ``lazy_load_decompositions``, profiler
  marks. They become :class:`EagerCall` fences, so DCE keeps them and nothing
  moves across them.

Every wrapper carries ``eager_reason``: the barrier pass shows it in ``explain()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

#: enter-node name -> scope kind; exit-node names close the innermost open scope.
SCOPE_OPENERS = {
    "_vmap_increment_nesting": "vmap", "_grad_increment_nesting": "grad",
    "_jvp_increment_nesting": "jvp", "_enter_autocast": "autocast",
    "_enter_dual_level": "forward_ad",
}
SCOPE_CLOSERS = frozenset({
    "_vmap_decrement_nesting", "_grad_decrement_nesting", "_jvp_decrement_nesting",
    "_exit_autocast", "_exit_dual_level",
})
#: State switches whose result is read (by their exit), so "no users" misses them.
STATE_SWITCHES = frozenset({"_enter_inference_mode", "_exit_inference_mode", "_set_grad_enabled"})

_SCOPE_REASONS = {
    "vmap": "torch.vmap body: its values are functorch batched tensors, which have no storage "
            "for a kernel to read",
    "grad": "torch.func.grad body: functorch grad levels wrap its tensors",
    "jvp": "torch.func.jvp body: functorch jvp levels wrap its tensors",
    "autocast": "autocast region: its ops run in autocast's dtypes, which generated kernels "
                "do not model",
    "forward_ad": "forward-mode AD region: its tensors carry dual numbers",
}


class EagerCall:
    """A call target that runs ``target`` eagerly, with the reason it may not be fused.

    ``_is_impure`` (fx's convention) makes it a fence: never dropped, never
    reordered.
    """

    def __init__(self, target: Any, reason: str, impure: bool = True) -> None:
        self.target = target
        self.eager_reason = reason
        self._is_impure = impure
        self.__name__ = _identifier(getattr(target, "__name__", None) or type(target).__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<eager {self.__name__}>"


class EagerScope:
    """A run of Dynamo nodes executed eagerly as one unit (``module`` is a torch.fx
    GraphModule over the scope's inputs, returning the values used after it)."""

    _is_impure = True  # it enters and leaves interpreter state: keep its place

    def __init__(self, module: Any, kind: str, names: Sequence[str]) -> None:
        self.module = module
        self.kind = kind
        self.names = tuple(names)
        self.__name__ = f"{kind}_scope"
        self.eager_reason = (f"{_SCOPE_REASONS[kind]}; its {len(self.names)} nodes "
                             f"({_short_list(self.names)}) run eagerly as one unit")

    def __call__(self, *args: Any) -> tuple:
        return tuple(self.module(*args))

    def __repr__(self) -> str:
        return f"<{self.kind} scope of {len(self.names)} nodes>"


@dataclass
class Scope:
    """Source nodes ``nodes`` (in order) that run as one :class:`EagerScope`."""

    kind: str
    nodes: List[Any]
    inputs: List[Any] = field(default_factory=list)
    outputs: List[Any] = field(default_factory=list)


Unit = Union[Any, Scope]  # a source node, or a scope of them


def plan_units(nodes: Sequence[Any]) -> List[Unit]:
    """Group the source nodes: scopes become :class:`Scope` units, others stay nodes.

    Nested scopes fold into their outermost one; a scope left open at the end of
    the graph (Dynamo broke the graph inside a ``with``) runs to the output.
    """
    units: List[Unit] = []
    open_scope: Optional[Scope] = None
    depth = 0
    for node in nodes:
        name = _call_name(node)
        if node.op == "output":
            if open_scope is not None:
                units.append(open_scope)
                open_scope = None
            units.append(node)
            continue
        if name in SCOPE_OPENERS:
            if depth == 0:
                open_scope = Scope(SCOPE_OPENERS[name], [])
            depth += 1
        if open_scope is not None:
            open_scope.nodes.append(node)
        else:
            units.append(node)
        if name in SCOPE_CLOSERS and depth > 0:
            depth -= 1
            if depth == 0:
                units.append(open_scope)
                open_scope = None
    for unit in units:
        if isinstance(unit, Scope):
            _wire(unit)
    return units


def _wire(scope: Scope) -> None:
    inside = set(scope.nodes)
    seen: Dict[Any, None] = {}
    for node in scope.nodes:
        for value in node.all_input_nodes:
            if value not in inside:
                seen.setdefault(value)
    scope.inputs = list(seen)
    scope.outputs = [n for n in scope.nodes if any(u not in inside for u in n.users)]


def build_scope(scope: Scope, root: Any) -> EagerScope:
    """The :class:`EagerScope` running ``scope``'s nodes (``root``: the source module)."""
    import torch.fx

    graph = torch.fx.Graph()
    env: Dict[Any, Any] = {}
    for value in scope.inputs:
        env[value] = graph.placeholder(value.name)
    for node in scope.nodes:
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[n] for n in scope.outputs))
    module = torch.fx.GraphModule(root, graph, class_name=f"{scope.kind}_scope")
    return EagerScope(module, scope.kind, [n.name for n in scope.nodes])


def eager_target(node: Any) -> Optional[EagerCall]:
    """An :class:`EagerCall` for a higher-order op or an unread state switch, else None."""
    if node.op != "call_function":
        return None
    target = node.target
    if _is_higher_order(target):
        name = getattr(target, "__name__", None) or getattr(target, "_name", "?")
        return EagerCall(target, f"higher-order op {name} runs its subgraphs eagerly "
                                 f"(no backend lowers control flow or scans)")
    name = _call_name(node)
    if name in STATE_SWITCHES or (not node.users and _may_have_effect(node)):
        return EagerCall(target, f"{name} changes interpreter state (grad mode, functorch, "
                                 f"profiler); it runs eagerly, in program order")
    return None


def _may_have_effect(node: Any) -> bool:
    """An unread call is an effect unless its target is known pure or mutates visibly
    (mutations already are barriers with their own reason)."""
    from ..ir.effects import declared_mutations, declares_impure
    target = node.target
    if declares_impure(target) or declared_mutations(target):
        return False
    if getattr(target, "__module__", None) in ("_operator", "operator"):
        return False
    return not (isinstance(getattr(target, "__name__", None), str) and
                target.__name__.endswith("_") and not target.__name__.endswith("__"))


def _is_higher_order(target: Any) -> bool:
    from torch._ops import HigherOrderOperator
    return isinstance(target, HigherOrderOperator)


def _call_name(node: Any) -> Optional[str]:
    if node.op != "call_function":
        return None
    name = getattr(node.target, "__name__", None)
    return name if isinstance(name, str) else None


def _identifier(text: str) -> str:
    clean = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in text)
    return clean if clean and not clean[0].isdigit() else f"op_{clean}"


def _short_list(names: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (", ..." if len(names) > limit else "")
