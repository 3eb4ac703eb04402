"""VJP rules of view prims, and of the kinds whose backward is the framework's own.

Registered by :mod:`.vjps` (which attaches every rule once all are known); see its docstring
for what a rule is.
"""

from __future__ import annotations

from .emit import OPAQUE
from .indexing import full_index
from .vjp_registry import rule


# ----------------------------------------------------------------------------- views

@rule("reshape", "view", "unsqueeze", "squeeze", "flatten")
def _reshape(e, g, out, a, **_):
    return {"a": e.reshape(g, e.shape(a))}


@rule("permute")
def _permute(e, g, out, a, dims):
    n = len(dims)
    inverse = [0] * n
    for i, d in enumerate(dims):
        inverse[d % n] = i
    return {"a": e.permute(g, tuple(inverse))}


@rule("transpose")
def _transpose(e, g, out, a, dim0, dim1):
    return {"a": e.transpose(g, dim0, dim1)}


@rule("expand", "contiguous")
def _passthrough(e, g, out, a, **_):
    return {"a": g}  # the caller sums an expanded gradient back to the input's shape


@rule("getitem")
def _getitem(e, g, out, a, index):
    if full_index(index, e.shape(a)):
        return {"a": g}  # ``x[:, 0:]``: all of x, no scatter
    return {"a": e.slice_backward(g, e.shape(a), index)}


# ----------------------------------------------------------------------------- opaque kinds

@rule("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
def _dropout(e, g, out, a, p=0.5, training=True, inplace=False):
    return {"a": g} if not training or p == 0 else OPAQUE


@rule("conv1d", "conv2d", "conv3d", "batch_norm")
def _framework_backward(e, g, out, **_):
    return OPAQUE  # the framework's own convolution / batch-norm backward kernels
