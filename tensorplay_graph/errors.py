"""The exception hierarchy of tensorplay_graph.

Every error names what went wrong (the node, the op, the backend, the bad
value) and the way out.
"""


class TensorPlayGraphError(Exception):
    """Base class of every error raised by tensorplay_graph."""


class GraphCaptureError(TensorPlayGraphError, RuntimeError):
    """A program cannot be captured (data-dependent control flow, raw kernel launch...)."""


class GraphLintError(TensorPlayGraphError, RuntimeError):
    """A graph breaks an IR invariant; the message names the node."""


class ShapeError(TensorPlayGraphError, RuntimeError):
    """A meta rule cannot infer a node's TensorMeta (no rule, or incompatible shapes)."""


class UnsupportedOpError(TensorPlayGraphError, NotImplementedError):
    """An op has no prim, no rule or no kernel where one is required."""


class UnknownBackendError(TensorPlayGraphError, ValueError):
    """No backend has the requested name (raised by ``compile()`` / ``explain()`` at once)."""


class UnknownOptionError(TensorPlayGraphError, ValueError):
    """An option key that ``compile()`` does not know; the message suggests the closest."""


class LoweringError(TensorPlayGraphError, RuntimeError):
    """A backend accepted a region but could not compile it."""


class MissingLoweringError(LoweringError, LookupError):
    """A prim was rendered for a backend its record has no lowering for."""
