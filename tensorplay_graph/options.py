"""The options of ``compile()`` and of the framework backends, checked at once.

An unknown key or backend name fails when ``compile()`` / ``explain()`` is called, not on the
first call of the compiled function, and the error suggests the closest valid name.
"""

from __future__ import annotations

import difflib
from typing import Any, Dict, Iterable, Mapping, Optional

from .errors import UnknownBackendError, UnknownOptionError

__all__ = ["OPTIONS", "check_options", "check_backend_names", "AUTO", "INTERPRETER"]

AUTO = "auto"
INTERPRETER = "interpreter"

#: option -> what it does (the one table; compiler.py's docstring points here)
OPTIONS: Dict[str, str] = {
    "backends": "backend names in preference order (overrides backend=)",
    "recompile_limit": "specializations per compiled function before erroring (8)",
    "fallback": "'eager': past the limit / on capture or lowering failure, warn and run eagerly",
    "debug_dir": "directory for a drawing of every pass and the kernel sources",
    "cuda_graphs": "None: one CUDA graph replay per call when safe; False: never; True: also "
                   "for dynamic sizes, random and custom ops",
    "backend_options": "{backend name: {option: value}} for backend.configure",
    "channels_last": "None: conv nets on CUDA run channels_last (NHWC) when it pays; True: "
                     "always when the program has 4-d convolutions; False: never",
    "shape_cache_size": "lowered programs kept per shape-generic graph (16)",
    "gemm": "per GEMM on CUDA, TileLang kernel or cuBLAS + Triton epilogue: 'auto' (default with "
            "backend='auto': cuBLAS unless a cached measurement says TileLang wins), 'measure' "
            "(race both once, cached), 'cublas', 'tilelang' (default with named backends); "
            "see backends/gemm_choice.py",
}


def _suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_options(options: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """A copy of ``options`` after checking its type and every key."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        hint = (f"; to pick a backend pass backend={options!r}" if isinstance(options, str) else "")
        raise TypeError(f"options must be a dict like {{'backends': ['triton']}}, "
                        f"got {type(options).__name__} {options!r}{hint}")
    for key in options:
        if key not in OPTIONS:
            raise UnknownOptionError(
                f"unknown option {key!r}{_suggest(str(key), OPTIONS)} "
                f"(options: {', '.join(OPTIONS)})")
    if options.get("cuda_graphs") not in (None, True, False):
        raise ValueError(f"options['cuda_graphs'] must be True, False or None (when safe), "
                         f"got {options['cuda_graphs']!r}")
    if "gemm" in options:
        from .backends.gemm_choice import check_policy
        check_policy(options["gemm"])
    if options.get("channels_last") not in (None, True, False):
        raise ValueError(f"options['channels_last'] must be True, False or None (decided per "
                         f"program), got {options['channels_last']!r}")
    return dict(options)


def check_backend_names(names: Any) -> None:
    """Raise :class:`UnknownBackendError` for a name that is no backend (``"auto"`` and
    ``"interpreter"`` included as names). A known backend whose package is missing passes:
    it is reported as unavailable where it would be used."""
    from .backends.registry import known_backend_names
    if names is None or isinstance(names, str) and names == AUTO:
        return
    for name in [names] if isinstance(names, str) else list(names):
        if not isinstance(name, str):
            if hasattr(name, "supports"):
                continue  # a Backend object
            raise TypeError(f"backend must be a name or a Backend object, got {name!r}")
        known = [AUTO, INTERPRETER, *known_backend_names()]
        if name not in known:
            raise UnknownBackendError(
                f"no backend named {name!r}{_suggest(name, known)}; known: {', '.join(known)}; "
                "register one with tensorplay_graph.backends.register_backend(...)")
