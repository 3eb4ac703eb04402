"""``lint_graph``: check a Graph's invariants; each failure names the node and the fix.

Checked, in order of discovery:
- list links and node ownership (``node.graph``), opcodes and target types;
- names: valid, non-reserved identifiers, unique;
- placeholders with defaults come after those without;
- order: every input is defined before its use;
- dangling references: inputs that were erased or belong to another graph;
- users consistency: ``a in b.all_input_nodes`` exactly when ``b in a.users``;
- exactly one ``output`` node, and it is the last node;
- ``get_attr`` targets that exist on the owning GraphModule (when there is one).

Capture and the pass pipeline lint only in debug / test mode (:func:`lint_enabled`):
a full lint costs about as much as a planning pass, on every graph.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Set

from ..errors import GraphLintError
from .names import is_identifier, is_safe_name
from .node import OPCODES, Node, _collect_nodes


def lint_enabled() -> bool:
    """True when capture and the pass pipeline lint their graphs: ``TPG_LINT=1``.

    Off by default (the test suite turns it on in ``tests/conftest.py``); a
    ``debug_dir`` also turns it on for the pipeline. ``graph.lint()`` always runs.
    """
    return os.environ.get("TPG_LINT", "0") not in ("", "0")


def _fail(node: Any, problem: str, fix: str) -> GraphLintError:
    name = node.name if isinstance(node, Node) else str(node)
    return GraphLintError(f"graph lint: node {name!r}: {problem}. Fix: {fix}")


def _check_target(node: Node) -> None:
    if node.op == "call_function" and not callable(node.target):
        raise _fail(node, f"call_function target {node.target!r} is not callable",
                    "set node.target to the function object")
    if node.op == "call_method" and not is_identifier(node.target):
        raise _fail(node, f"call_method target {node.target!r} is not a method name",
                    "use a valid identifier, or call_function(getattr, ...)")
    if node.op == "get_attr" and not (isinstance(node.target, str) and all(
            is_identifier(atom) for atom in node.target.split("."))):
        raise _fail(node, f"get_attr target {node.target!r} is not a dotted identifier path",
                    "store the value under a sanitized attribute name")


def _check_inputs(graph: Any, node: Node, seen: Set[Node]) -> None:
    for arg in node.all_input_nodes:
        if arg.graph is not graph:
            raise _fail(node, f"reads node {arg.name!r} of another graph (dangling reference)",
                        "copy that node into this graph with graph.node_copy() and read the copy")
        if arg._erased:
            raise _fail(node, f"reads node {arg.name!r}, which was erased (dangling reference)",
                        f"point {node.name} at a live node with replace_input_with()")
        if arg not in seen:
            raise _fail(node, f"reads {arg.name!r} before it is defined",
                        f"move {arg.name!r} earlier (node.prepend / graph.inserting_before) "
                        f"or {node.name!r} later")
    recomputed: Dict[Node, None] = {}
    _collect_nodes(node.args, recomputed)
    _collect_nodes(node.kwargs, recomputed)
    if set(recomputed) != set(node._input_nodes):
        raise _fail(node, "its recorded inputs differ from the nodes in its args/kwargs",
                    "edit args only through node.args = ... / update_arg / replace_input_with")
    for arg in recomputed:
        if node not in arg.users:
            raise _fail(node, f"reads {arg.name!r} but is missing from {arg.name}.users",
                        "re-assign node.args so the setter repairs users")


def _check_users(graph: Any, node: Node) -> None:
    for user in node.users:
        if user.graph is not graph or user._erased:
            raise _fail(node, f"lists user {user.name!r}, which is not a live node of this graph",
                        f"erase the stale user or re-assign {user.name}.args")
        if node not in user._input_nodes:
            raise _fail(node, f"lists user {user.name!r}, which does not read it",
                        f"re-assign {user.name}.args so the setter repairs users")


def _check_attr(graph: Any, node: Node) -> None:
    owner = graph.owning_module
    if owner is None or node.op != "get_attr":
        return
    value: Any = owner
    for atom in node.target.split("."):
        if not hasattr(value, atom):
            raise _fail(node, f"get_attr target {node.target!r} does not exist on the owning "
                        f"{type(owner).__name__}", f"set the attribute {node.target!r} on the module")
        value = getattr(value, atom)


def lint_graph(graph: Any) -> None:
    """Raise :class:`GraphLintError` for the first broken invariant of ``graph``."""
    seen: Set[Node] = set()
    names: Dict[str, Node] = {}
    outputs = []
    default_seen = None
    root = graph._root
    count = 0
    node = root._next
    while node is not root:
        if node._prev._next is not node or node._next._prev is not node:
            raise _fail(node, "its prev/next links are inconsistent",
                        "move nodes only with prepend/append, never by editing _prev/_next")
        if node.graph is not graph:
            raise _fail(node, "is linked into a graph that does not own it",
                        "use graph.node_copy() to move nodes between graphs")
        if node._erased:
            raise _fail(node, "is erased but still linked", "erase nodes only with graph.erase_node()")
        if node.op not in OPCODES:
            raise _fail(node, f"unknown op {node.op!r}", f"use one of {OPCODES}")
        if not is_safe_name(node.name):
            raise _fail(node, "its name is not a safe identifier",
                        "rename it: node.name = 'new_name' (the graph sanitizes it)")
        if node.name in names:
            raise _fail(node, f"duplicate name (also used by another {names[node.name].op} node)",
                        "rename one of them: node.name = 'new_name'")
        names[node.name] = node
        _check_target(node)
        _check_inputs(graph, node, seen)
        _check_users(graph, node)
        _check_attr(graph, node)
        if node.op == "placeholder":
            if node.args:
                default_seen = node
            elif default_seen is not None:
                raise _fail(node, f"has no default but follows placeholder {default_seen.name!r}, "
                            "which has one (forward's signature would be invalid)",
                            "give it a default or move it before the defaulted placeholders")
        if node.op == "output":
            outputs.append(node)
            if node.users:
                raise _fail(node, "the output node has users", "nothing may read the output node")
        seen.add(node)
        count += 1
        node = node._next
    if count != len(graph):
        raise _fail("<graph>", f"the list holds {count} nodes but the graph counts {len(graph)}",
                    "add and remove nodes only through Graph methods")
    if len(outputs) != 1:
        where = ", ".join(n.name for n in outputs) or "none"
        raise _fail(outputs[-1] if outputs else "<graph>",
                    f"a graph needs exactly one output node, found {len(outputs)} ({where})",
                    "create a single graph.output(value); erase the extra ones")
    if root._prev is not outputs[0]:
        raise _fail(outputs[0], f"the output node is not last (followed by {outputs[0].next.name!r})",
                    "move it to the end: <last node>.append(output_node)")
