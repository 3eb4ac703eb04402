"""Shared pieces of generated TileLang programs: names, headers, tensor glue.

Nothing here imports TileLang; framework modules are reached lazily.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Sequence, Tuple

from ...errors import LoweringError

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = {"T", "tilelang", "main", "bx", "by", "bz", "i", "j", "k", "ko", "idx", "BLOCK", "numel",
             "A", "B", "C", "M", "N", "K", "acc", "batch", "A_shared", "B_shared", "C_local", "C_shared",
             "block_M", "block_N", "block_K", "sf", "sb", "sc"}
TILELANG_DTYPES = ("float16", "bfloat16", "float32", "float64")


def identifier(name: str, prefix: str = "v") -> str:
    """A safe Python identifier for a node name (validated, never copied blindly)."""
    if (not isinstance(name, str) or not _IDENT.match(name) or name in _RESERVED or name.startswith("__")
            or re.match(r"(out\d+|arg\d+_\d+)\Z", name)):
        cleaned = re.sub(r"[^A-Za-z0-9_]", "_", str(name)).strip("_") or "x"
        return f"{prefix}_{cleaned}"
    return name


def comment_line(text: str) -> str:
    """``text`` made safe for a ``#`` comment: one line, printable ASCII."""
    flat = " ".join(str(text).split())
    return "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in flat)[:160]


def header(kind: str, sources: Iterable[str]) -> str:
    lines = [f"# tensorplay_graph: generated TileLang {kind} kernel", "# source nodes:"]
    lines += [f"#   {comment_line(s)}" for s in sources] or ["#   (none)"]
    return "\n".join(lines) + "\n"


def literal(value: Any) -> str:
    """A Python scalar as program text; rejects values the generated code cannot spell."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LoweringError(f"tilelang backend: constant {value!r} is not finite; "
                                f"leave this op to the interpreter")
        return repr(value)
    raise LoweringError(f"tilelang backend: cannot inline constant {value!r} "
                        f"({type(value).__name__}); pass it as a tensor input")


def numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


# ----------------------------------------------------------------------------- tensor glue

def framework_adapter(example: Any):
    """The adapter of the framework (torch / TensorPlay) that owns tensor ``example``."""
    from ...frameworks import adapter_for, framework_of
    fw = framework_of(example)
    if fw is None:
        raise LoweringError(f"tilelang backend: expected a torch or TensorPlay tensor, got "
                            f"{type(example).__name__}")
    return adapter_for(fw)


def empty(example: Any, shape: Tuple[int, ...], dtype: str) -> Any:
    """An uninitialised tensor of the same framework and device as ``example``."""
    return framework_adapter(example).empty(shape, dtype, device=example.device)


def contiguous(t: Any) -> Any:
    return t if t.is_contiguous() else t.contiguous()
