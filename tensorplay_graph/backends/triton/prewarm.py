"""Triton's per-process cache key: from our disk cache when Triton is unchanged, else
computed in the background while we plan.

The first kernel launch of a process, even one found in Triton's disk cache, makes Triton
hash its own sources and ``libtriton`` (``triton_key()``: 0.3-1.5 s on the H200 machine, most
of a warm start). The key depends only on the installed Triton, so it is kept in
``<cache>/triton/triton_key.json`` beside a fingerprint of the files it hashes (path, size,
modification time -- what Python trusts for its ``.pyc`` files); a process whose fingerprint
matches installs the stored key as ``triton_key`` (as Triton's own compile-warmup workers do)
instead of hashing. Otherwise the key is computed on a daemon thread as soon as a CUDA region
is planned, overlapping capture and planning, and stored; the first launch waits for it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from typing import Any, Callable, List, Optional

log = logging.getLogger(__name__)

_THREAD: Optional[threading.Thread] = None
_LOCK = threading.Lock()


def _key_function() -> Optional[Callable[[], str]]:
    try:
        from triton.runtime.cache import triton_key
    except ImportError:  # older layouts keep it beside the compiler
        try:
            from triton.compiler.compiler import triton_key
        except ImportError:
            return None
    return triton_key


def fingerprint(root: str) -> str:
    """A digest of (path, size, mtime) of every file under Triton's package ``root`` that
    ``triton_key()`` may hash (a superset: all of its sources and the native library)."""
    entries: List[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".so", ".pyd", ".dylib")):
                path = os.path.join(folder, name)
                stat = os.stat(path)
                entries.append(f"{os.path.relpath(path, root)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def _store_path() -> str:
    from .cache import default_cache_dir
    return os.path.join(str(default_cache_dir()), "triton_key.json")


def _holders() -> List[Any]:
    """Triton's modules that may hold ``triton_key`` by name (it moved between versions)."""
    found = []
    try:
        from triton.runtime import cache
        found.append(cache)
        from triton.compiler import compiler
        found.append(compiler)
        from triton.runtime import autotuner, jit
        found += [autotuner, jit]
    except ImportError:
        pass
    return found


def _install(key: str) -> None:
    """``triton_key`` returns ``key`` in this process, wherever Triton looks it up (a module
    imported later takes the name from ``triton.runtime.cache``, patched here)."""
    original = _key_function()

    def triton_key() -> str:
        return key
    triton_key.cache_clear = getattr(original, "cache_clear", lambda: None)  # type: ignore[attr-defined]
    for module in _holders():
        if getattr(module, "triton_key", None) is original:
            setattr(module, "triton_key", triton_key)


def _triton_key() -> None:
    compute = _key_function()
    if compute is None:
        return
    try:
        import triton
        version = getattr(triton, "__version__", "?")
        mark = f"{version}:{fingerprint(os.path.dirname(os.path.abspath(triton.__file__)))}"
        path = _store_path()
        try:
            with open(path) as f:
                stored = json.load(f)
            if stored.get("fingerprint") == mark and isinstance(stored.get("key"), str):
                _install(stored["key"])
                return
        except (OSError, ValueError):
            pass
        key = compute()  # lru_cached by Triton: later calls in this process are free
        _write(path, {"fingerprint": mark, "key": key})
    except Exception as exc:  # noqa: BLE001 - the first launch computes it and reports
        log.debug("triton prewarm: triton_key() failed in the background (%s)", exc)


def _write(path: str, record: Any) -> None:
    from pathlib import Path

    from ..source_files import write_atomic
    try:
        write_atomic(Path(path), json.dumps(record))
    except OSError as exc:  # a read-only cache: the next process hashes again
        log.debug("triton prewarm: could not store the key (%s)", exc)


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
