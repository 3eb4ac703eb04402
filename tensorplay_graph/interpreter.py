"""``Interpreter``: run a GraphModule node by node, re-entering eager dispatch.

Like ``torch.fx.Interpreter``: ``run`` walks the nodes, ``run_node`` fetches
the node's argument values and dispatches to one method per opcode
(``placeholder``, ``get_attr``, ``call_function``, ``call_method``,
``output``). Subclass and override any of them to observe or change
execution. Values are dropped from the environment after their last use.

>>> import operator
>>> from tensorplay_graph.ir import Graph, GraphModule
>>> g = Graph(); x = g.placeholder("x")
>>> _ = g.output(g.call_function(operator.mul, (x, 3)))
>>> Interpreter(GraphModule({}, g)).run(2)
6
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from .errors import GraphLintError, TensorPlayGraphError
from .ir.graph import Graph
from .ir.node import Node, map_arg, target_name


class NodeExecutionError(TensorPlayGraphError, RuntimeError):
    """A node raised while running; names the node, its target and the user's source line.

    The original exception is chained as ``__cause__`` and kept as ``.original``.
    """

    def __init__(self, message: str, node: Node, original: BaseException) -> None:
        super().__init__(message)
        self.node = node
        self.original = original


def describe_failure(node: Node, exc: BaseException) -> str:
    """The message of a :class:`NodeExecutionError` for ``exc`` raised by ``node``."""
    where = node.meta.get("stack")
    source = f"; user code: {where}" if where else ""
    return (f"node {node.name} ({node.op} {target_name(node.target)}) failed{source}: "
            f"{type(exc).__name__}: {exc}")


class Interpreter:
    """Execute ``module.graph`` one node at a time.

    ``garbage_collect_values`` frees each value after its last reader ran.
    ``graph`` overrides the graph to run (default ``module.graph``).
    """

    def __init__(self, module: Any, garbage_collect_values: bool = True,
                 graph: Optional[Graph] = None) -> None:
        self.module = module
        self.graph: Graph = graph if graph is not None else module.graph
        self.garbage_collect_values = garbage_collect_values
        self.env: Dict[Node, Any] = {}
        self.args_iter: Iterator[Any] = iter(())
        self.user_to_last_uses: Dict[Node, List[Node]] = {}
        if garbage_collect_values:
            last_use: Dict[Node, Node] = {}
            for node in self.graph.nodes:
                for source in node.all_input_nodes:
                    last_use[source] = node
            for source, user in last_use.items():
                self.user_to_last_uses.setdefault(user, []).append(source)

    def run(self, *args: Any, initial_env: Optional[Dict[Node, Any]] = None) -> Any:
        """Run the graph on ``args``; returns the output node's value.

        ``initial_env`` pre-seeds values for some nodes (they are not run).
        """
        self.env = dict(initial_env) if initial_env else {}
        self.args_iter = iter(args)
        for node in self.graph.nodes:
            if node in self.env:
                continue
            try:
                self.env[node] = self.run_node(node)
            except NodeExecutionError:
                raise
            except Exception as exc:
                raise NodeExecutionError(describe_failure(node, exc), node, exc) from exc
            if self.garbage_collect_values:
                for dead in self.user_to_last_uses.get(node, ()):
                    self.env.pop(dead, None)
            if node.op == "output":
                return self.env[node]
        return None

    def run_node(self, n: Node) -> Any:
        """Fetch ``n``'s argument values and call the method named by ``n.op``."""
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    # -- one method per opcode ----------------------------------------------------
    def placeholder(self, target: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """The next positional input, or the placeholder's default when inputs ran out."""
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]
            raise TypeError(f"missing input for placeholder {target!r}: "
                            "pass one positional argument per placeholder") from None

    def get_attr(self, target: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        return self.fetch_attr(target)

    def call_function(self, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        return target(*args, **kwargs)

    def call_method(self, target: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        receiver, *rest = args
        return getattr(receiver, target)(*rest, **kwargs)

    def output(self, target: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        return args[0] if args else None

    # -- helpers ------------------------------------------------------------------
    def fetch_attr(self, target: str) -> Any:
        """``self.module.<target>`` for a dotted qualname."""
        value = self.module
        for i, atom in enumerate(target.split(".")):
            if not hasattr(value, atom):
                done = ".".join(target.split(".")[:i]) or type(self.module).__name__
                raise AttributeError(f"get_attr {target!r}: {done} has no attribute {atom!r}; "
                                     "register the value on the GraphModule")
            value = getattr(value, atom)
        return value

    def fetch_args_kwargs_from_env(self, n: Node) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        """``n.args``/``n.kwargs`` with every Node replaced by its computed value."""
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args: Any, n: Node) -> Any:
        """Replace each Node in ``args`` by its value; fails clearly on a missing one."""
        def load(arg: Node) -> Any:
            if arg not in self.env:
                raise GraphLintError(f"node {n.name} reads {arg.name}, which has no value yet "
                                   "(is the graph out of order? run graph.lint())")
            return self.env[arg]
        return map_arg(args, load)


class MetaRecorder(Interpreter):
    """An ``Interpreter`` that records every call node's real metadata as it runs.

    Tensors (and tuples of them) give ``meta["tensor_meta"]``; plain Python results
    (sizes, flags) give ``meta["val"]``. Used for a compiled program's first call
    when some metadata is unknown before running (an opaque op without
    ``register_fake``, a data-dependent shape): that call is the program's own
    run, so every op in it runs exactly once, and the next call is lowered with
    the metadata learned here.
    """

    def run_node(self, n: Node) -> Any:
        value = super().run_node(n)
        if n.op in ("call_function", "call_method"):
            _record_meta(n, value)
        return value


def _record_meta(node: Node, value: Any) -> None:
    from .passes.shape_prop import meta_of_value
    from .passes.shape_prop_data import is_plain_value

    meta = meta_of_value(value)
    if meta is not None:
        node.meta["tensor_meta"] = meta
    elif is_plain_value(value):
        node.meta["val"] = value


def run_recording_metas(module: Any, args: Tuple[Any, ...]) -> Any:
    """Run ``module`` once on ``args`` through :class:`MetaRecorder`; returns its output."""
    return MetaRecorder(module).run(*args)
