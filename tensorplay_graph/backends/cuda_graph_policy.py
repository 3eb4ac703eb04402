"""When a lowered program may replay through one CUDA graph: the safety rules behind :func:`decide`.

Safe means static shapes, every tensor (inputs and constants) a torch CUDA tensor, no node that
reads data back to the host or makes CPU tensors, no write into a graph input, and -- unless
graphs are forced on -- no random op and no custom op running arbitrary host code.
:mod:`.cuda_graphs` runs the program once this says yes.
"""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..frameworks import is_parameter

ON = "on: static shapes, every tensor on CUDA, no host syncs or host-side ops"
#: A replay saves the CPU cost of the launches it replaces -- about 5 us each (a one-kernel
#: program costs 11.8 us per call through the Triton launcher on the H200, RESULTS.md) --
#: and adds a copy of each input that moves between calls; at ~4 TB/s (read + write) 8 MiB
#: takes about 4 us. Past this many copied bytes per launch a replay costs more than it saves
#: (a column sum of a fresh 268 MB tensor each call: 0.20 ms replayed, 0.078 ms launched).
COPY_BYTES_PER_LAUNCH = 8 << 20


def launches(fn: Any) -> int:
    """About how many launches a run of lowered program ``fn`` makes (its calls)."""
    graph = getattr(fn, "graph", None)
    return sum(1 for n in getattr(graph, "nodes", ())
               if getattr(n, "op", None) in ("call_function", "call_method", "call_module")
               and n.target is not operator.getitem)
#: Tensor methods that read device data on the host or make CPU tensors.
HOST_METHODS = frozenset({"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__",
                          "__index__", "nonzero", "pin_memory"})
#: Functions (torch.* / aten overloads, by name) whose CUDA implementation reads a result back
#: to the host to size their output (torch 2.11: ``nonzero`` and the ops built on it,
#: ``unique``'s output count, ``_local_scalar_dense`` = ``item()``): a sync inside a capture.
HOST_FUNCTIONS = frozenset({"nonzero", "argwhere", "masked_select", "unique", "_unique",
                            "_unique2", "unique_dim", "unique_consecutive",
                            "_local_scalar_dense", "item", "tolist", "bincount"})


def is_cuda_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and getattr(value, "is_cuda", False)


def _on(value: Any, device: str) -> bool:
    if device == "cuda":
        return is_cuda_tensor(value)
    return type(value).__module__.startswith("torch") and \
        getattr(getattr(value, "device", None), "type", None) == device


def _describe_tensor(value: Any) -> str:
    framework = type(value).__module__.split(".")[0]
    return f"a {framework} tensor on {getattr(value, 'device', '?')}"


def _custom_op_name(target: Any) -> Optional[str]:
    """The name of a custom op target (ours, TensorPlay's, torch.library's), else None."""
    if getattr(target, "mutates_args", None) is not None and hasattr(target, "name"):
        return str(target.name)
    schema = getattr(target, "_schema", None)
    namespace = getattr(target, "namespace", None)
    if schema is not None and namespace not in (None, "aten", "prims", "_c10d_functional"):
        return str(getattr(schema, "name", target))
    return None


def _function_name(target: Any) -> str:
    """``nonzero`` for ``torch.nonzero`` and ``aten.nonzero.default``; a callable's name."""
    packet = getattr(target, "_overloadpacket", None)
    name = getattr(packet if packet is not None else target, "__name__", "")
    return str(name).split(".")[0]


def _runs_framework_autograd(target: Any) -> bool:
    """An opaque training node (``training.opaque``): it records or replays the framework's
    own autograd, whose re-entrant backward runs each op on the stream its forward used."""
    from ..training.opaque import OpaqueForward, tape_backward
    return target is tape_backward or isinstance(target, OpaqueForward)


def writes_into_state(graph: Any) -> Dict[Any, List[Any]]:
    """``node -> the inputs and constants (placeholder / get_attr nodes) its in-place write
    lands in``, directly or through any view of them (``x[1:].zero_()`` writes into ``x``):
    only nodes that write into one."""
    from ..ir.aliases import alias_groups
    from ..ir.effects import mutated_nodes
    nodes = [n for n in getattr(graph, "nodes", ())]
    groups = alias_groups(nodes)
    state: Dict[Any, List[Any]] = {}
    for node in nodes:
        if node.op in ("placeholder", "get_attr"):
            state.setdefault(groups[node], []).append(node)
    found = {}
    for node in nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        hit = [m for w in mutated_nodes(node) if w in groups for m in state.get(groups[w], ())]
        if hit:
            found[node] = list(dict.fromkeys(hit))
    return found


