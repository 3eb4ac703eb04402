"""Python source for ``forward(self, ...)`` generated from a :class:`Graph`.

Readable by design: node names become local variables, ``operator.*``
targets become Python operators, ``call_method`` nodes become method calls,
``get_attr`` nodes read ``self.<qualname>``. ``call_function`` targets and
constants that are not plain literals are referenced by sanitized names
bound in the globals dict returned with the source (``PythonCode.globals``),
so no user string reaches the source except through ``repr`` of a str or
:func:`~tensorplay_graph.ir.names.sanitize`.

>>> import operator
>>> from tensorplay_graph.ir import Graph
>>> g = Graph(); x = g.placeholder("x")
>>> _ = g.output(g.call_function(operator.getitem, (x, (slice(1, None), Ellipsis))))
>>> print(g.python_code().splitlines()[1].strip())
getitem = x[1:, ...]
"""

from __future__ import annotations

import builtins
import inspect
import math
import operator
from typing import Any, Dict, List

from ..errors import GraphLintError
from .names import ANNOTATOR_NAME, ERROR_NAME, RESERVED_NAMES, Namespace, is_identifier, is_safe_name
from .node import Node, target_name

BINARY_OPERATORS = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
    operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.matmul: "@",
    operator.and_: "&", operator.or_: "|", operator.xor: "^", operator.lshift: "<<",
    operator.rshift: ">>", operator.eq: "==", operator.ne: "!=", operator.lt: "<",
    operator.le: "<=", operator.gt: ">", operator.ge: ">=", operator.is_: "is",
    operator.is_not: "is not",
}
UNARY_OPERATORS = {operator.neg: "-", operator.pos: "+", operator.invert: "~", operator.not_: "not "}

_LITERAL_ATOMS = (type(None), bool, str, bytes)


class PythonCode(str):
    """Generated source (this string) plus ``globals``, the names it references."""

    globals: Dict[str, Any]
    line_to_node: Dict[int, str]

    @property
    def src(self) -> str:
        return str(self)


def _one_line(text: Any, limit: int = 200) -> str:
    """A user string made safe for a ``#`` comment: one line of printable characters."""
    clean = "".join(ch if ch.isprintable() else " " for ch in str(text))
    return clean[:limit]


def _constant_hint(value: Any) -> str:
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if isinstance(name, str):
        return target_name(value)
    if hasattr(value, "shape"):  # tensors: str() would be slow and long
        return type(value).__name__
    try:
        text = str(value)
    except Exception:  # any object may have a broken __str__; the hint is cosmetic
        text = ""
    return text if 0 < len(text) <= 40 else type(value).__name__


