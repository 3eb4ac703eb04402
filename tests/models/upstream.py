"""Zoo cells that cannot work because of an upstream limitation: strict xfails, each naming it.

A cell that fails because of tensorplay_graph is NOT listed here: it stays a failing test.
Keys are (model, entry, mode, backend); ``None`` matches any value.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import pytest

Key = Tuple[str, Optional[str], Optional[str], Optional[str]]

UPSTREAM: Dict[Key, str] = {}


def marks(model: str, entry: str, mode: str, backend: str) -> List[pytest.MarkDecorator]:
    """``[xfail(strict=True, reason=...)]`` for an upstream-limited cell, else ``[]``."""
    for (m, e, mo, b), reason in UPSTREAM.items():
        if m == model and e in (None, entry) and mo in (None, mode) and b in (None, backend):
            return [pytest.mark.xfail(strict=True, reason=reason)]
    return []
