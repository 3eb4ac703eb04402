"""Custom operators on TensorPlay and torch tensors: the API of ``tensorplay.library``.

>>> from tensorplay_graph.library import custom_op
>>> @custom_op("mylib::twice", mutates_args=())
... def twice(x):
...     return x * 2
>>> twice(torch.ones(3))                                 # doctest: +SKIP
tensor([2., 2., 2.])

Registered ops dispatch on the first tensor argument's device type, run
``register_autograd`` formulas through the framework's own
``autograd.Function``, and are captured as ONE ``call_function`` node whose
target is the op.  Layout: ``schema`` (validation, ``infer_schema``),
``registry``, ``custom_op`` (``CustomOpDef``), ``dispatch`` (device keys,
framework switches), ``autograd``, ``profiling``, ``native`` (TensorPlay's
native dispatcher), ``api`` (definers, ``register_*``), ``lib``
(``Library``, ``define``/``impl``), ``kernels`` (``wrap_triton``,
``wrap_tilelang``), ``opcheck``.
"""

from __future__ import annotations

from .api import (
    custom_op,
    get_kernel,
    register_autocast,
    register_autograd,
    register_fake,
    register_kernel,
    register_vmap,
    tile_lang_op,
    triton_op,
)
from .custom_op import CustomOpDef
from .kernels import TileLangKernelWrapper, TritonKernelWrapper, wrap_tilelang, wrap_triton
from .lib import Library, define, impl, impl_abstract
from .opcheck import opcheck
from .registry import all_ops, get_op, has_op
from .schema import infer_schema

__all__ = [
    "Library",
    "CustomOpDef",
    "custom_op",
    "triton_op",
    "tile_lang_op",
    "wrap_triton",
    "wrap_tilelang",
    "register_kernel",
    "register_fake",
    "register_autograd",
    "register_vmap",
    "register_autocast",
    "define",
    "impl",
    "impl_abstract",
    "infer_schema",
    "opcheck",
    "get_kernel",
    "get_op",
    "has_op",
    "all_ops",
    "TritonKernelWrapper",
    "TileLangKernelWrapper",
]


def __dir__() -> list:
    return list(__all__)
