"""The fx-style IR: ``Node``, ``Graph``, ``GraphModule``, code generation, lint.

>>> import operator
>>> from tensorplay_graph.ir import Graph, GraphModule
>>> g = Graph(); x = g.placeholder("x")
>>> _ = g.output(g.call_function(operator.add, (x, 1)))
>>> GraphModule({}, g)(41)
42
"""

from .codegen import PythonCode
from .effects import is_impure, is_inplace, mutated_args, mutated_nodes
from .graph import Graph
from .graph_module import GraphModule
from .meta import TensorMeta
from .names import Namespace, sanitize
from .node import OPCODES, Node, map_aggregate, map_arg, target_name

__all__ = [
    "Graph", "GraphModule", "Namespace", "Node", "OPCODES", "PythonCode", "TensorMeta",
    "is_impure", "is_inplace", "map_aggregate", "map_arg", "mutated_args", "mutated_nodes",
    "sanitize", "target_name",
]


def __dir__() -> list:
    return list(__all__)
