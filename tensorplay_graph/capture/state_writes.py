"""Writes into the caller's state that reach no proxy: ``for p in model.parameters(): p.add_(1)``.

A trace reads parameters, buffers and global tensors through ``get_attr`` proxies, so a write
into them is recorded like any op. ``model.parameters()``, ``state_dict()`` and ``.data``
hand the program the real tensors instead: a write into one would run for real, once, at
capture, and never in the graph. The frameworks' hooks ask :meth:`StateWrites.holds` before
any in-place call that holds no proxy (torch: the trace's function mode; TensorPlay: its
in-place tensor methods, wrapped while a trace runs) and raise :func:`state_write_error`, a
graph break, before the write happens.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from ..frameworks import is_parameter, is_tensor
from .object_state import ObjectStateError


class StateWrites:
    """Which memory the trace's state tensors (its ``get_attr`` values) occupy."""

    def __init__(self) -> None:
        self._storages: Tuple[int, set] = (-1, set())  # (len(attrs) when built, data pointers)

    def holds(self, tensor: Any, attrs: Dict[str, Any]) -> bool:
        """Whether a real ``tensor`` is a parameter or shares memory with a value of
        ``attrs`` (asked before a write that reaches no proxy: rare)."""
        if is_parameter(tensor):
            return True
        storage = _storage_of(tensor)
        if storage is None:
            return False
        if self._storages[0] != len(attrs):  # attrs only grow during a trace
            self._storages = (len(attrs), {_storage_of(v) for v in attrs.values() if is_tensor(v)})
        return storage in self._storages[1]


def _storage_of(tensor: Any) -> Any:
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - a tensor without storage (TensorPlay's undefined one)
        return None


def state_write_error(what: str) -> ObjectStateError:
    """The graph break for an in-place write (``what``) into a parameter, buffer or global
    tensor the program reached without a traced read (``model.parameters()``): asked before
    the write, which would otherwise happen once, at capture, and never in the graph."""
    from .context import user_location
    return ObjectStateError(
        f"the program writes in place ({what} at {user_location()}) into a parameter, buffer "
        "or global tensor it reached without a traced read (model.parameters(), "
        "state_dict(), .data): the write would happen once, at capture, and never in the "
        "graph. tensorplay_graph.compile hands such programs to the framework's frontend (a "
        "graph break); to keep our capture, read the tensor as an attribute (self.weight) or "
        "write it outside the program")
