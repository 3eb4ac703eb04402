"""Where generated TileLang programs and built libraries live.

TileLang's ``T.prim_func`` reads its function's source with ``inspect``, so
every generated program is written to a real ``.py`` file and imported from
there. Files are named by a digest of the source, the shapes/dtypes it was
specialised for, the TileLang version and the target; writes are atomic
(temporary file + rename), so concurrent processes never see half a file.

The directory is ``$TILELANG_CACHE_DIR/tensorplay_graph`` (TileLang keeps its
own compiled kernels in ``$TILELANG_CACHE_DIR``), else
``$TPG_CACHE_DIR/tilelang``, else ``~/.cache/tensorplay_graph/tilelang``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, List

from ...errors import LoweringError
from .. import source_files
from ..source_files import cache_root

_LOCK = threading.Lock()
_MODULES: Dict[str, Any] = {}


def cache_dir() -> Path:
    """The directory for generated sources (see the module docstring)."""
    if os.environ.get("TILELANG_CACHE_DIR"):
        return Path(os.environ["TILELANG_CACHE_DIR"]) / "tensorplay_graph"
    return cache_root() / "tilelang"


def tilelang_version() -> str:
    import tilelang
    return tilelang.__version__


def write_atomic(path: Path, data: str) -> Path:
    """Write ``data`` to ``path`` unless an identical file is already there."""
    try:
        if path.read_text() == data:
            return path
    except (OSError, UnicodeDecodeError):
        pass
    return source_files.write_atomic(path, data)


def digest(source: str, *parts: Any) -> str:
    """A 32-hex-digit digest of the source and ``parts`` (shapes, dtypes, version, target)."""
    return source_files.digest(source, *parts)[:32]


def load_program(source: str, key: str) -> Any:
    """Import generated TileLang ``source`` from ``<cache>/tl_<key>.py`` (memoised)."""
    with _LOCK:
        module = _MODULES.get(key)
        if module is not None:
            return module
        path = write_atomic(cache_dir() / f"tl_{key}.py", source)
        module = source_files.import_file(path, f"tensorplay_graph_tilelang_{key}")
        _MODULES[key] = module
        return module


def build_shared_library(c_source: str, key: str, include_dirs: List[str], flags: List[str]) -> Path:
    """Build ``c_source`` into ``<cache>/tl_<key>.so`` with the host C++ compiler (cached)."""
    directory = cache_dir()
    lib = directory / f"tl_{key}.so"
    if lib.exists():
        return lib
    src = write_atomic(directory / f"tl_{key}.cc", c_source)
    compiler = os.environ.get("CXX", "g++")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp_", suffix=".so")
    os.close(fd)
    cmd = [compiler, "-shared", "-fPIC", *flags, *(f"-I{d}" for d in include_dirs), "-o", tmp, str(src)]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise LoweringError(f"tilelang backend: building the C kernel {src} failed "
                                f"({' '.join(cmd)}):\n{result.stderr[-3000:]}\n"
                                f"fix: set CXX to a working C++17 compiler")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib
