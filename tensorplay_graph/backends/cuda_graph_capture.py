"""What a CUDA-graph capture needs from its inputs, and what a failed one tells.

* :func:`private_copy` / :func:`copy_into`: the runner's private copies of inputs that change
  storage between calls keep the caller's sizes, strides and storage offset, so the captured
  program launches the kernel specializations its warm-up compiled (no compile, module load
  or allocation outside the graph's pool inside the capture).
* :func:`capture_failure`: when a capture raises, the node (and kernels) whose call failed
  first, that call's error and the error that ended the capture -- ``explain()`` and the
  WARNING show them (a failed capture otherwise reports only "operation failed due to a
  previous error during capture").
"""

from __future__ import annotations

import re
import weakref
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["private_copy", "copy_into", "capture_failure", "where", "stayed", "ConstantAddresses"]


def _extent(tensor: Any) -> int:
    """Elements of storage ``tensor`` spans from its storage offset."""
    if tensor.numel() == 0:
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(tensor.shape, tensor.stride()))


def _overlaps(tensor: Any) -> bool:
    return any(st == 0 and n > 1 for n, st in zip(tensor.shape, tensor.stride()))


def private_copy(value: Any) -> Any:
    """A copy of ``value`` with its sizes, strides and storage offset (so its 16-byte
    alignment): the captured program then launches exactly the kernel specializations the
    warm-up call compiled. ``clone()`` would make a strided view (a saved activation that is
    a transposed slice) contiguous: new specializations, compiled inside the capture."""
    offset, extent = value.storage_offset(), _extent(value)
    base = value.detach().new_empty((offset + extent,))
    buffer = base.as_strided(tuple(value.shape), tuple(value.stride()), offset)
    copy_into(buffer, value)
    return buffer


def copy_into(buffer: Any, value: Any) -> None:
    """``buffer.copy_(value)``; an overlapping view (an expanded dim) copies the storage it
    spans instead (a copy into overlapping memory is refused)."""
    if _overlaps(buffer):
        region = (_extent(value),)
        buffer.as_strided(region, (1,), buffer.storage_offset()).copy_(
            value.detach().as_strided(region, (1,), value.storage_offset()))
    else:
        buffer.copy_(value.detach())


def where(tensor: Any) -> Tuple[int, Any]:
    """Where ``tensor``'s data lives: its address and (weakly) its storage object."""
    return tensor.data_ptr(), weakref.ref(tensor.untyped_storage())


def stayed(tensor: Any, place: Optional[Tuple[int, Any]]) -> bool:
    """Whether ``tensor`` reads the same storage, at the same address, as at ``place``
    (:func:`where`): a new tensor the allocator put where a freed one was has moved."""
    return place is not None and place[0] == tensor.data_ptr() and \
        place[1]() is tensor.untyped_storage()


class ConstantAddresses:
    """Where the program's constants (parameters, buffers) were when the graph was captured:
    a graph reads them at those addresses. ``p.data = other`` keeps the parameter object (the
    program's guards still hold) but moves its memory, and a replay would read the old one."""

    __slots__ = ("tensors", "pointers")

    def __init__(self, module: Any) -> None:
        from ..autograd_regions import graph_constants
        self.tensors = tuple(graph_constants(module)) if hasattr(module, "graph") else ()
        self.pointers = self._now()

    def _now(self) -> tuple:
        return tuple(t.data_ptr() for t in self.tensors)

    def moved(self) -> bool:
        return bool(self.tensors) and self._now() != self.pointers


_NODE_NOTE = re.compile(r"while running node (\S+)")


def capture_failure(exc: BaseException, module: Any) -> Dict[str, Any]:
    """What a failed capture was doing: the node (and its kernels) whose call raised first,
    that call's error (a CUDA error raised inside the capture), and the error that ended the
    capture (``capture_end``'s "operation failed due to a previous error during capture",
    which Python chains to the first one as its ``__context__``)."""
    chain: List[BaseException] = []
    current: Optional[BaseException] = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    node_name = None
    for err in reversed(chain):  # the innermost (first raised) error first
        node = getattr(err, "node", None)  # the Interpreter's NodeExecutionError
        node_name = getattr(node, "name", None)
        for note in getattr(err, "__notes__", ()):  # generated code's annotation
            found = _NODE_NOTE.search(str(note))
            node_name = node_name or (found.group(1) if found else None)
        if node_name:
            break
    root = getattr(chain[-1], "original", None) or chain[-1]
    kernels, target = _kernels_of(module, node_name)
    where = "no node raised (the program ran through; the capture ended with an error)"
    if node_name is not None:
        where = f"node {node_name}" + (f" (kernel {', '.join(kernels)})" if kernels else
                                       f" (eager {target})" if target else "")
    text = f"at {where}: {_first_line(root)}"
    if root is not exc:
        text += f"; then: {_first_line(exc)}"
    if "previous error during capture" in str(root):
        text += ("; the call that broke the capture did not raise (an unchecked CUDA call, or "
                 "another thread's call under capture_error_mode='global')")
    return {"text": text, "node": node_name, "kernels": kernels, "error": _first_line(root),
            "final": _first_line(exc)}


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def _kernels_of(module: Any, node_name: Optional[str]) -> Tuple[List[str], str]:
    """(the node's kernel and the generated kernels it launches, or [] ; its target's name)."""
    from ..ir.node import target_name
    graph = getattr(module, "graph", None)
    for node in getattr(graph, "nodes", ()):
        if node.name == node_name:
            target = node.target
            launch = getattr(target, "launch", None)
            if not isinstance(launch, dict):
                return [], target_name(target)
            names = [str(getattr(target, "name", target))]
            return names + [str(n) for n in launch.get("kernels", ())], target_name(target)
    return [], ""
