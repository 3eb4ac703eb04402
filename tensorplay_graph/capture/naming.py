"""Names capture gives what it records: placeholders, positional arguments, state attributes."""

from __future__ import annotations

import inspect
from typing import Any, Callable, List

from ..ir.names import is_identifier, sanitize


def positional_names(function: Callable[..., Any], count: int) -> List[str]:
    """Names for the first ``count`` positional arguments of a call of ``function``."""
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        params = []
    names: List[str] = []
    for param in params:
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            names.append(param.name)
        elif param.kind is param.VAR_POSITIONAL:
            names += [f"{param.name}_{i}" for i in range(count - len(names))]
    return names[:count]


def placeholder_name(path: str) -> str:
    """The placeholder name of an input found at ``path`` (a call's argument path)."""
    return sanitize(path.strip("_") or "input")


def attribute_qualname(qualname: str) -> str:
    """``qualname`` as a path of identifier atoms in the captured module's attribute table."""
    # Submodule names need not be identifiers (nn.Sequential's "0"); the attribute
    # table is ours, so store them under identifier atoms ("0.weight" -> "_0.weight").
    return ".".join(atom if is_identifier(atom) else sanitize(atom) for atom in qualname.split("."))
