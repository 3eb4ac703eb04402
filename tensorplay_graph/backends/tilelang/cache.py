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
import json
import logging
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional

from ...errors import LoweringError
from .. import source_files
from ..source_files import cache_root

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
_MODULES: Dict[str, Any] = {}


_PRIVATE: Dict[str, Path] = {}


def configured_cache_dir() -> Path:
    """The configured directory for generated sources (see the module docstring)."""
    if os.environ.get("TILELANG_CACHE_DIR"):
        return Path(os.environ["TILELANG_CACHE_DIR"]) / "tensorplay_graph"
    return cache_root() / "tilelang"


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".probe_")
        os.close(fd)
        os.unlink(probe)
        return True
    except OSError:
        return False


def cache_dir() -> Path:
    """The configured directory if it is writable, else a private temporary one (WARNING once)."""
    configured = configured_cache_dir()
    key = str(configured)
    if key in _PRIVATE:
        return _PRIVATE[key]
    if _writable(configured):
        return configured
    with _LOCK:
        if key not in _PRIVATE:
            _PRIVATE[key] = Path(tempfile.mkdtemp(prefix="tpg_tilelang_"))
            log.warning("tilelang cache directory %s is not writable; using the private "
                        "temporary cache %s for this process (fix: make it writable or set "
                        "TILELANG_CACHE_DIR)", configured, _PRIVATE[key])
    return _PRIVATE[key]


def load_tilelang() -> Any:
    """``import tilelang``, with its INFO lines ("TileLang begins to compile kernel ...") kept
    out of the user's output unless ``TPG_LOGS=+compile`` (or DEBUG on
    ``tensorplay_graph.compile``) asks for them. TileLang installs its own handler at INFO."""
    import tilelang
    global _QUIETED
    if not _QUIETED:
        _QUIETED = True
        if not logging.getLogger("tensorplay_graph.compile").isEnabledFor(logging.DEBUG):
            logging.getLogger("tilelang").setLevel(logging.WARNING)
    return tilelang


_QUIETED = False


def tilelang_version() -> str:
    """The installed TileLang's version, from its metadata: a cache key must not cost an
    ``import tilelang`` (seconds), or a warm start pays it for kernels it never builds."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("tilelang")
    except (ImportError, PackageNotFoundError, ValueError):
        return load_tilelang().__version__


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


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verified(lib: Path, record: Path, source_digest: str) -> bool:
    """True when ``lib`` is the library its record describes, built from this source."""
    try:
        meta = json.loads(record.read_text())
        return (meta.get("source_sha256") == source_digest and lib.stat().st_size == meta.get("size")
                and _sha256_file(lib) == meta.get("so_sha256"))
    except (OSError, ValueError, AttributeError):
        return False


def build_shared_library(c_source: str, key: str, include_dirs: List[str], flags: List[str],
                         compiler: Optional[str] = None) -> Path:
    """Build ``c_source`` into ``<cache>/tl_<key>.so`` with ``compiler`` (default: ``$CXX``, else
    g++), cached.

    A cached library is used only if its record ``tl_<key>.so.json`` names this C
    source's digest and the file's own sha256 and size: a truncated, empty or foreign
    file (dlopen of a truncated library can kill the process with SIGBUS) is rebuilt.
    """
    directory = cache_dir()
    lib, record = directory / f"tl_{key}.so", directory / f"tl_{key}.so.json"
    compiler = compiler or os.environ.get("CXX", "g++")
    source_digest = hashlib.sha256(("\0".join([c_source, compiler, *flags])).encode()).hexdigest()
    if lib.exists() and _verified(lib, record, source_digest):
        return lib
    if lib.exists():
        log.warning("tilelang cache entry %s does not match its checksum record; rebuilding", lib)
    src = write_atomic(directory / f"tl_{key}.cc", c_source)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp_", suffix=".so")
    os.close(fd)
    cmd = [compiler, "-shared", "-fPIC", *flags, *(f"-I{d}" for d in include_dirs), "-o", tmp, str(src)]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise LoweringError(f"tilelang backend: building the C kernel {src} failed "
                                f"({' '.join(cmd)}):\n{result.stderr[-3000:]}\n"
                                f"fix: set CXX (CC for plain C kernels) to a working compiler")
        meta = {"source_sha256": source_digest, "so_sha256": _sha256_file(Path(tmp)),
                "size": os.path.getsize(tmp)}
        os.replace(tmp, lib)  # a rename: a process that mapped the old file keeps it intact
        source_files.write_atomic(record, json.dumps(meta))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib
