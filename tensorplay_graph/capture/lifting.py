"""Which real tensors a trace reads through ``get_attr`` nodes, and whether a read is stale.

A tensor the program makes (``arange``, a mask) and passes to a traced op becomes a graph
constant ``_const<N>``. The program runs on the tensor itself and may write it in untraced
code (``v = arange(8); y = x @ v; v[0] = -3``, round-5 seed 70003392), and the graph must
read what that use read: the constant is copied when lifted, and a tensor written since (its
``_version`` moved) is lifted again. When the trace ends, a constant whose tensor was not
written holds the tensor itself again (as before: no copy kept). Parameters, buffers and
globals read by qualname are registered here too, so one tensor is one node (tied weights
share it).
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ..frameworks import private_copy


class Lifted:
    """``id(tensor) -> proxy`` for one trace, with the version each constant was copied at."""

    def __init__(self) -> None:
        self._proxies: Dict[int, Any] = {}
        #: id -> (the tensor, kept alive so its id stays unique; its ``_version`` when copied)
        self._sources: Dict[int, Tuple[Any, Any]] = {}
        self.made_inside: Set[str] = set()  # targets of the ``_const<N>`` nodes
        self._constants: List[Tuple[str, Any, Any]] = []  # (target, tensor, its version)

    def find(self, value: Any) -> Optional[Any]:
        """The proxy ``value`` was lifted to, if any and not written since."""
        source = self._sources.get(id(value))
        if source is not None and source[1] is not None and _version(value) != source[1]:
            return None
        return self._proxies.get(id(value))

    def register(self, value: Any, proxy: Any) -> None:
        """``value`` is read through ``proxy`` (a ``get_attr`` of it or of its copy)."""
        self._proxies[id(value)] = proxy

    def constant(self, value: Any, get_attr: Callable[[str, Any], Any]) -> Any:
        """A new ``_const<N>`` proxy (``get_attr(name, value)``) holding a private copy of
        ``value`` now. Nothing can be written into an empty tensor (and TensorPlay's undefined
        ``Tensor()``, the absent bias of ``conv_transpose1d``, dies on ``clone()`` and on
        ``_version``): it is read as it is."""
        empty = value.numel() == 0
        version = None if empty else _version(value)
        proxy = get_attr(f"_const{len(self._constants)}", value if empty else private_copy(value))
        self._sources[id(value)] = (value, version)
        self._proxies[id(value)] = proxy
        self.made_inside.add(proxy.node.target)
        proxy.node.meta["made_by_program"] = True  # not the caller's: passes may read its value
        self._constants.append((proxy.node.target, value, version))
        return proxy

    def keep_unwritten(self, attrs: Dict[str, Any]) -> None:
        """At the end of the trace: each constant whose tensor was not written since it was
        lifted reads the tensor itself, not the copy."""
        for target, value, version in self._constants:
            if target in attrs and version is not None and _version(value) == version:
                attrs[target] = value


def _version(value: Any) -> Any:
    """A tensor's in-place write counter (torch's and TensorPlay's ``_version``), or None."""
    return getattr(value, "_version", None)


def erase_unused_attrs(graph: Any, attrs: Dict[str, Any]) -> None:
    """Drop unread parameters, and items that torch's index parsing probed but never used."""
    for node in reversed(list(graph.nodes)):
        if node.users:
            continue
        if node.op == "get_attr":
            attrs.pop(node.target, None)
            graph.erase_node(node)
        elif node.op == "call_function" and node.target is operator.getitem:
            graph.erase_node(node)
