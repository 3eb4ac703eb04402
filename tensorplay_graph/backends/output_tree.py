"""A program's result as leaves and a spec to rebuild it (tuples, lists and dicts), and how a
CUDA-graph replay hands each leaf out."""

from __future__ import annotations

from typing import Any, List


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


def handout(ops: Any, value: Any, copy: bool) -> int:
    """How a replay hands out the graph's output ``value``: as is (not a tensor, or a tensor
    taking part in autograd, where a detached alias would change it), a copy (an output the
    caller kept last time), else a new tensor object on its memory."""
    if not ops.is_tensor(value):
        return AS_IS
    if copy:
        return COPY
    return AS_IS if value.requires_grad else ALIAS
