"""One logging switch, like ``TORCH_LOGS``: named channels over :mod:`logging`.

    TPG_LOGS=recompiles,fusion python train.py      # INFO on those channels
    TPG_LOGS=+output_code                           # DEBUG on a channel
    TPG_LOGS=all                                    # everything at INFO

>>> import tensorplay_graph.logs as logs
>>> logs.set_logs(recompiles=True, output_code=False)     # the same from Python

Each channel is an ordinary logger under ``tensorplay_graph`` (see :data:`CHANNELS`), so
``logging.getLogger("tensorplay_graph.fusion").setLevel(...)`` works too. A channel turned on
gets a stderr handler on the package logger when the application configured none.
"""

from __future__ import annotations

import difflib
import logging
import os
from typing import Dict, Optional, Union

__all__ = ["CHANNELS", "channel", "set_logs", "configure_from_env"]

#: channel name -> (logger name, what it reports)
CHANNELS: Dict[str, tuple] = {
    "compile": ("tensorplay_graph.compile", "capture / lowering steps, fallbacks to eager"),
    "recompiles": ("tensorplay_graph.recompiles", "why a compiled function recompiles"),
    "graph": ("tensorplay_graph.graph", "the captured graph of every specialization"),
    "fusion": ("tensorplay_graph.fusion", "regions formed per backend, barriers and reasons"),
    "output_code": ("tensorplay_graph.output_code", "generated kernel and wrapper sources"),
    "perf_hints": ("tensorplay_graph.perf_hints", "where a program leaves speed on the table"),
    "cache": ("tensorplay_graph.cache", "kernel cache hits, misses and rebuilds"),
}
#: channels whose records are artifacts (graphs, sources), logged at DEBUG
_ARTIFACTS = ("graph", "output_code")
_ROOT = "tensorplay_graph"
_HANDLER_FLAG = "_tpg_logs_handler"


def channel(name: str) -> logging.Logger:
    """The logger of channel ``name`` (an unknown name raises with the known ones)."""
    return logging.getLogger(CHANNELS[_check(name)][0])


def set_logs(**channels: Union[bool, int, None]) -> None:
    """Turn channels on (``True`` = INFO, or a ``logging`` level) or off (``False``/``None``)."""
    enabled = False
    for name, value in channels.items():
        logger = channel(name)
        if value is None or value is False:
            logger.setLevel(logging.NOTSET)
            continue
        default = logging.DEBUG if name in _ARTIFACTS else logging.INFO
        logger.setLevel(default if value is True else int(value))
        enabled = True
    if enabled:
        _ensure_handler()


def configure_from_env(spec: Optional[str] = None) -> None:
    """Apply ``TPG_LOGS`` (or ``spec``): comma-separated channels, ``+name`` for DEBUG, ``all``."""
    spec = os.environ.get("TPG_LOGS", "") if spec is None else spec
    levels: Dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name = item.lstrip("+")
        for each in (CHANNELS if name == "all" else [name]):
            debug = item.startswith("+") or each in _ARTIFACTS
            levels[_check(each, source="TPG_LOGS")] = logging.DEBUG if debug else logging.INFO
    if levels:
        set_logs(**levels)


def _check(name: str, source: str = "set_logs") -> str:
    if name in CHANNELS:
        return name
    close = difflib.get_close_matches(name, list(CHANNELS) + ["all"], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"{source}: unknown log channel {name!r}{hint} "
                     f"(channels: {', '.join(CHANNELS)}, all)")


def _ensure_handler() -> None:
    root = logging.getLogger(_ROOT)
    if any(getattr(h, _HANDLER_FLAG, False) for h in root.handlers):
        return
    if root.handlers or logging.getLogger().handlers:
        return  # the application configured logging; its handlers receive our records
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[tpg %(name)s] %(levelname)s %(message)s"))
    setattr(handler, _HANDLER_FLAG, True)
    root.addHandler(handler)