class _Emitter:
    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.namespace = Namespace(reserved=RESERVED_NAMES)
        self.globals: Dict[str, Any] = {}
        for node in graph.nodes:
            if not is_safe_name(node.name) or node.name in self.namespace:
                raise GraphLintError(
                    f"node {node.name!r}: its name is not a unique safe identifier, so it cannot "
                    "be a variable in generated code; rename it with node.name = 'new_name'")
            self.namespace.reserve(node.name)

    # -- names for globals --------------------------------------------------------
    def global_name(self, value: Any, hint: str) -> str:
        name = self.namespace.create_name(hint, value)
        self.globals[name] = value
        return name

    def function_name(self, fn: Any) -> str:
        name = getattr(fn, "__name__", None)
        if isinstance(name, str) and getattr(builtins, name, None) is fn:
            return name  # builtins are never shadowed: node and global names avoid them
        return self.global_name(fn, target_name(fn))

    # -- values -------------------------------------------------------------------
    def render(self, a: Any) -> str:
        if isinstance(a, Node):
            return a.name
        kind = type(a)
        if kind in _LITERAL_ATOMS:
            return repr(a)
        if a is Ellipsis:
            return "..."
        if kind is int:
            return repr(a)
        if kind in (float, complex):
            finite = math.isfinite(a) if kind is float else (math.isfinite(a.real) and
                                                             math.isfinite(a.imag))
            return repr(a) if finite else f"{kind.__name__}({str(a)!r})"
        if kind is tuple:
            items = [self.render(x) for x in a]
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if isinstance(a, tuple) and hasattr(a, "_fields"):
            return f"{self.global_name(kind, target_name(kind))}({', '.join(self.render(x) for x in a)})"
        if isinstance(a, list):
            return f"[{', '.join(self.render(x) for x in a)}]"
        if isinstance(a, dict):
            items = (f"{self.render_key(k)}: {self.render(v)}" for k, v in a.items())
            return "{" + ", ".join(items) + "}"
        if kind is slice:
            return f"slice({self.render(a.start)}, {self.render(a.stop)}, {self.render(a.step)})"
        return self.global_name(a, _constant_hint(a))

    def render_key(self, key: Any) -> str:
        if type(key) in (int, str, bool, bytes, type(None)):
            return repr(key)
        return self.global_name(key, _constant_hint(key))

    def operand(self, a: Any) -> str:
        """``render`` wrapped in parentheses when it would not bind as one operand."""
        text = self.render(a)
        if isinstance(a, Node) or text.isidentifier():
            return text
        if type(a) in (int, float) and (a < 0 or text.startswith("-")) or type(a) is complex:
            return f"({text})"
        return text

    def index(self, idx: Any) -> str:
        """Subscript text: slices as ``a:b:c``, tuples without parentheses."""
        if type(idx) is slice:
            parts = ["" if v is None else self.render(v) for v in (idx.start, idx.stop, idx.step)]
            text = f"{parts[0]}:{parts[1]}"
            return text + (f":{parts[2]}" if idx.step is not None else "")
        if type(idx) is tuple:
            if not idx:
                return "()"
            body = ", ".join(self.index(x) for x in idx)
            return body + "," if len(idx) == 1 else body
        return self.render(idx)

    def call_args(self, args: Any, kwargs: Dict[str, Any]) -> str:
        parts = [self.render(a) for a in args]
        odd = {}
        for key, value in kwargs.items():
            if is_identifier(key):
                parts.append(f"{key}={self.render(value)}")
            else:
                odd[key] = value
        if odd:  # keyword names that are not identifiers pass through a dict
            parts.append("**" + self.render(odd))
        return ", ".join(parts)

    # -- statements ---------------------------------------------------------------
    def expression(self, node: Node) -> str:
        args, kwargs, target = node.args, node.kwargs, node.target
        if node.op == "get_attr":
            if not all(is_identifier(atom) for atom in str(target).split(".")):
                raise GraphLintError(f"node {node.name}: get_attr target {target!r} is not a "
                                     "dotted identifier path; store the value under a safe name")
            return f"self.{target}"
        if node.op == "call_method":
            if not is_identifier(target):
                raise GraphLintError(f"node {node.name}: call_method target {target!r} is not a "
                                     "valid method name; use call_function(getattr(...)) instead")
            receiver = self.render(args[0]) if isinstance(args[0], Node) else f"({self.render(args[0])})"
            return f"{receiver}.{target}({self.call_args(args[1:], kwargs)})"
        if not kwargs:
            if target in BINARY_OPERATORS and len(args) == 2:
                return f"{self.operand(args[0])} {BINARY_OPERATORS[target]} {self.operand(args[1])}"
            if target in UNARY_OPERATORS and len(args) == 1:
                return f"{UNARY_OPERATORS[target]}{self.operand(args[0])}"
            if target is operator.getitem and len(args) == 2:
                return f"{self.operand(args[0])}[{self.index(args[1])}]"
        return f"{self.function_name(target)}({self.call_args(args, kwargs)})"


class _ReadableEmitter(_Emitter):
    """Names functions and constants as a reader would write them (``torch.relu``,
    ``tensorplay.float32``); the text is for reading, not for ``exec``."""

    def global_name(self, value: Any, hint: str) -> str:
        return readable_name(value) if callable(value) else _readable_constant(value)

_DTYPE_ABBREVIATIONS = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
                        "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32",
                        "int64": "i64", "bool": "b8", "complex64": "c64", "complex128": "c128"}


def readable_name(target: Any) -> str:
    """``module.name`` when the module exports ``target`` under that name (``torch.relu``,
    not ``torch._VariableFunctionsClass.relu``), else :func:`target_name`."""
    module, name = getattr(target, "__module__", None), getattr(target, "__name__", None)
    qualname = op_qualname(target)
    if qualname is not None:  # a custom op: ops.<namespace>.<name>
        return "ops." + qualname.replace("::", ".")
    if module and isinstance(name, str) and module not in ("builtins", "_operator"):
        if getattr(inspect.getmodule(target), name, None) is target:
            return f"{module}.{name}"
    return target_name(target)


