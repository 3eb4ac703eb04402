"""The ``barriers`` pass: mark every node that may not join a fusion region, and say why.

Every verdict is derived from something inspectable -- the op object's own
flags (``CustomOpDef.mutates_args`` / ``is_triton_op`` / ``is_tile_lang_op``),
the prim record's flags (``side_effect``, ``random``, ``data_dependent``),
the call's spelling (``x.add_(y)``, ``out=``; all read through the one effect
predicate, :mod:`tensorplay_graph.ir.effects`) and the backends' ``supports``
answers -- never from a hidden list of op names.

>>> barriers(gm, backends=["reference"])             # doctest: +SKIP
>>> gm.graph.find_nodes(op="call_function")[0].meta["barrier"]   # doctest: +SKIP
Barrier(code='custom_op', reason='mylib::scale is a registered custom op ...')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

from ..ir.effects import (declared_mutations, declares_impure, inplace_reason,
                          op_label, prim_effect)
from .causal_attention import attention_note

__all__ = ["Barrier", "barriers", "barrier_of", "aliasing_nodes", "custom_op_of", "CODES"]

CODES = ("custom_op", "triton_op", "tile_lang_op", "mutation", "side_effect",
         "data_dependent", "random", "no_prim", "alias", "no_meta", "unsupported")

# Codes whose nodes must keep their place relative to all other nodes: no region
# spans them and no reordering moves a node across them (mutation order, RNG order).
FENCE_CODES = frozenset({"mutation", "side_effect", "random"})


@dataclass(frozen=True)
class Barrier:
    """Why a node may not join a region: ``code`` (one of ``CODES``) and a sentence.

    ``fence`` is True when the node must also keep its order relative to every
    other node (mutations, side effects, random ops).
    """

    code: str
    reason: str
    fence: bool = False

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"barrier code must be one of {CODES}, got {self.code!r}")

    def __str__(self) -> str:
        return f"{self.code}: {self.reason}"


def custom_op_of(target: Any) -> Optional[Any]:
    """``target`` if it is a registered custom op (ours or TensorPlay's ``CustomOpDef``)."""
    # Duck-typed on the CustomOpDef properties both libraries share, so neither
    # library has to be imported to recognise the other's ops.
    if all(hasattr(target, a) for a in ("mutates_args", "is_triton_op", "is_tile_lang_op")):
        return target
    return None


def _custom_op_barrier(op) -> Barrier:
    name = getattr(op, "name", repr(op))
    mutated = declared_mutations(op)
    mutation = (f"; it mutates {', '.join(mutated)} (declared mutates_args), so it also keeps "
                f"its order with every reader and writer") if mutated else ""
    if op.is_triton_op:
        return Barrier("triton_op", f"{name} is a triton_op: it runs its own registered Triton "
                       f"kernel, never fused{mutation}", fence=bool(mutated))
    if op.is_tile_lang_op:
        return Barrier("tile_lang_op", f"{name} is a tile_lang_op: it runs its own registered "
                       f"TileLang kernel, never fused{mutation}", fence=bool(mutated))
    if mutated:
        return Barrier("mutation", f"custom op {name} mutates {', '.join(mutated)} (declared "
                       f"mutates_args); it keeps its order with every reader and writer",
                       fence=True)
    return Barrier("custom_op", f"{name} is a registered custom op: opaque, it runs its own "
                   f"kernel through eager dispatch")


def barrier_of(node, backends: Sequence = (), must_alias: Optional[Dict[Any, str]] = None,
               data_shaped: Optional[Dict[Any, Any]] = None) -> Optional[Barrier]:
    """The ``Barrier`` of one node, or ``None`` if it may join a region.

    ``backends`` are resolved backend objects; a node with a prim that none of
    them supports gets an ``unsupported`` barrier naming each one's reason.
    ``must_alias`` (from :func:`aliasing_nodes`) maps nodes that must return
    eager's alias to why; ``data_shaped`` (from :func:`.data_shapes.data_shape_readers`)
    maps nodes that read a value whose shape depends on data to that value's source.
    """
    if node.op not in ("call_function", "call_method"):
        return None
    op = custom_op_of(node.target) if node.op == "call_function" else None
    if op is not None:
        return _custom_op_barrier(op)
    eager = getattr(node.target, "eager_reason", None) if node.op == "call_function" else None
    if isinstance(eager, str):  # importers' eager scopes / calls (capture/dynamo_graph.py)
        fence = declares_impure(node.target)
        return Barrier("side_effect" if fence else "no_prim", eager, fence=fence)
    inplace = inplace_reason(node)
    if inplace is not None:
        return Barrier("mutation", f"{inplace}; it keeps its order with every reader and writer",
                       fence=True)
    if node.op == "call_function" and declares_impure(node.target):
        why = getattr(node.target, "_impure_reason", None) or "it runs eagerly, in program order"
        return Barrier("side_effect", f"{op_label(node)} declares _is_impure; {why}", fence=True)
    prim = node.meta.get("prim")
    if prim is None:
        kept = attention_note(node)
        if kept is not None:
            return Barrier("no_prim", kept)
        return Barrier("no_prim", f"{op_label(node)} has no prim, so no backend can generate "
                       f"code for it; it runs eagerly. To fuse it, add a prim record in "
                       f"tensorplay_graph/prims")
    effect = prim_effect(node)  # honours flags_if: dropout(training=False) draws nothing
    if effect == "side_effect":
        return Barrier("side_effect", f"prim {prim.name} has a side effect; it runs eagerly, "
                       f"in program order", fence=True)
    if effect == "random":
        return Barrier("random", f"prim {prim.name} draws random numbers; it runs eagerly so "
                       f"the random stream matches eager execution", fence=True)
    if prim.data_dependent and prim.flags_apply(node.meta.get("prim_args", {})):
        return Barrier("data_dependent", f"prim {prim.name} has a result whose shape or value "
                       f"depends on tensor data; it runs eagerly")
    if must_alias and node in must_alias:
        return Barrier("alias", f"{op_label(node)} returns an alias of its input in eager "
                       f"(a view or a no-op cast) and {must_alias[node]}; a kernel would return "
                       f"a copy, so it runs eagerly")
    source = data_shaped.get(node) if data_shaped else None
    if source is not None:
        label = op_label(source)
        origin = source.name if label == source.name else f"{source.name}, {label}"
        return Barrier("data_dependent", f"it reads a value whose shape depends on tensor data "
                       f"(from {origin}): a kernel planned on this call's shapes would be wrong "
                       f"on the next; it runs eagerly")
    unknown = _unknown_meta_root(node)
    if unknown is not None:
        return Barrier("no_meta", f"its metadata is unknown before the program runs: it depends "
                       f"on {unknown.name} ({op_label(unknown)}), which has no register_fake; it "
                       f"runs eagerly (a compiled program learns the metadata on its first call; "
                       f"register a fake to fuse it)")
    return _unsupported(node, prim, backends)


def _unknown_meta_root(node) -> Optional[Any]:
    """The call node without metadata that ``node``'s missing metadata comes from, if any."""
    if "tensor_meta" in node.meta:
        return None
    seen, stack = set(), [node]
    while stack:
        current = stack.pop()
        missing = [i for i in current.all_input_nodes
                   if "tensor_meta" not in i.meta and "val" not in i.meta and i not in seen]
        if not missing:
            return current if current is not node and current.op != "placeholder" else None
        seen.update(missing)
        stack.extend(missing)
    return None


def aliasing_nodes(graph) -> Dict[Any, str]:
    """Nodes whose eager result is an alias that a copy would betray, with the reason.

    A view / no-op cast whose memory is written in place (through any alias),
    or that is returned to the caller while sharing memory with an input or a
    parameter (the caller may write into it).
    """
    from ..ir.aliases import alias_groups, is_aliasing_node, mutated_alias_nodes

    written = mutated_alias_nodes(graph)
    groups = alias_groups(graph.nodes)
    leaves = {groups[n] for n in graph.nodes if n.op in ("placeholder", "get_attr")}
    returned: set = set()
    for out in graph.find_nodes(op="output"):
        returned.update(out.all_input_nodes)
    found: Dict[Any, str] = {}
    for node in graph.nodes:
        if not is_aliasing_node(node):
            continue
        if node in written:
            found[node] = "that memory is written in place"
        elif node in returned and groups.get(node) in leaves:
            found[node] = "it is returned to the caller sharing memory with an input"
    return found


def _unsupported(node, prim, backends: Sequence) -> Optional[Barrier]:
    if not backends:
        return None
    declined: Dict[str, str] = {}
    for backend in backends:
        reason = backend.supports(node)
        if reason is None:
            # partition asks the same backends the same question: it reads this instead.
            node.meta["claim"] = (tuple(backends), backend.name, declined)
            return None
        declined[backend.name] = str(reason)
    node.meta["declined"] = declined
    reasons = "; ".join(f"{name}: {why}" for name, why in declined.items())
    return Barrier("unsupported", f"no backend supports {prim.name} here ({reasons}); "
                   f"it runs eagerly")


def barriers(gm, backends: Sequence = ()) -> Any:
    """Set ``node.meta["barrier"]`` on every node that may not join a region.

    Run after ``normalize`` (it reads ``meta["prim"]``) and ``shape_prop``
    (backends' ``supports`` read ``meta["tensor_meta"]``). Returns ``gm``.
    """
    from ..backends.registry import resolve_backends

    resolved = tuple(resolve_backends(backends))  # a tuple: meta["claim"] shares it
    from .data_shapes import data_shape_readers
    must_alias = aliasing_nodes(gm.graph)
    data_shaped = data_shape_readers(gm.graph)
    for node in gm.graph.nodes:
        node.meta.pop("declined", None)
        node.meta.pop("claim", None)
        barrier = barrier_of(node, resolved, must_alias, data_shaped)
        if barrier is None:
            node.meta.pop("barrier", None)
        else:
            node.meta["barrier"] = barrier
    return gm
