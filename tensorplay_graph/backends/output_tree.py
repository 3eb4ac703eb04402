"""A program's result as leaves and a spec to rebuild it (tuples, lists and dicts), and how a
CUDA-graph replay hands each leaf out and sees which ones the caller still holds."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple


def flatten(value: Any, leaves: List[Any]) -> Any:
    """``value``'s leaves appended to ``leaves`` (through tuples, lists and dicts); returns a
    rebuild spec."""
    kind = type(value)
    if kind in (tuple, list):
        return (kind, None, [flatten(v, leaves) for v in value])
    if kind is dict:
        return (dict, list(value), [flatten(v, leaves) for v in value.values()])
    leaves.append(value)
    return None


def rebuild(spec: Any, leaves: Any) -> Any:
    if spec is None:
        return next(leaves)
    kind, keys, items = spec
    values = [rebuild(s, leaves) for s in items]
    if kind is dict:
        return dict(zip(keys, values))
    return tuple(values) if kind is tuple else list(values)


AS_IS, ALIAS, COPY = range(3)
_SCALARS = (int, float, bool, complex, str, bytes, type(None))


def unfit_outputs(ops: Any, leaves: List[Any], inputs: Sequence[Any]) -> Optional[str]:
    """Why a graph cannot hand out ``leaves`` (a captured run's outputs), or None: an object
    that may hold tensors the liveness check cannot see, or an output aliasing an input."""
    strange = next((type(v).__name__ for v in leaves
                    if not ops.is_tensor(v) and not isinstance(v, _SCALARS)), None)
    if strange is not None:
        return f"the program returns a {strange}, which the runner cannot look into"
    storages = {v.untyped_storage().data_ptr() for v in inputs if ops.is_tensor(v)}
    if any(ops.is_tensor(v) and v.untyped_storage().data_ptr() in storages for v in leaves):
        return ("an output aliases an input (a replay could not return a view of the "
                "caller's new tensor)")
    return None


def handout(ops: Any, value: Any, copy: bool) -> int:
    """How a replay hands out the graph's output ``value``: as is (not a tensor, or a tensor
    taking part in autograd, where a detached alias would change it), a copy (an output the
    caller kept last time), else a new tensor object on its memory."""
    if not ops.is_tensor(value):
        return AS_IS
    if copy:
        return COPY
    return AS_IS if value.requires_grad else ALIAS


class GraphOutputs:
    """The outputs of one captured graph: handed out per replay, watched for liveness.

    The runner keeps aliases of the outputs and hands out fresh ones per replay: a handed-out
    tensor nobody else references can be taken over as is (autograd puts such a gradient into
    ``.grad`` without the copy it makes of a shared one); the storage count still sees every
    handed-out tensor and view that is alive. What is watched, and how each output is handed
    out, is decided here once: the host work before each replay is on the step's critical
    path (a GPT-2 training step checks about 250 outputs). Outputs in ``copied`` are handed
    out as copies and not watched. ``leaves`` is taken over: the list is emptied, so that
    the baseline counts only this object's references."""

    def __init__(self, ops: Any, leaves: List[Any], spec: Any, copied: Set[int]) -> None:
        first = {id(v): i for i, v in reversed(list(enumerate(leaves)))}
        self.same = [first[id(v)] for v in leaves]  # an output returned twice: one tensor
        self.values = [v.detach() if handout(ops, v, False) == ALIAS else v for v in leaves]
        self.spec = spec
        leaves.clear()
        self.watched_at = [i for i, v in enumerate(self.values)
                           if i not in copied and ops.is_tensor(v)]
        self.watched = [self.values[i] for i in self.watched_at]
        counter = getattr(ops, "storage_counter", None) or \
            (lambda t: functools.partial(ops.storage_uses, t))
        self.storage_counts: List[Callable[[], int]] = [counter(v) for v in self.watched]
        self.how = [handout(ops, v, i in copied) for i, v in enumerate(self.values)]
        self.baseline = self.counts()

    def counts(self) -> List[Tuple[int, int]]:
        """Per watched output: the references to its tensor object (this object's two plus
        the loop's) and to its storage; one expression for the baseline and every check."""
        return list(zip(map(sys.getrefcount, self.watched),
                        [uses() for uses in self.storage_counts]))

    def held(self) -> Set[int]:
        """Positions of the outputs that a tensor (or view) handed out by the last replay
        still references."""
        now = self.counts()
        if now == self.baseline:  # every call of a loop that drops its results
            return set()
        return {i for i, (refs, uses), (now_refs, now_uses)
                in zip(self.watched_at, self.baseline, now)
                if now_refs > refs or now_uses > uses}

    def result(self) -> Any:
        """The program's result on the graph's buffers (copies where decided)."""
        leaves = [v if how == AS_IS else v.detach() if how == ALIAS else v.clone()
                  for v, how in zip(self.values, self.how)]
        leaves = [leaves[j] for j in self.same]
        return rebuild(self.spec, iter(leaves))
