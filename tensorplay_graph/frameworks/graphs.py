"""Which framework's conventions a captured graph follows.

TensorPlay and torch differ in argument conventions (``x.var(0)``), promotion rules and
eager quirks, so passes and backends ask once per graph (or region) whose eager
semantics apply.
"""

from __future__ import annotations

from typing import Any, Tuple

from . import adapter_for, framework_of, registered

__all__ = ["graph_framework"]

#: The framework of a graph that names none (no example values, no framework calls).
DEFAULT = "torch"


def graph_framework(graph: Any) -> str:
    """``"tensorplay"`` or ``"torch"``: the framework whose method conventions apply.

    The framework capture recorded on the graph, else taken from the first placeholder carrying an example value (``meta["val"]``),
    else from the first call target a framework adapter claims; torch otherwise.
    The scan is remembered until the graph changes (backends ask once per region, and a
    graph of ``operator`` calls only is read to its end each time); the example values
    of the placeholders it passed are read again on every call.
    """
    if getattr(graph, "framework", None):  # recorded by capture
        return graph.framework
    version = getattr(graph, "_version", None)
    memo = getattr(graph, "_framework_memo", None)
    if memo is None or version is None or memo[0] != version:
        memo = (version, *_scan_framework(graph))
        if version is not None:
            graph._framework_memo = memo
    for node in memo[1]:
        framework = framework_of(node.meta.get("val"))
        if framework is not None:
            return framework
    return memo[2]


def _scan_framework(graph: Any) -> Tuple[Tuple[Any, ...], str]:
    """(placeholders before the first call whose target names a framework, that framework)."""
    placeholders = []
    adapters = [adapter_for(name) for name in registered()]
    for node in graph.nodes:
        if node.op == "placeholder":
            placeholders.append(node)
        elif node.op == "call_function":
            for adapter in adapters:
                if adapter.defines(node.target):
                    return tuple(placeholders), adapter.name
    return tuple(placeholders), DEFAULT
