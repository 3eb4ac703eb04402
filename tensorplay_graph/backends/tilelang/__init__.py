"""The TileLang backend (GEMM + epilogue, fused pointwise, ``tile_lang_op`` nodes).

Importing this package registers nothing eagerly and does not import TileLang;
the registry calls :func:`make_backend`. TileLang is imported when a kernel is built.
"""

from .backend import TileLangBackend, make_backend

__all__ = ["TileLangBackend", "make_backend"]


def __dir__() -> list:
    return list(__all__)
