"""``GraphModule``: a Graph plus the values its ``get_attr`` nodes read, callable.

Calling a GraphModule runs Python generated from its graph and compiled with
``exec`` -- not a node-by-node walk. Each instance gets its own class whose
``__call__`` *is* the generated ``forward``, so ``gm(x)`` costs one Python
call, like calling the original function.

Recompilation is lazy and automatic: any structural edit of the graph (new or
erased node, changed args/target/name) marks the module dirty, and the next
call or ``.code`` access regenerates the code. ``recompile()`` forces it.

The generated source is registered in ``linecache``, so tracebacks through
``gm(...)`` show the generated lines (with the user's source line as a
comment when capture recorded ``meta["stack"]``).

>>> import operator
>>> from tensorplay_graph.ir import Graph, GraphModule
>>> g = Graph(); x = g.placeholder("x"); w = g.get_attr("fc.weight")
>>> _ = g.output(g.call_function(operator.mul, (x, w)))
>>> gm = GraphModule({"fc.weight": 3}, g)
>>> gm(2)
6
"""

from __future__ import annotations

import builtins
import copy
import itertools
import linecache
import logging
import sys
from typing import Any, Callable, Dict, Optional

from .graph import Graph
from .names import ANNOTATOR_NAME, is_identifier
from .node import target_name

logger = logging.getLogger(__name__)

_compile_counter = itertools.count()


class _AttrHolder:
    """An intermediate object for dotted attribute paths (``fc1`` in ``fc1.weight``)."""

    def __repr__(self) -> str:
        return f"_AttrHolder({', '.join(sorted(vars(self)))})"


def get_attr_path(root: Any, qualname: str) -> Any:
    """``root.a.b`` for ``qualname`` ``"a.b"`` (a parameter, buffer or submodule path)."""
    value = root
    for atom in qualname.split("."):
        value = getattr(value, atom)
    return value


def attr_reader(root: Any, qualname: str) -> Callable[[], Any]:
    """A function returning ``root.<qualname>`` as it is when called, as :func:`get_attr_path`
    does, but cheaper per call (a compiled training step reads every parameter per call): the
    owner is found once, then a parameter or buffer is one lookup in the owner's own table,
    so a parameter reassigned on the owner is still seen."""
    path, _, name = qualname.rpartition(".")
    owner = get_attr_path(root, path) if path else root
    tables = [t for t in (vars(owner).get("_parameters"), vars(owner).get("_buffers"))
              if isinstance(t, dict)] if hasattr(owner, "__dict__") else []

    def read() -> Any:
        for table in tables:
            if name in table:
                return table[name]
        return getattr(owner, name)
    return read


def _annotator(filename: str, line_to_node: Dict[int, str], graph: Graph,
               class_name: str) -> Callable[[BaseException], None]:
    """The error hook of generated code: note which node failed, and its user source line."""
    nodes = {node.name: node for node in graph.nodes}

    def annotate(exc: BaseException) -> None:
        tb, lineno = exc.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == filename:
                lineno = tb.tb_lineno
            tb = tb.tb_next
        node = nodes.get(line_to_node.get(lineno, ""))
        if node is None or not hasattr(exc, "add_note"):  # add_note: Python >= 3.11
            return
        stack = node.meta.get("stack")
        where = f"; user code: {stack}" if stack else ""
        # An edited graph that reads a value before defining it fails as a NameError
        # inside the generated code: the fix is in the graph, and lint() names it.
        fix = ("; the graph reads a value before it is defined: run gm.graph.lint()"
               if isinstance(exc, NameError) else "")
        exc.add_note(f"while running node {node.name} ({node.op} {target_name(node.target)}) "
                     f"of {class_name}{where}{fix}")
    return annotate


