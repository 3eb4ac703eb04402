"""Attributes set for the length of a trace: the one helper the trace's watches share."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any


def patch(stack: ExitStack, owner: Any, name: str, value: Any) -> None:
    """``owner.name = value`` until ``stack`` closes, whatever fails in between; an attribute
    ``owner`` only inherited is deleted again. (``unittest.mock.patch.object`` does the same
    but cost 0.65 ms more per capture for the trace's ~26 patches: 1.97 against 1.31 ms for
    a three-op program.)"""
    if name in vars(owner):
        stack.callback(setattr, owner, name, vars(owner)[name])
    else:
        stack.callback(delattr, owner, name)
    setattr(owner, name, value)
