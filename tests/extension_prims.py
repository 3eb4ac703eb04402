"""Two prims that exist only in the tests: what a backend author adds, one record each.

``prod`` (a reduction: ``torch.prod`` / ``Tensor.prod``) and ``square`` (pointwise:
``torch.square`` / ``Tensor.square``) carry a NumPy reference template and a Triton
lowering; no backend file names them. :func:`registered` adds them for one test and
removes them after, so other tests see the built-in vocabulary only.
"""

import contextlib

from tensorplay_graph import prims
from tensorplay_graph.prims import Prim
from tensorplay_graph.prims.lowering import Reduction
from tensorplay_graph.prims.pointwise import same_dtype
from tensorplay_graph.prims.rules import category, reduce_meta, require_meta

NAMES = ("prod", "square")


def prod(a, dim=None, keepdim=False, dtype=None): ...
def square(a): ...


def prod_meta(a, dim=None, keepdim=False, dtype=None):
    a = require_meta(a, "prod", "a")
    default = "int64" if category(a.dtype) < 2 else a.dtype  # torch: integer products in int64
    return reduce_meta(a, dim, keepdim, dtype or default, "prod")


def prod_reference(a, dim=None, keepdim=False, dtype=None):
    return f"np.prod({a}, axis={dim!r}, keepdims={bool(keepdim)!r})"


def make_prod(triton=Reduction("prod"), **record) -> Prim:
    lowerings = {"reference": prod_reference}
    if triton is not None:
        lowerings["triton"] = triton
    return Prim(name="prod", kind="reduction", signature=prod, meta=prod_meta,
                spellings=("torch:prod", "method:prod"), lowerings=lowerings, **record)


def make_square(**record) -> Prim:
    return Prim(name="square", kind="pointwise", signature=square, meta=same_dtype,
                spellings=("torch:square", "method:square"),
                lowerings={"reference": "({a} * {a})", "triton": "({a} * {a})"}, **record)


@contextlib.contextmanager
def registered(*records: Prim):
    """Register ``records`` (default: ``prod`` and ``square``) for the block only."""
    records = records or (make_prod(), make_square())
    for record in records:
        prims.register(record)
    try:
        yield records
    finally:
        for record in records:
            prims.unregister(record.name)


def program(x):
    """Pointwise work, the new reduction and the new pointwise prim, one Triton kernel."""
    return (x * 0.5 + 1).prod(dim=1).square()
