"""``channels_last``: a conv net's convolutions, and the work between them, in NHWC.

cuDNN's fast convolutions are NHWC: fed NCHW tensors, torch converts every input and
weight there and every output back (on the H200, 69 conversion kernels and 1.07 ms of
ResNet-50's 5.4 ms). Inductor runs the whole net channels_last; so does this pass:

* the region: every 4-d convolution, pooling and batch norm (prims with the
  ``channels_last`` trait) and every pointwise node of the same shape reachable from a
  convolution runs on channels_last values (``TensorMeta.stride`` says so, and the Triton
  backend writes its outputs with those strides);
* a value enters it once (``to_channels_last``: the graph input, a copy); a conv weight
  read from the program's state enters through a ``ChannelsLastWeight`` node: a cached
  copy (:mod:`..cached_weight`), refreshed whenever the parameter is another tensor, has a
  new version (any in-place write through the tensor: optimizer steps, ``load_state_dict``)
  or new storage;
* every other reader -- views, matmuls, custom ops, the graph's outputs -- reads it laid
  out as eager did (``leave_channels_last``: one copy per value that is read outside), so
  escaping values keep eager's strides and views alias as in eager. Global pooling (a
  reduction over H and W) reads it in place: its result is the same in both layouts.

Decision (``mode`` None, the default): on when a torch program runs a 4-d convolution on
CUDA in float16 / bfloat16 / float32 and mutates nothing in place; ``True`` forces it (any
device: the CPU's convolutions have channels_last paths too), ``False`` turns it off
(``options={"channels_last": ...}``). The decision and its reason are kept in the output
node's ``meta["layout"]`` (``explain()`` prints it).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Tuple

from ..ir.effects import mutated_nodes
from ..ir.meta import TensorMeta, tensor_meta_of
from ..cached_weight import CachedWeight, same_kind
from .eager_layout import to_eager_layout

log = logging.getLogger(__name__)

__all__ = ["channels_last", "to_channels_last", "leave_channels_last", "ChannelsLastWeight",
           "channels_last_strides", "layout_note"]

#: 16-bit and float32 convolutions have NHWC kernels in cuDNN (Inductor's layout rule).
CONV_DTYPES = ("float16", "bfloat16", "float32")


def channels_last_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """NHWC strides of an (N, C, H, W) ``shape`` (torch's ``channels_last``)."""
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def to_channels_last(value: Any) -> Any:
    """``value`` itself when laid out channels_last, else a channels_last copy of it."""
    return to_eager_layout(value, channels_last_strides(tuple(value.shape)))


to_channels_last.eager_reason = "layout conversion into channels_last (channels_last pass)"


def leave_channels_last(value: Any, stride: Tuple[int, ...]) -> Any:
    """A channels_last value laid out as eager laid it out (``stride``), for its readers
    outside the channels_last region."""
    return to_eager_layout(value, stride)


leave_channels_last.eager_reason = ("layout conversion back to eager's strides for readers "
                                    "outside the channels_last region (channels_last pass)")


class ChannelsLastWeight(CachedWeight):
    """A conv weight's channels_last copy (:mod:`..cached_weight`: made once, refreshed when
    the parameter changes, in the same buffer)."""

    eager_reason = ("conv weight in channels_last: a cached copy, refreshed when the parameter "
                    "changes (channels_last pass)")

    def convert(self, weight: Any) -> Any:
        return to_channels_last(weight)

    def as_is(self, weight: Any) -> bool:  # already NHWC in memory (1x1 kernels)
        stride = channels_last_strides(tuple(weight.shape))
        return all(a == b or n == 1 for n, a, b in zip(weight.shape, weight.stride(), stride))

    def refill(self, buffer: Any, weight: Any) -> bool:
        if buffer.shape != weight.shape or not same_kind(buffer, weight):
            return False
        buffer.copy_(weight)
        return True


def layout_note(module: Any) -> Optional[str]:
    """The decision recorded in a (lowered) program's output node, or None."""
    graph = getattr(module, "graph", None)
    for node in reversed(list(getattr(graph, "nodes", ()))):
        if node.op == "output":
            return node.meta.get("layout")
    return None


def _nhwc_worthy(meta: Optional[TensorMeta]) -> bool:
    """A 4-d value whose channels_last layout differs from the row-major one."""
    return meta is not None and meta.ndim == 4 and meta.shape[1] > 1 and \
        meta.shape[2] * meta.shape[3] > 1


def _is_conv(node: Any) -> bool:
    prim = node.meta.get("prim")
    if prim is None or prim.name != "conv2d" or node.op != "call_function":
        return False
    args = node.meta.get("prim_args", {})
    a, w = args.get("a"), args.get("weight")
    return all(hasattr(v, "meta") and tensor_meta_of(v) is not None and tensor_meta_of(v).ndim == 4 for v in (a, w))


def decide(graph: Any, mode: Optional[bool]) -> Tuple[bool, str]:
    """``(on, why)`` for ``graph`` (see the module docstring)."""
    from .normalize import graph_framework

    convs = [n for n in graph.nodes if _is_conv(n)]
    if not convs:
        return False, "off: no 4-d convolution"
    if mode is False:
        return False, "off (options={'channels_last': False})"
    if graph_framework(graph) != "torch":
        return False, "off: channels_last is a torch memory format"
    writer = next((n for n in graph.nodes if mutated_nodes(n)), None)
    if writer is not None:
        return False, (f"off: {writer.name} writes a tensor in place (a converted copy would "
                       f"not see the write)")
    if mode is True:
        return True, f"channels_last (forced): {len(convs)} convolution(s)"
    metas = [tensor_meta_of(n) for n in convs]
    off = next((m for m in metas if m.device_type != "cuda" or m.dtype not in CONV_DTYPES), None)
    if off is not None:
        return False, (f"off: a convolution runs on {off.device} in {off.dtype} (on by default "
                       f"for CUDA convolutions in {' / '.join(CONV_DTYPES)})")
    return True, (f"channels_last: {len(convs)} convolution(s) on CUDA run NHWC (cuDNN's "
                  f"native layout), with the pointwise, pooling and batch norm work between them")


def _reads_in_place(user: Any, value: Any, members: set) -> bool:
    """Whether ``user`` may read the channels_last ``value`` as it is."""
    prim = user.meta.get("prim")
    if prim is None or user.op not in ("call_function", "call_method"):
        return False
    args = user.meta.get("prim_args", {})
    if "channels_last" in prim.traits:
        return args.get("a") is value and (prim.name != "conv2d" or _is_conv(user))
    if prim.kind == "pointwise":
        return user in members
    if prim.kind == "reduction":  # global pooling: the result has size-1 H and W either way
        try:
            dims = set(prim.reduced_dims(4, args))
        except (ValueError, TypeError):
            return False
        return args.get("a") is value and {2, 3} <= dims and 1 not in dims and 0 not in dims
    return False


def _members(graph: Any) -> set:
    """The values computed in channels_last: conv outputs and what follows them."""
    members: set = set()
    for node in graph.nodes:
        meta = tensor_meta_of(node)
        if not _nhwc_worthy(meta) or node.op not in ("call_function", "call_method"):
            continue
        prim = node.meta.get("prim")
        if prim is None:
            continue
        args = node.meta.get("prim_args", {})
        if _is_conv(node):
            members.add(node)
        elif "channels_last" in prim.traits:
            if args.get("a") in members:
                members.add(node)
        elif prim.kind == "pointwise":
            if any(v in members and tensor_meta_of(v).shape == meta.shape for v in args.values()
                   if hasattr(v, "meta")):
                members.add(node)
    return members


def channels_last(gm: Any, mode: Optional[bool] = None) -> Any:
    """Run the convolutions of ``gm`` and the work between them channels_last (module
    docstring); records the decision in the output node's ``meta["layout"]``."""
    graph = getattr(gm, "graph", gm)
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    on, why = decide(graph, mode)
    if why != "off: no 4-d convolution":
        output.meta["layout"] = why
    if not on:
        log.debug("channels_last: %s", why)
        return gm
    members = _members(graph)
    eager_meta = {node: tensor_meta_of(node) for node in members}
    for node in members:
        node.meta["tensor_meta"] = eager_meta[node].with_(
            stride=channels_last_strides(eager_meta[node].shape))
    entered: Dict[Any, Any] = {}
    left: Dict[Any, Any] = {}
    for node in list(graph.nodes):
        if _is_conv(node) and node in members:
            _enter(graph, node, entered)
        for value in [v for v in node.all_input_nodes if v in members]:
            if not _reads_in_place(node, value, members):
                if value not in left:
                    left[value] = _leave(graph, value, eager_meta[value])
                node.replace_input_with(value, left[value])
    from .normalize import normalize
    normalize(gm)  # readers' prim_args still name the values they read before
    log.debug("channels_last: %d values in NHWC, %d conversions in, %d out",
              len(members), len(entered), len(left))
    return gm


def _enter(graph: Any, conv: Any, entered: Dict[Any, Any]) -> None:
    """The conv's input and weight in channels_last (each converted once)."""
    args = conv.meta["prim_args"]
    for key in ("a", "weight"):
        value = args[key]
        if key == "a" and tensor_meta_of(value).stride == channels_last_strides(tensor_meta_of(value).shape):
            continue
        if value not in entered:
            state = key == "weight" and value.op in ("get_attr", "placeholder")
            if key == "weight" and not state:
                continue  # a weight computed in the program: cuDNN converts it
            with graph.inserting_after(value):
                target = ChannelsLastWeight() if state else to_channels_last
                new = graph.call_function(target, (value,), name=f"{value.name}_nhwc")
            meta = tensor_meta_of(value)
            new.meta["tensor_meta"] = meta.with_(stride=channels_last_strides(meta.shape))
            new.meta["stack"] = value.meta.get("stack")
            entered[value] = new
        conv.replace_input_with(value, entered[value])


def _leave(graph: Any, value: Any, meta: TensorMeta) -> Any:
    with graph.inserting_after(value):
        new = graph.call_function(leave_channels_last, (value, tuple(meta.stride)),
                                  name=f"{value.name}_nchw")
    new.meta["tensor_meta"] = meta
    new.meta["stack"] = value.meta.get("stack")
    return new
