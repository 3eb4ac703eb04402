"""Generated kernel sources as real files: the part of caching every backend shares.

Triton's ``@triton.jit`` and TileLang's ``T.prim_func`` read their function's
source with ``inspect``, so generated programs are written to ``.py`` files and
imported from there. Names are content digests; writes go to a temporary file
in the same directory and are renamed into place, so a concurrent reader never
sees half a file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any


def cache_root() -> Path:
    """``$TPG_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorplay_graph`` (``~/.cache`` by default)."""
    if os.environ.get("TPG_CACHE_DIR"):
        return Path(os.environ["TPG_CACHE_DIR"])
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(user_cache) / "tensorplay_graph"


def digest(text: str, *parts: Any) -> str:
    """sha256 of ``text`` and the reprs of ``parts`` (shapes, dtypes, versions, target)."""
    h = hashlib.sha256(text.encode())
    for part in parts:
        h.update(b"\0" + repr(part).encode())
    return h.hexdigest()


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def import_file(path: Path, module_name: str) -> ModuleType:
    """Import ``path`` as ``module_name`` (reused if already imported)."""
    module = sys.modules.get(module_name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    # Registered before exec: inspect finds a function's source through its module.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