class GraphModule:
    """A callable program: ``GraphModule(root, graph, class_name="GraphModule")``.

    ``root`` is a dict ``{qualname: value}`` or an object (e.g. an
    ``nn.Module``) from which every ``get_attr`` target is copied, by
    reference, onto the new module (dotted names create holder objects).
    """

    _graph: Graph
    _code: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> "GraphModule":
        # One class per instance: __call__ is then set to the compiled forward
        # itself, with no wrapper frame between the caller and the code.
        base = cls.__bases__[0] if cls.__dict__.get("_tpg_instance_class") else cls
        class_name = kwargs.get("class_name", args[2] if len(args) > 2 else "GraphModule")
        if not is_identifier(class_name):
            raise ValueError(f"class_name {class_name!r} is not a valid Python identifier")
        impl = type(class_name, (base,), {"_tpg_instance_class": True, "__module__": base.__module__})
        return object.__new__(impl)

    def __init__(self, root: Any, graph: Graph, class_name: str = "GraphModule") -> None:
        self._code = None
        for node in graph.nodes:
            if node.op != "get_attr":
                continue
            if isinstance(root, dict):
                if node.target not in root:
                    raise KeyError(f"node {node.name}: get_attr target {node.target!r} is missing "
                                   f"from the root dict; add root[{node.target!r}] = value")
                value = root[node.target]
            else:
                try:
                    value = get_attr_path(root, node.target)
                except AttributeError as exc:
                    raise AttributeError(
                        f"node {node.name}: get_attr target {node.target!r} does not exist on "
                        f"{type(root).__name__}; set it on the root or fix the node target") from exc
            self._set_attr(node.target, value)
        if isinstance(root, dict):  # extra entries are kept too, for passes that add get_attrs
            for qualname, value in root.items():
                if not self._has_attr(qualname):
                    self._set_attr(qualname, value)
        self.graph = graph

    # -- attributes ---------------------------------------------------------------
    def _set_attr(self, qualname: str, value: Any) -> None:
        """Set ``self.<qualname> = value``, creating holders for dotted paths."""
        atoms = qualname.split(".")
        if not all(is_identifier(atom) for atom in atoms):
            raise ValueError(f"attribute {qualname!r} is not a dotted identifier path")
        if hasattr(GraphModule, atoms[0]) or atoms[0] in ("_graph", "_code"):
            raise ValueError(f"attribute {qualname!r} would shadow GraphModule.{atoms[0]}; "
                             "rename the get_attr target")
        owner: Any = self
        for atom in atoms[:-1]:
            if not hasattr(owner, atom):
                setattr(owner, atom, _AttrHolder())
            owner = getattr(owner, atom)
        setattr(owner, atoms[-1], value)

    def _has_attr(self, qualname: str) -> bool:
        try:
            get_attr_path(self, qualname)
        except AttributeError:
            return False
        return True

    def register_attr(self, qualname: str, value: Any) -> None:
        """Add a value that a new ``get_attr(qualname)`` node will read."""
        self._set_attr(qualname, value)

    # -- graph and code -----------------------------------------------------------
    @property
    def graph(self) -> Graph:
        return self._graph

    @graph.setter
    def graph(self, graph: Graph) -> None:
        self._graph = graph
        graph._set_owning_module(self)
        self._graph_changed()

    def _graph_changed(self) -> None:
        """Forget the compiled forward; the next call or ``.code`` regenerates it."""
        cls = type(self)
        for attr in ("forward", "__call__"):
            if attr in cls.__dict__:
                delattr(cls, attr)
        self._code = None

    def recompile(self) -> Any:
        """Regenerate and ``exec`` the code of ``self.graph``; returns the ``PythonCode``."""
        code = self._graph.python_code(annotate_errors=True)
        filename = f"<tpgraph:{type(self).__name__}.{next(_compile_counter)}>"
        namespace: Dict[str, Any] = dict(code.globals)
        namespace["__builtins__"] = builtins
        namespace[ANNOTATOR_NAME] = _annotator(filename, code.line_to_node, self._graph,
                                               type(self).__name__)
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exec(compile(str(code), filename, "exec"), namespace)
        forward = namespace["forward"]
        forward.__qualname__ = f"{type(self).__name__}.forward"
        cls = type(self)
        cls.forward = forward
        cls.__call__ = forward
        self._code = code
        self._graph._watch(self)
        logger.debug("recompiled %s as %s", type(self).__name__, filename)
        return code

    @property
    def code(self) -> str:
        """The generated Python source of ``forward``."""
        if self._code is None:
            self.recompile()
        return self._code

    # Used only while dirty: the per-instance class shadows both with the compiled forward.
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.recompile()
        return type(self).__call__(self, *args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.recompile()
        return type(self).forward(self, *args, **kwargs)

    def __deepcopy__(self, memo: Dict[int, Any]) -> "GraphModule":
        """A copy with its own graph and deep-copied attributes."""
        base = type(self).__bases__[0]
        new = base.__new__(base, class_name=type(self).__name__)
        memo[id(self)] = new
        attrs = {k: v for k, v in vars(self).items() if k not in ("_graph", "_code")}
        new.__dict__.update(copy.deepcopy(attrs, memo))
        new._code = None
        new.graph = copy.deepcopy(self._graph, memo)
        return new

    # -- display ------------------------------------------------------------------
    def print_readable(self, print_output: bool = True) -> str:
        """The module as a readable class definition, like ``torch.fx``'s: shapes as
        annotations (``add: "f32[4, 8]" = x + y``), no error-annotation wrapper and no
        ``del`` lines. Written to stdout when ``print_output``."""
        from .codegen import generate
        code = generate(self._graph, delete_after_last_use=False, readable=True)
        body = "".join(f"    {line}\n" for line in code.splitlines())
        text = f"class {type(self).__name__}:\n{body}"
        if print_output:
            sys.stdout.write(text)  # explicit user request to print, like torch.fx
        return text

    def _repr_svg_(self) -> Optional[str]:
        """SVG drawing for notebooks; ``None`` when graphviz or ``dot`` is unavailable."""
        from ..drawing import render
        try:
            return render(self).pipe(format="svg").decode("utf-8")
        except (ImportError, RuntimeError, OSError) as exc:
            logger.info("no SVG for %s: %s", type(self).__name__, exc)
            return None

    def __str__(self) -> str:
        return self.print_readable(print_output=False)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {len(self._graph)} nodes>"


def copy_graph_module(gm: Any) -> "GraphModule":
    """A GraphModule over a copy of ``gm``'s graph (same attribute values), so passes
    can rewrite it while ``gm`` stays runnable for the eager-autograd path."""
    graph = Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    attrs = {n.target: get_attr_path(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    return GraphModule(attrs, graph)
