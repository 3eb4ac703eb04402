"""The pass pipeline, in order, in one place.

=============  ===========================================================
normalize      framework calls -> ``meta["prim"]`` / ``meta["prim_args"]``
shape_prop     ``meta["tensor_meta"]`` on every tensor value (keeps capture's
               metas; runs only nodes no meta rule covers -- the one pass that
               reads the example inputs' values)
decompose      eval-mode dropout removed; inference batch norm -> per-channel
               scale / shift (``batch_norm_channels``)
functionalize  in-place ops on program-local tensors -> out-of-place prims
channels_last  conv nets: convolutions and the work between them in NHWC
               (``meta["layout"]`` on the output node says whether and why)
barriers       ``meta["barrier"]`` on nodes that may not join a region
partition      ``meta["region"]`` / ``meta["backend"]`` / ``meta["declined"]``; a
               Triton region then computes again the cheap values it would read
               from another (``recompute.py``)
lower          each region -> one call to its compiled ``Kernel``
cleanup        CSE + DCE (effects kept)
=============  ===========================================================

>>> gm = compile_graph(capture(fn, x), (x,), backends=["reference"])   # doctest: +SKIP
>>> gm(x)                                                              # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .barriers import barriers
from .channels_last import channels_last
from .cleanup import cleanup
from .decompose import decompose
from .functionalize import functionalize
from .lower import lower
from .manager import PassManager
from .normalize import normalize
from .partition import partition
from .shape_prop import shape_prop

__all__ = ["PASS_NAMES", "PLANNING_PASSES", "build_passes", "compile_graph", "plan_graph"]

PASS_NAMES = ("normalize", "shape_prop", "decompose", "functionalize", "channels_last", "barriers",
              "partition", "lower", "cleanup")
#: The passes that decide without compiling anything (``plan_graph`` and ``explain`` run
#: exactly these, from :func:`build_passes`).
PLANNING_PASSES = PASS_NAMES[:PASS_NAMES.index("partition") + 1]


def _configure(backends: Sequence, backend_options: Optional[Dict[str, Dict[str, Any]]]) -> List:
    """Resolve backend names; apply ``backend_options[name]`` through ``backend.configure``."""
    from ..backends.registry import resolve_backends

    resolved = []
    for backend in resolve_backends(backends):
        options = (backend_options or {}).get(backend.name)
        configure = getattr(backend, "configure", None)
        if options and callable(configure):
            backend = configure(**options) or backend
        resolved.append(backend)
    return resolved


def build_passes(example_inputs: Tuple[Any, ...] = (), backends: Sequence = ("reference",),
                 *, upto: Optional[str] = None,
                 backend_options: Optional[Dict[str, Dict[str, Any]]] = None,
                 layout: Optional[bool] = None) -> List[Tuple[str, Any]]:
    """``(name, fn(gm))`` pairs of the pipeline, optionally stopping after pass ``upto``.

    ``layout`` is the ``channels_last`` option (None: decided per graph; True / False).

    ``backends`` are names or backend objects in preference order; they are resolved
    (and configured) once, so ``barriers`` and ``partition`` ask the same objects and
    ``partition`` reuses the verdicts ``barriers`` cached (one ``supports`` call per node
    and backend).
    """
    resolved = _configure(backends, backend_options)
    table = {
        "normalize": normalize,
        "shape_prop": lambda gm: shape_prop(gm, *example_inputs),
        "decompose": decompose,
        "functionalize": functionalize,
        "channels_last": lambda gm: channels_last(gm, layout),
        "barriers": lambda gm: barriers(gm, resolved),
        "partition": lambda gm: (partition(gm, resolved), gm)[1],
        "lower": lambda gm: lower(gm, backends=resolved),
        "cleanup": cleanup,
    }
    if upto is not None and upto not in table:
        raise ValueError(f"unknown pass {upto!r}; the pipeline is {', '.join(PASS_NAMES)}")
    names = PASS_NAMES if upto is None else PASS_NAMES[:PASS_NAMES.index(upto) + 1]
    return [(name, table[name]) for name in names]


def compile_graph(gm, example_inputs: Tuple[Any, ...] = (), *, backends: Sequence = ("reference",),
                  debug_dir: Optional[str] = None, lint: Optional[bool] = None,
                  backend_options: Optional[Dict[str, Dict[str, Any]]] = None,
                  manager_out: Optional[list] = None, layout: Optional[bool] = None):
    """Run the whole pipeline over ``gm`` (edited in place) and return the executable module.

    ``lint`` ``None``: lint after every pass in debug / test mode only (``TPG_LINT=1``
    or a ``debug_dir``). ``manager_out``, when a list, receives the ``PassManager``
    (for its timings).
    """
    manager = PassManager(build_passes(tuple(example_inputs), backends,
                                       backend_options=backend_options, layout=layout),
                          lint=lint, debug_dir=debug_dir)
    if manager_out is not None:
        manager_out.append(manager)
    return manager(gm)


def plan_graph(gm, example_inputs: Tuple[Any, ...] = (), *, backends: Sequence = ("reference",),
               debug_dir: Optional[str] = None, lint: Optional[bool] = None):
    """Run the planning passes only (:data:`PLANNING_PASSES`): nothing is compiled."""
    manager = PassManager(build_passes(tuple(example_inputs), backends, upto=PLANNING_PASSES[-1]),
                          lint=lint, debug_dir=debug_dir)
    return manager(gm), manager
