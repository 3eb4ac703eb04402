"""Long compile steps say what they did: one INFO line with the duration on the ``compile``
log channel, and a progress bar in a terminal for steps of several items.

>>> with progress("building kernels", total=len(regions)) as step:   # doctest: +SKIP
...     for region in regions:
...         build(region)
...         step()                      # one item done (thread-safe)
...     step.detail = "2 from the cache"   # optional: added to the INFO line
>>> for region in tracked(regions, "building kernels"):                # doctest: +SKIP
...     build(region)                   # the same around a plain loop

logs ``building kernels (3/3; 2 from the cache): 1.42 s`` on ``tensorplay_graph.compile``
(``TPG_LOGS=compile`` shows it). Without ``total`` it only times the step. The bar (tqdm, on
stderr) shows when stderr is a terminal and the step has at least :data:`MIN_BAR_TOTAL`
items; ``TPG_PROGRESS=0`` turns bars off, ``TPG_PROGRESS=1`` forces them.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Optional, TypeVar

__all__ = ["progress", "tracked", "Step", "bar_enabled", "MIN_BAR_TOTAL"]

logger = logging.getLogger("tensorplay_graph.compile")
T = TypeVar("T")

#: steps with fewer items get no bar (one kernel is over before a bar would help)
MIN_BAR_TOTAL = 2


class Step:
    """The callable a :func:`progress` block gets: ``step()`` / ``step(n)`` marks items done."""

    def __init__(self, bar: Any = None) -> None:
        self.done = 0
        #: extra words for the INFO line (e.g. how many came from a cache)
        self.detail: Optional[str] = None
        self._bar = bar
        self._lock = threading.Lock()

    def __call__(self, n: int = 1) -> None:
        with self._lock:  # parallel builds call this from worker threads
            self.done += n
            if self._bar is not None:
                self._bar.update(n)


def bar_enabled(total: Optional[int], stream: Any = None) -> bool:
    """Whether a step of ``total`` items gets a bar on ``stream`` (default ``sys.stderr``)."""
    setting = os.environ.get("TPG_PROGRESS", "").strip()
    if setting == "0" or total is None or total < MIN_BAR_TOTAL:
        return False
    if setting == "1":
        return True
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed stream
        return False


def _bar(description: str, total: int, unit: str) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # a declared dependency, but a bar is never worth failing a compile
        logger.debug("no progress bar: tqdm is not installed")
        return None
    return tqdm(total=total, desc=description, unit=unit, leave=False, file=sys.stderr,
                dynamic_ncols=True)


@contextmanager
def progress(description: str, total: Optional[int] = None, *, unit: str = "kernel"
             ) -> Iterator[Step]:
    """Time a compile step (INFO line on the ``compile`` channel); a bar for ``total`` items."""
    start = time.perf_counter()
    bar = _bar(description, total, unit) if bar_enabled(total) else None
    step = Step(bar)
    failed = False
    try:
        yield step
    except GeneratorExit:  # a tracked() loop left early
        raise
    except BaseException:
        failed = True
        raise
    finally:
        if bar is not None:
            bar.close()
        parts = [f"{step.done}/{total}"] if total is not None else []
        parts += [step.detail] if step.detail else []
        parts += ["failed"] if failed else []
        logger.info("%s%s: %.2f s", description, f" ({'; '.join(parts)})" if parts else "",
                    time.perf_counter() - start)


def tracked(items: Iterable[T], description: str, *, unit: str = "kernel") -> Iterator[T]:
    """``for item in tracked(items, "building kernels"):``: :func:`progress` around a loop,
    one step per item (an item the body ``continue``-s past counts as done)."""
    items = list(items)
    with progress(description, total=len(items), unit=unit) as step:
        for item in items:
            yield item
            step()
