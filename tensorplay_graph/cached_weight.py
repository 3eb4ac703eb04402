"""Derived copies of a program's weights, made once and reused while the weight is unchanged.

A pass that gives a kernel a weight in another form inserts a node whose target is one of
these caches: NHWC for cuDNN
(:class:`~tensorplay_graph.passes.channels_last.ChannelsLastWeight`), zero rows up to an
aligned width for cuBLAS (:class:`~tensorplay_graph.backends.aligned_linear.PaddedRowsWeight`).
The copy is valid while the weight is the same tensor object with the same version counter and
data pointer. A changed weight is copied again into the same buffer, so CUDA graphs captured
with it stay valid (:meth:`CachedWeight.refresh_for_replay` does that before a replay: a
replay runs none of the program's Python). With grad enabled and a weight that requires grad
the conversion is a plain differentiable op, never cached. A weight written in place between
calls again and again (trained every step, with graphs off) gains nothing from the cache,
which would only hold a second copy of it: after :attr:`CachedWeight.MAX_CHANGES` such writes
the copy is made per call instead -- unless a CUDA graph already reads the cached buffer.

Limit: a write through ``weight.data`` bypasses the tensor's version counter (as it does for
autograd), so it is not seen by a weight cached before it; write through the parameter
(``with torch.no_grad(): w.copy_(new)``) or replace it.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional, Tuple

from .frameworks import adapter_for


class CachedWeight:
    """One weight's derived copy. Subclasses say how to make it (:meth:`convert`), how to
    rewrite it in place (:meth:`refill`) and when the weight itself serves (:meth:`as_is`)."""

    eager_reason = "a cached copy of a weight, refreshed when the parameter changes"
    #: in-place writes to the weight between calls after which the copy is made per call
    MAX_CHANGES = 2

    def __init__(self) -> None:
        self._source: Optional[Any] = None   # weakref to the weight the copy was made from
        self._key: Tuple[int, int] = (-1, -1)
        self._copy: Any = None
        self._grad_mode: Any = None
        self._changes = 0
        self._replayed = False  # a CUDA graph reads the buffer: it must stay
        self.per_call = False

    def convert(self, weight: Any) -> Any:
        """A new derived copy of ``weight`` (differentiable when ``weight`` needs grad)."""
        raise NotImplementedError

    def refill(self, buffer: Any, weight: Any) -> bool:
        """Write ``weight``'s derived form into ``buffer`` in place; False when it does not fit."""
        raise NotImplementedError

    def as_is(self, weight: Any) -> bool:
        """Whether ``weight`` itself already has the derived form."""
        return False

    def __call__(self, weight: Any) -> Any:
        if self.per_call:
            return self.convert(weight)
        source = self._source
        if source is not None and source() is weight:
            if (weight._version, weight.data_ptr()) == self._key:
                return self._copy
            self._changes += 1  # written in place since the last call
            if self._changes >= self.MAX_CHANGES and not self._replayed:
                self.per_call, self._copy, self._source = True, None, None
                return self.convert(weight)
        if weight.requires_grad:
            if self._grad_mode is None:
                self._grad_mode = adapter_for(weight).grad_mode_query()
            if self._grad_mode():
                return self.convert(weight)
        return self._refresh(weight)

    def _refresh(self, weight: Any) -> Any:
        copy = self._copy
        if self.as_is(weight):
            copy = weight
        elif copy is None or copy is self._last() or not self.refill(copy, weight.detach()):
            copy = self.convert(weight.detach())
        self._source = weakref.ref(weight)
        self._key = (weight._version, weight.data_ptr())
        self._copy = copy
        return copy

    def _last(self) -> Any:
        return None if self._source is None else self._source()

    def refresh_for_replay(self) -> bool:
        """Before a CUDA-graph replay: copy a weight written in place since the last call
        into the buffer the graph reads. False when the weight is gone (replaced: the
        program must run again, not replay)."""
        if self.per_call:  # the captured graph makes the copy itself
            return True
        self._replayed = True
        weight = self._last()
        if weight is None:
            return False
        if self._copy is not weight and (weight._version, weight.data_ptr()) != self._key:
            old = self._copy
            if self._refresh(weight) is not old:
                return False  # a new buffer: the captured graph reads the old one
        return True


def same_kind(a: Any, b: Any) -> bool:
    """Same dtype and device: a buffer of ``a``'s kind can hold ``b``'s values."""
    return a.dtype == b.dtype and a.device == b.device
