"""The fx-style IR: ``Node``, ``Graph``, ``GraphModule``, code generation, lint.

>>> import operator
>>> from tensorplay_graph.ir import Graph, GraphModule
>>> g = Graph(); x = g.placeholder("x")
>>> _ = g.output(g.call_function(operator.add, (x, 1)))
>>> GraphModule({}, g)(41)
42
"""

from .codegen import PythonCode
from .graph import Graph, default_is_impure
from .graph_module import GraphModule
from .meta import TensorMeta
from .names import Namespace, sanitize
from .node import OPCODES, Node, map_aggregate, map_arg, target_name

__all__ = [
    "Graph", "GraphModule", "Namespace", "Node", "OPCODES", "PythonCode", "TensorMeta",
    "default_is_impure", "map_aggregate", "map_arg", "sanitize", "target_name",
]
