"""Kernel cache: generated sources on disk (Triton needs real files) and modules in memory.

Disk entries are ``<digest>.py`` files whose last line is a checksum of the
source above it; an entry that is partial or corrupt (checksum mismatch, wrong
source) is rebuilt, never imported. Writes go to a temporary file in the same
directory and are renamed into place, so concurrent writers never expose a
half-written file. The digest hashes the source and the Triton version;
compiled binaries are cached by Triton itself, keyed by the same source.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Any, Dict, Optional

from ..source_files import cache_root, digest, import_file, write_atomic
from .canonical import canonical

log = logging.getLogger(__name__)
_CHECK_PREFIX = "# tpg-checksum: "


def default_cache_dir() -> Path:
    """``$TPG_CACHE_DIR/triton`` or ``~/.cache/tensorplay_graph/triton``."""
    return cache_root() / "triton"


def triton_version() -> str:
    import triton
    return triton.__version__


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class KernelCache:
    """Source files on disk + imported ``@triton.jit`` functions in memory."""

    def __init__(self, directory: Optional[os.PathLike] = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self._functions: Dict[str, Any] = {}
        self._lock = threading.Lock()
        self.stats = {"memory_hits": 0, "disk_hits": 0, "writes": 0, "rebuilt": 0}

    def path_for(self, key: str) -> Path:
        return self.directory / f"tpg_{key[:32]}.py"

    def jit_function(self, name: str, source: str) -> Any:
        """The ``@triton.jit`` function ``name`` defined by ``source`` (cached).

        Kept and compiled in :func:`canonical` form: kernels that differ only in value
        names and comments (the same op in every layer) are one function, compiled once.
        """
        name, source = canonical(name, source)
        key = digest(source, triton_version())
        with self._lock:
            fn = self._functions.get(key)
            if fn is not None:
                self.stats["memory_hits"] += 1
                return fn
            path = self.path_for(key)
            if self._valid_entry(path, source):
                self.stats["disk_hits"] += 1
            else:
                self._write_atomic(path, source)
            fn = getattr(self._import(path, key), name)
            self._functions[key] = fn
            return fn

    def _valid_entry(self, path: Path, source: str) -> bool:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            return False
        body, sep, last = text.rpartition("\n" + _CHECK_PREFIX)
        good = bool(sep) and last.strip() == _checksum(body + "\n") and body + "\n" == source
        if not good:
            self.stats["rebuilt"] += 1
            log.warning("triton cache: entry %s is partial or corrupt; rebuilding it", path)
        return good

    def _write_atomic(self, path: Path, source: str) -> None:
        write_atomic(path, source + _CHECK_PREFIX + _checksum(source) + "\n")
        self.stats["writes"] += 1

    @staticmethod
    def _import(path: Path, key: str) -> Any:
        return import_file(path, f"tensorplay_graph_triton_{key[:32]}")

    def clear_memory(self) -> None:
        """Forget imported functions (the disk entries stay)."""
        with self._lock:
            self._functions.clear()


_DEFAULT: Optional[KernelCache] = None


def default_cache() -> KernelCache:
    """The process-wide cache (directory from ``TPG_CACHE_DIR``)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = KernelCache()
    return _DEFAULT