def op_qualname(target: Any) -> Any:
    """``"namespace::name"`` of a registered operator, else ``None``."""
    for attr in ("__qualname__", "__name__", "_qualname", "qualname"):
        value = getattr(target, attr, None)
        if isinstance(value, str) and "::" in value:
            return value
    return None


def _readable_constant(value: Any) -> str:
    """``str`` of a constant when it reads as a name (``tensorplay.undefined``), never an
    ``<Enum.member: 22>`` repr."""
    text = _constant_hint(value)
    return text if all(is_identifier(part) for part in text.split(".")) else f"<{type(value).__name__}>"


def meta_annotation(meta: Any) -> str:
    """fx-style type text of a ``tensor_meta``: ``f32[4, 8]``, tuples as ``(f32[4], i64[])``."""
    if isinstance(meta, (tuple, list)):
        return "(" + ", ".join(meta_annotation(m) for m in meta) + ")"
    shape = getattr(meta, "shape", None)
    if shape is None:
        return ""
    dtype = str(getattr(meta, "dtype", ""))
    return f"{_DTYPE_ABBREVIATIONS.get(dtype, dtype)}[{', '.join(str(s) for s in shape)}]"


def _annotated(node: Node, readable: bool) -> str:
    text = meta_annotation(node.meta.get("tensor_meta")) if readable else ""
    return f'{node.name}: "{text}"' if text else node.name


def _deletions(nodes: List[Node]) -> Dict[Node, List[str]]:
    """Values to ``del`` after each node: those it reads for the last time.

    Placeholders and get_attr values are kept (their owner holds them anyway).
    """
    last_use: Dict[Node, Node] = {}
    for node in nodes:
        for source in node.all_input_nodes:
            last_use[source] = node
    to_delete: Dict[Node, List[str]] = {}
    for node in nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        reader = last_use.get(node, node)  # an unread value dies where it is made
        if reader.op != "output":
            to_delete.setdefault(reader, []).append(node.name)
    return to_delete


def generate(graph: Any, delete_after_last_use: bool = True,
             annotate_errors: bool = False, readable: bool = False) -> PythonCode:
    """Source of ``def forward(self, <placeholders>)`` for ``graph``.

    ``annotate_errors`` wraps the body so an exception gets a note from the
    global ``_tpg_annotate(exc)`` (bound by ``GraphModule.recompile``); the
    ``line_to_node`` map of the result maps source lines to node names.
    ``readable`` is for people (``print_readable``): fx-style shape annotations
    (``add: "f32[4, 8]" = x + y``) and functions / constants by their public names.
    """
    emitter = _ReadableEmitter(graph) if readable else _Emitter(graph)
    nodes = list(graph.nodes)
    deletions = _deletions(nodes) if delete_after_last_use else {}
    params: List[str] = ["self"]
    body: List[str] = []
    line_to_node: Dict[int, str] = {}
    returned = "None"
    last_stack = None
    for node in nodes:
        if node.op == "placeholder":
            default = f"={emitter.render(node.args[0])}" if node.args else ""
            params.append(_annotated(node, readable) + default)
            continue
        if node.op == "output":
            returned = emitter.render(node.args[0]) if node.args else "None"
            continue
        stack = node.meta.get("stack")
        if stack and stack != last_stack:  # one comment per user line, not per node
            body.append(f"# {_one_line(stack)}")
        last_stack = stack
        body.append(f"{_annotated(node, readable)} = {emitter.expression(node)}")
        line_to_node[len(body) + (2 if annotate_errors else 1)] = node.name  # def (+ try) lines
        if node in deletions:
            body.append(f"del {', '.join(deletions[node])}")
    body.append(f"return {returned}")
    if annotate_errors:
        # try costs nothing on the happy path (Python >= 3.11); the handler adds a note
        # naming the failing node and re-raises the original exception unchanged.
        body = (["try:"] + [f"    {line}" for line in body] +
                [f"except Exception as {ERROR_NAME}:", f"    {ANNOTATOR_NAME}({ERROR_NAME})",
                 "    raise"])
    source = f"def forward({', '.join(params)}):\n" + "".join(f"    {line}\n" for line in body)
    code = PythonCode(source)
    code.globals = emitter.globals
    code.line_to_node = line_to_node
    return code
