"""``tensorplay_graph.ops.<ns>.<name>``: registered custom operators by name.

>>> import tensorplay_graph
>>> tensorplay_graph.ops.mylib.twice                      # doctest: +SKIP
<custom_op mylib::twice>

Namespaces resolve lazily (an op defined later is found); an unknown op
name raises AttributeError.
"""

from __future__ import annotations

from typing import Any


class OpNamespace:
    """The operators of one namespace, as attributes."""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        from .library.registry import find_op

        op = find_op(f"{self._namespace}::{name}")
        if op is None:
            raise AttributeError(
                f"no operator {self._namespace}::{name} is registered; define it with "
                "tensorplay_graph.library.custom_op first"
            )
        return op

    def __dir__(self) -> list:
        from .library.registry import ops_in

        return sorted(ops_in(self._namespace))

    def __repr__(self) -> str:
        return f"<tensorplay_graph.ops.{self._namespace}>"


def __getattr__(namespace: str) -> OpNamespace:
    if namespace.startswith("__") or not namespace.isidentifier():
        raise AttributeError(namespace)
    return OpNamespace(namespace)


def __dir__() -> list:
    from .library.registry import all_ops

    return sorted({op.namespace for op in all_ops()})
