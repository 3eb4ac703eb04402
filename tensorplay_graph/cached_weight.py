"""Derived copies of a program's weights, made once and reused while the weight is unchanged.

A pass that gives a kernel a weight in another form inserts a node whose target is one of
these caches: NHWC for cuDNN
(:class:`~tensorplay_graph.passes.channels_last.ChannelsLastWeight`), zero rows up to an
aligned width for cuBLAS (:class:`~tensorplay_graph.backends.aligned_linear.PaddedRowsWeight`).
The copy is valid while the weight is the same tensor object with the same version counter and
data pointer (each of them, for a copy made from several weights: the q / k / v projections
concatenated by :class:`~tensorplay_graph.passes.merge_linears.ConcatenatedWeights`). A
changed weight is copied again into the same buffer, so CUDA graphs captured with it stay
valid (:meth:`CachedWeight.refresh_for_replay` does that before a replay: a replay runs none
of the program's Python). With grad enabled and a weight that requires grad
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
    """A derived copy of one weight or of several together (a concatenation). Subclasses say
    how to make it (:meth:`convert`), how to rewrite it in place (:meth:`refill`) and when
    the weight itself serves (:meth:`as_is`); each receives the weights in call order."""

    eager_reason = "a cached copy of a weight, refreshed when the parameter changes"
    #: in-place writes to the weight between calls after which the copy is made per call
    MAX_CHANGES = 2

    def __init__(self) -> None:
        self._sources: Tuple[Any, ...] = ()  # weakrefs to the weights the copy was made from
        self._key: Tuple[Tuple[int, int], ...] = ()
        self._copy: Any = None
        self._grad_mode: Any = None
        self._changes = 0
        self._replayed = False  # a CUDA graph reads the buffer: it must stay
        self.per_call = False

    def convert(self, *weights: Any) -> Any:
        """A new derived copy of ``weights`` (differentiable when one of them needs grad)."""
        raise NotImplementedError

    def refill(self, buffer: Any, *weights: Any) -> bool:
        """Write the derived form of ``weights`` into ``buffer`` in place; False when it does
        not fit."""
        raise NotImplementedError

    def as_is(self, *weights: Any) -> bool:
        """Whether the (single) weight itself already has the derived form."""
        return False

    def __call__(self, *weights: Any) -> Any:
        if self.per_call:
            return self.convert(*weights)
        if self._made_from(weights):
            if _keys(weights) == self._key:
                return self._copy
            self._changes += 1  # written in place since the last call
            if self._changes >= self.MAX_CHANGES and not self._replayed:
                self.per_call, self._copy, self._sources = True, None, ()
                return self.convert(*weights)
        if any(w.requires_grad for w in weights):
            if self._grad_mode is None:
                self._grad_mode = adapter_for(weights[0]).grad_mode_query()
            if self._grad_mode():
                return self.convert(*weights)
        return self._refresh(weights)

    def _made_from(self, weights: Tuple[Any, ...]) -> bool:
        sources = self._sources
        return len(sources) == len(weights) and all(s() is w for s, w in zip(sources, weights))

    def _refresh(self, weights: Tuple[Any, ...]) -> Any:
        copy = self._copy
        detached = tuple(w.detach() for w in weights)
        if self.as_is(*weights):
            copy = weights[0]
        elif copy is None or any(copy is w for w in self._last()) or \
                not self.refill(copy, *detached):
            copy = self.convert(*detached)
        self._sources = tuple(weakref.ref(w) for w in weights)
        self._key = _keys(weights)
        self._copy = copy
        return copy

    def _last(self) -> Tuple[Any, ...]:
        return tuple(source() for source in self._sources)

    def refresh_for_replay(self) -> bool:
        """Before a CUDA-graph replay: copy a weight written in place since the last call
        into the buffer the graph reads. False when a weight is gone (replaced: the
        program must run again, not replay)."""
        if self.per_call:  # the captured graph makes the copy itself
            return True
        self._replayed = True
        if not self._sources:
            return False
        changed = False
        for source, (version, pointer) in zip(self._sources, self._key):  # before every replay
            weight = source()
            if weight is None:
                return False
            changed = changed or weight._version != version or weight.data_ptr() != pointer
        if changed and not any(self._copy is w for w in self._last()):
            old = self._copy
            if self._refresh(self._last()) is not old:
                return False  # a new buffer: the captured graph reads the old one
        return True


def _keys(weights: Tuple[Any, ...]) -> Tuple[Tuple[int, int], ...]:
    return tuple((w._version, w.data_ptr()) for w in weights)


def same_kind(a: Any, b: Any) -> bool:
    """Same dtype and device: a buffer of ``a``'s kind can hold ``b``'s values."""
    return a.dtype == b.dtype and a.device == b.device
