"""``PassManager``: run named passes in order, time each, lint after each, dump each stage.

>>> pm = PassManager([("normalize", normalize), ("cleanup", cleanup)])   # doctest: +SKIP
>>> gm = pm(gm); pm.timings                                             # doctest: +SKIP
{'normalize': 0.0012, 'cleanup': 0.0004}

A pass is a callable ``fn(gm) -> GraphModule | None`` (``None``: edited in
place). With ``debug_dir`` (or the ``TPG_DEBUG_DIR`` environment variable) every
stage is written as ``NN_<pass>.txt`` (the node table plus the pass meta),
``NN_<pass>.dot`` (``tensorplay_graph.drawing``) and ``NN_<pass>.svg`` when the
graphviz ``dot`` program exists; ``00_input`` is the graph before any pass.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from ..errors import GraphLintError

__all__ = ["PassManager", "describe_stage"]

log = logging.getLogger(__name__)

PassSpec = Union[Callable[..., Any], Tuple[str, Callable[..., Any]]]
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def _named(passes: Iterable[PassSpec]) -> List[Tuple[str, Callable[..., Any]]]:
    named = []
    for spec in passes:
        if isinstance(spec, tuple):
            name, fn = spec
        else:
            fn = spec
            name = getattr(fn, "__name__", None) or type(fn).__name__
        if not callable(fn):
            raise TypeError(f"pass {name!r} is not callable: {fn!r}")
        named.append((str(name), fn))
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise ValueError(f"pass names must be unique, got {names}")
    return named


class PassManager:
    """Runs ``passes`` (callables or ``(name, callable)`` pairs) in order over a GraphModule.

    * ``lint`` -- ``gm.graph.lint()`` after every pass; a failure names the pass.
      ``None`` (default): in debug / test mode only -- ``TPG_LINT=1``
      (:func:`~tensorplay_graph.ir.lint.lint_enabled`) or a ``debug_dir``.
    * ``debug_dir`` -- dump every stage there (default: ``$TPG_DEBUG_DIR``, else no dump).
    * ``timings`` -- seconds per pass name, in run order, after a call (wall clock);
      ``cpu_timings`` the same in process CPU time; ``lint_seconds`` the lints' total.
    """

    def __init__(self, passes: Iterable[PassSpec], lint: Optional[bool] = None,
                 debug_dir: Optional[Union[str, os.PathLike]] = None) -> None:
        from ..ir.lint import lint_enabled

        self.passes = _named(passes)
        env_dir = os.environ.get("TPG_DEBUG_DIR") or None
        chosen = debug_dir if debug_dir is not None else env_dir
        self.debug_dir: Optional[Path] = Path(chosen) if chosen else None
        # Lint is linear but costs about as much as a planning pass: debug / test mode only.
        self.lint = (lint_enabled() or self.debug_dir is not None) if lint is None else lint
        self.timings: Dict[str, float] = {}
        self.cpu_timings: Dict[str, float] = {}
        self.lint_seconds = 0.0

    @property
    def names(self) -> List[str]:
        return [name for name, _ in self.passes]

    def __call__(self, gm: Any) -> Any:
        # Passes allocate many long-lived objects (nodes, meta, kernels) and free few;
        # cyclic GC sweeps over them cost ~40% of the pipeline on 100k-node graphs
        # while finding nothing, so collection pauses while the passes run.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(gm)
        finally:
            if was_enabled:
                gc.enable()

    def _run(self, gm: Any) -> Any:
        self.timings, self.cpu_timings, self.lint_seconds = {}, {}, 0.0
        if self.debug_dir is not None:
            self.debug_dir.mkdir(parents=True, exist_ok=True)
            self._dump(gm, 0, "input")
        for index, (name, fn) in enumerate(self.passes, start=1):
            start, cpu_start = time.perf_counter(), time.process_time()
            try:
                result = fn(gm)
            except Exception as exc:
                if hasattr(exc, "add_note"):  # Python 3.11+: keep the type, name the pass
                    exc.add_note(f"(raised in tensorplay_graph pass {name!r})")
                raise
            self.timings[name] = time.perf_counter() - start
            self.cpu_timings[name] = time.process_time() - cpu_start
            if result is not None:
                gm = result
            if self.lint:
                start = time.perf_counter()
                self._lint(gm, name)
                self.lint_seconds += time.perf_counter() - start
            log.debug("pass %s: %.3f ms", name, self.timings[name] * 1e3)
            if self.debug_dir is not None:
                self._dump(gm, index, name)
        recompile = getattr(gm, "recompile", None)
        if callable(recompile):
            recompile()
        return gm

    def _lint(self, gm: Any, name: str) -> None:
        try:
            gm.graph.lint()
        except GraphLintError as exc:
            raise GraphLintError(f"graph is invalid after pass {name!r}: {exc}") from exc
        except Exception as exc:
            raise GraphLintError(f"graph is invalid after pass {name!r}: "
                                 f"{type(exc).__name__}: {exc}") from exc

    def _dump(self, gm: Any, index: int, name: str) -> None:
        stem = self.debug_dir / f"{index:02d}_{_SAFE_NAME.sub('_', name)}"
        stem.with_suffix(".txt").write_text(describe_stage(gm, name))
        try:
            from ..drawing import render

            drawing = render(gm)
            source = getattr(drawing, "source", None) or str(drawing)
        except Exception as exc:  # drawing is a debugging aid; never fail the pipeline
            log.warning("could not draw stage %s: %s", name, exc)
            return
        dot_path = stem.with_suffix(".dot")
        dot_path.write_text(source)
        dot_exe = shutil.which("dot")
        if dot_exe:
            done = subprocess.run([dot_exe, "-Tsvg", str(dot_path), "-o",
                                   str(stem.with_suffix(".svg"))],
                                  capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                log.warning("dot failed on %s: %s", dot_path, done.stderr.strip())


def describe_stage(gm: Any, name: str) -> str:
    """The node table of ``gm`` plus each node's barrier / region / kernel meta."""
    lines = [f"# stage: {name}", str(gm.graph), "", "# pass meta"]
    for node in gm.graph.nodes:
        notes = []
        meta = node.meta
        if meta.get("prim") is not None:
            notes.append(f"prim={meta['prim'].name}")
        if meta.get("tensor_meta") is not None:
            notes.append(f"meta={meta['tensor_meta']}")
        if meta.get("barrier") is not None:
            notes.append(f"barrier={meta['barrier']}")
        if meta.get("region") is not None:
            notes.append(f"region={meta['region']}@{meta.get('backend')}")
        if meta.get("kernel") is not None:
            notes.append(f"kernel={meta['kernel'].name}")
        if notes:
            lines.append(f"{node.name}: " + "  ".join(notes))
    return "\n".join(lines) + "\n"
