"""Our custom ops as ``torch.library`` ops, so AOTAutograd keeps them opaque.

Dynamo records a ``CustomOpDef`` call as one node (``allow_in_graph``), but
AOTAutograd then *traces through* it: the kernel body and its
``register_autograd`` Function dissolve into aten ops. To keep an op with a
registered backward as ONE node in the forward graph, the Dynamo graph's
``CustomOpDef`` targets are replaced by a ``torch.library.custom_op`` twin
(namespace ``tpg_bridge``, name ``<ns>__<name>``) whose implementation runs our
resolved kernel, whose fake kernel is ours, and whose autograd formula is our
``register_autograd`` pair. The imported AOT graphs map the twin back to our op
(:func:`restore_ops`), so barriers and ``explain()`` name the user's op.

An op is bridged only when its signature maps onto a torch schema; otherwise
AOTAutograd traces it (its Function's backward is then inlined: still the
registered formula, gradients unchanged, only not opaque).
"""

from __future__ import annotations

import inspect
import logging
import threading
import typing
from typing import Any, Dict, List, Optional

logger = logging.getLogger("tensorplay_graph.compile")

NAMESPACE = "tpg_bridge"
_LOCK = threading.Lock()
_TWINS: Dict[int, Any] = {}          # id(CustomOpDef) -> torch OpOverload (or None: refused)
_ORIGINALS: Dict[Any, Any] = {}      # torch OpOverload -> CustomOpDef


def _torch_annotation(atom: str) -> Optional[Any]:
    """The torch-typed annotation for one of our schema atoms (``Tensor?``, ``SymInt``...)."""
    import torch
    simple = {"Tensor": torch.Tensor, "Tensor?": Optional[torch.Tensor],
              "Tensor[]": List[torch.Tensor], "SymInt": int, "int": int, "float": float,
              "bool": bool, "SymInt[]": List[int], "int[]": List[int], "float[]": List[float],
              "SymInt?": Optional[int], "int?": Optional[int], "float?": Optional[float],
              "bool?": Optional[bool], "str": str, "ScalarType": torch.dtype}
    if atom in simple:
        return simple[atom]
    if atom.startswith("(") and atom.endswith(")"):
        parts = [_torch_annotation(p.strip()) for p in atom[1:-1].split(",")]
        return None if any(p is None for p in parts) else typing.Tuple[tuple(parts)]
    return None


def _prototype(op: Any) -> Optional[Any]:
    """A function with ``op``'s parameters, annotated with torch types, or None."""
    from ..library.schema import _type_hints, annotation_to_schema
    fn = op.signature_fn
    if fn is None:
        return None
    try:
        hints = _type_hints(fn)
        params = []
        annotations: Dict[str, Any] = {}
        for name, p in inspect.signature(fn).parameters.items():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                return None
            ann = _torch_annotation(annotation_to_schema(hints.get(name)))
            if ann is None:
                return None
            annotations[name] = ann
            params.append(p.replace(annotation=ann, kind=p.POSITIONAL_OR_KEYWORD))
        ret = _torch_annotation(annotation_to_schema(hints.get("return")))
    except Exception:  # noqa: BLE001 - an annotation we cannot read: trace the op instead
        return None
    if ret is None:
        return None

    def proto(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("prototype only")
    proto.__signature__ = inspect.Signature(params, return_annotation=ret)
    proto.__annotations__ = dict(annotations, **{"return": ret})
    return proto


def twin_of(op: Any) -> Optional[Any]:
    """The ``torch.ops.tpg_bridge.<ns>__<name>.default`` twin of ``op`` (built once), or None."""
    key = id(op)
    if key in _TWINS:
        return _TWINS[key]
    with _LOCK:
        if key not in _TWINS:
            _TWINS[key] = _build_twin(op)
    return _TWINS[key]


def _build_twin(op: Any) -> Optional[Any]:
    import torch
    if not op.has_autograd or not op.has_fake:
        return None
    proto = _prototype(op)
    if proto is None:
        logger.info("%s: signature has no torch schema; AOTAutograd traces it", op.name)
        return None
    schema = torch.library.infer_schema(proto, mutates_args=tuple(op.mutates_args))
    qualname = f"{NAMESPACE}::{op.namespace}__{op.opname}"

    def impl(*args: Any, **kwargs: Any) -> Any:
        from ..library import dispatch as _dispatch
        tensor = _dispatch.first_tensor(args)
        if tensor is None:
            tensor = _dispatch.first_tensor(kwargs.values())
        return op._resolve(_dispatch.device_key(tensor))(*args, **kwargs)

    twin = torch.library.custom_op(qualname, impl, mutates_args=tuple(op.mutates_args),
                                   schema=schema)
    twin.register_fake(op._fake_fn)
    n_inputs = len(inspect.signature(proto).parameters)

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        if op._setup_context is not None:
            op._setup_context(ctx, tuple(inputs), output)

    def backward(ctx: Any, *grads: Any) -> Any:
        from ..library.autograd import _normalize_grads
        return _normalize_grads(op.name, op._backward(ctx, *grads), n_inputs)[1:]

    twin.register_autograd(backward, setup_context=setup_context)
    overload = twin._opoverload
    _ORIGINALS[overload] = op
    return overload


def bridge_custom_ops(fx_gm: Any) -> List[str]:
    """Retarget ``CustomOpDef`` nodes of a Dynamo graph to their twins; names of bridged ops."""
    from ..passes.barriers import custom_op_of
    bridged = []
    for node in fx_gm.graph.nodes:
        if node.op != "call_function" or custom_op_of(node.target) is None:
            continue
        twin = twin_of(node.target) if hasattr(node.target, "has_autograd") else None
        if twin is not None:
            bridged.append(node.target.name)
            node.target = twin
    if bridged:
        fx_gm.recompile()
    return bridged


def restore_ops(gm: Any) -> None:
    """In an imported graph, call our ops again where their twins stand."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _ORIGINALS:
            node.target = _ORIGINALS[node.target]
    gm.recompile()


def non_differentiable_ops(fx_gm: Any) -> List[str]:
    """Why AOTAutograd may not trace ``fx_gm``: custom ops without ``register_autograd``
    whose kernels launch Triton / TileLang (they never differentiate implicitly)."""
    from ..passes.barriers import custom_op_of
    found = []
    for node in fx_gm.graph.nodes:
        op = custom_op_of(node.target) if node.op == "call_function" else None
        if op is None or getattr(op, "has_autograd", True):
            continue
        if op.is_triton_op or op.is_tile_lang_op:
            kind = "triton_op" if op.is_triton_op else "tile_lang_op"
            found.append(f"{op.name} is a {kind} without register_autograd: its kernel does not "
                         f"differentiate; register a backward to train through it compiled")
    return found


def restore_dynamo_graph(fx_gm: Any) -> None:
    """Undo :func:`bridge_custom_ops` (the graph then runs through eager autograd)."""
    changed = False
    for node in fx_gm.graph.nodes:
        if node.op == "call_function" and node.target in _ORIGINALS:
            node.target = _ORIGINALS[node.target]
            changed = True
    if changed:
        fx_gm.recompile()
