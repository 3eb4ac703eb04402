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

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, List

from ...errors import LoweringError

_LOCK = threading.Lock()
_MODULES: Dict[str, Any] = {}


def cache_dir() -> Path:
    """The directory for generated sources (see the module docstring)."""
    if os.environ.get("TILELANG_CACHE_DIR"):
        return Path(os.environ["TILELANG_CACHE_DIR"]) / "tensorplay_graph"
    root = os.environ.get("TPG_CACHE_DIR") or os.path.join(Path.home(), ".cache", "tensorplay_graph")
    return Path(root) / "tilelang"


def tilelang_version() -> str:
    import tilelang
    return tilelang.__version__


def digest(source: str, *parts: Any) -> str:
    """sha256 over the source and the reprs of ``parts`` (shapes, dtypes, version, target)."""
    h = hashlib.sha256(source.encode())
    for part in parts:
        h.update(b"\0" + repr(part).encode())
    return h.hexdigest()[:32]


def write_atomic(path: Path, data: str) -> Path:
    """Write ``data`` to ``path`` unless an identical file is already there."""
    try:
        if path.read_text() == data:
            return path
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_program(source: str, key: str) -> Any:
    """Import generated TileLang ``source`` from ``<cache>/tl_<key>.py`` (memoised)."""
    with _LOCK:
        module = _MODULES.get(key)
        if module is not None:
            return module
        path = write_atomic(cache_dir() / f"tl_{key}.py", source)
        name = f"tensorplay_graph_tilelang_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before exec: inspect looks the module up by name
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
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
