"""Triton's per-process cache key, computed in the background while we plan.

The first kernel launch of a process, even one found in Triton's disk cache, makes Triton
hash its own sources and ``libtriton`` (``triton_key()``, ~1.5 s on the H200 machine: most
of a warm start). The key depends only on the installed Triton, so it is computed on a
daemon thread as soon as a CUDA region is planned, overlapping capture and planning work;
the first launch waits for it instead of computing it a second time.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

log = logging.getLogger(__name__)

_THREAD: Optional[threading.Thread] = None
_LOCK = threading.Lock()


def _triton_key() -> None:
    try:
        from triton.runtime.cache import triton_key
    except ImportError:  # older layouts keep it beside the compiler
        try:
            from triton.compiler.compiler import triton_key
        except ImportError:
            return
    try:
        triton_key()  # lru_cached by Triton: later calls in this process are free
    except Exception as exc:  # noqa: BLE001 - the first launch computes it and reports
        log.debug("triton prewarm: triton_key() failed in the background (%s)", exc)


def start() -> None:
    """Start computing Triton's cache key once per process (idempotent, never blocks)."""
    global _THREAD
    if _THREAD is not None:
        return
    with _LOCK:
        if _THREAD is None:
            _THREAD = threading.Thread(target=_triton_key, name="tpg-triton-prewarm", daemon=True)
            _THREAD.start()


def wait() -> None:
    """Block until a started prewarm finished (so the key is not hashed twice)."""
    thread = _THREAD
    if thread is not None and thread.is_alive():
        thread.join()