def _node_reason(node: Any, forced: bool, device: str,
                 writes: Optional[Dict[Any, List[Any]]] = None) -> Optional[str]:
    """Why ``node`` must not run inside a CUDA graph, or None (``writes``:
    :func:`writes_into_state` of its graph)."""
    from ..ir.effects import prim_effect
    if node.op == "get_attr":
        return None
    for written in (writes or {}).get(node, ()):
        if written.op == "placeholder":
            return (f"{node.name} writes into the input {written.name} in place (a replay may "
                    f"read a private copy of it, so the caller's tensor would not change)")
    prim = node.meta.get("prim")
    if prim is not None and getattr(prim, "data_dependent", False):
        return f"{node.name} ({prim.name}) reads tensor data on the host"
    if node.op == "call_method" and node.target in HOST_METHODS:
        return f"{node.name} (Tensor.{node.target}) synchronizes with the host"
    if node.op == "call_function":
        name = _function_name(node.target)
        if name in HOST_FUNCTIONS:
            return f"{node.name} ({name}) reads a result back to the host to size its output"
        if _runs_framework_autograd(node.target):
            return (f"{node.name} ({name}) runs the framework's autograd for an opaque op: its "
                    f"backward ops run on the stream the forward used, outside a capture")
    if _indexes_with_a_list(node):
        return (f"{node.name} indexes with a Python list, which torch copies from the host "
                f"on every call (make the index a CUDA tensor)")
    from ..passes.data_shapes import shape_from_data
    if shape_from_data(node):  # x[mask]: torch sizes it with a nonzero, on the host
        return f"{node.name}'s shape depends on tensor data (the host sizes it)"
    metas = node.meta.get("tensor_meta")
    for meta in metas if isinstance(metas, (tuple, list)) else [metas]:
        where = getattr(meta, "device_type", device)
        if meta is not None and where != device:
            return f"{node.name} makes a tensor on {where}"
    if forced or "kernel" in node.meta:
        return None
    if prim_effect(node) == "random":
        return (f"{node.name} draws random numbers (a replay would not follow eager's random "
                f"stream call by call)")
    name = _custom_op_name(node.target) if node.op == "call_function" else None
    if name is not None:
        return f"custom op {name} ({node.name}) may run host code or synchronize"
    return None


def _indexes_with_a_list(node: Any) -> bool:
    """``x[[0, 2]]`` / ``x[:, [1, 1]] = v``: an index list becomes a CPU tensor copied to the
    device, which a capture refuses (an unpinned host copy)."""
    if node.op != "call_function" or node.target not in (operator.getitem, operator.setitem) \
            or len(node.args) < 2 or not _is_tensor_node(node.args[0]):
        return False
    index = node.args[1]
    return isinstance(index, list) or \
        isinstance(index, tuple) and any(isinstance(i, list) for i in index)


def _is_tensor_node(value: Any) -> bool:
    return getattr(value, "meta", {}).get("tensor_meta") is not None


def decide(module: Any, example_inputs: Sequence[Any], option: Optional[bool] = None,
           dynamic: bool = False, device: str = "cuda") -> Tuple[bool, str]:
    """``(use graphs, why)`` for ``module`` (a lowered GraphModule) called on ``example_inputs``.

    ``device`` is where graphs run (``"cuda"``; tests plan for ``"cpu"`` with a stand-in)."""
    if option is False:
        return False, "off (options={'cuda_graphs': False})"
    forced = option is True
    tensors = [(i, v) for i, v in enumerate(example_inputs)
               if hasattr(v, "data_ptr") or hasattr(v, "__dlpack__")]
    if not tensors:
        return False, "off: the program takes no tensor inputs"
    for i, value in tensors:
        if not _on(value, device):
            return False, (f"off: input {i} is {_describe_tensor(value)}; CUDA graphs need every "
                           f"tensor on a CUDA device")
    if len({str(v.device) for _, v in tensors}) > 1:
        return False, "off: the inputs are on several devices (one graph runs on one device)"
    if getattr(module, "graph", None) is None:
        return False, "off: the program is not a graph module"
    if dynamic and not forced:
        return False, ("off: sizes are dynamic (each size would keep its own graph and memory "
                       "pool; options={'cuda_graphs': True} uses them anyway)")
    from ..autograd_regions import graph_constants
    for constant in graph_constants(module):
        if not _on(constant, device):
            return False, f"off: a constant of the program is {_describe_tensor(constant)}"
    writes = writes_into_state(module.graph)
    for node in module.graph.nodes:
        reason = _node_reason(node, forced, device, writes)
        if reason is not None:
            return False, f"off: {reason}"
    return True, ON


def replay_writes_only_its_buffers(module: Any) -> bool:
    """Whether a replay of ``module`` changes nothing but the graph's own buffers: no write
    into an input or a constant (a buffer's running statistics), no random draw (the
    generator's offset moves) and no custom op (it may run host code). Only such a replay
    may be launched before the caller's state checks, and be dropped when one fails."""
    from ..ir.effects import prim_effect
    graph = getattr(module, "graph", None)
    if graph is None or any(getattr(n, "op", None) is None for n in graph.nodes):
        return False  # not an IR graph: nothing to go by
    if writes_into_state(graph):
        return False
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        if prim_effect(node) is not None:  # a random draw or another side effect
            return False
        if node.op == "call_function" and _custom_op_name(node.target) is not None:
            return False
    return True


def written_constants(module: Any) -> List[Any]:
    """The constants (buffers: batch norm's running statistics) ``module`` writes in place.
    A capture runs the program once more before recording it; their values from before that
    run are put back, so that each call applies the program's writes once, as eager does."""
    from ..autograd_regions import constant_at
    from ..ir.effects import prim_effect
    graph = getattr(module, "graph", None)
    targets, maybe = set(), set()
    for written in (writes_into_state(graph).values() if graph is not None else ()):
        targets.update(w.target for w in written if w.op == "get_attr")
    for node in getattr(graph, "nodes", ()):
        if getattr(node, "op", "get_attr") == "get_attr":
            continue
        if prim_effect(node) == "side_effect":  # batch_norm(training=True): its buffers
            maybe.update(a.target for a in node.all_input_nodes if a.op == "get_attr")
    found = [(target, constant_at(module, target)) for target in sorted(targets | maybe)]
    return [value for target, value in found if hasattr(value, "copy_")
            and (target in targets or not is_parameter(value))]
