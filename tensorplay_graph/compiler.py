"""``compile()`` and the backends for TensorPlay's and torch's own compilers.

>>> import tensorplay as tp, tensorplay_graph as tpg
>>> f = tpg.compile(lambda x: (x * 2).relu())
>>> f(tp.randn(4, 8))                                             # doctest: +SKIP
>>> g = tp.compile(fn, backend="tensorplay_graph", options={"backends": ["reference"]})
>>> h = torch.compile(fn, backend="tensorplay_graph")             # doctest: +SKIP

The two framework backends are found through the entry-point groups
``tensorplay_compiler_backends`` and ``torch_dynamo_backends`` declared in
``pyproject.toml``; the framework captures the program, we import its graph
(custom-op nodes stay single barrier nodes), lower it, and return a callable.

Options (one dict, shared by all three entry points):

==================  ===============================================================
``backends``        backend names in preference order (overrides ``backend=``)
``recompile_limit`` specializations per compiled function before erroring (8)
``fallback``        ``"eager"``: past the limit / on capture or lowering failure,
                    log a WARNING and run eagerly instead of raising
``debug_dir``       directory for per-pass graph dumps (given to the PassManager)
``cuda_graphs``     replay the whole lowered program through CUDA graphs (Triton
                    backend's ``CudaGraphRunner``; CUDA inputs only). Outputs are
                    static buffers overwritten by the next call, as in Inductor
``backend_options`` ``{backend name: {option: value}}`` for ``backend.configure``
==================  ===============================================================

Autograd: see :mod:`tensorplay_graph.autograd_regions` -- when grad is needed
the captured graph runs through eager dispatch, so gradients equal eager.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from .autograd_regions import GraphRunner, graph_constants
from .compiled import CompiledFunction
from .frameworks import device_type, is_tensor
from .library.registry import keep_opaque_to_dynamo

logger = logging.getLogger("tensorplay_graph.compile")

AUTO = "auto"
#: Backends ``"auto"`` considers, in preference order.
AUTO_CANDIDATES = ("triton", "tilelang", "reference")
BackendSpec = Union[str, Sequence[str]]


def compile(fn_or_module: Callable[..., Any], *, backend: BackendSpec = AUTO,
            options: Optional[Dict[str, Any]] = None, dynamic: bool = False) -> CompiledFunction:
    """Compile a TensorPlay or torch function / module; capture happens on the first call.

    ``backend`` is ``"auto"`` (see :func:`choose_backends`), ``"interpreter"``
    (captured graph, eager dispatch), a backend name, or a list of names in
    preference order; ``options`` is described in this module's docstring.
    Each new input signature is a new specialization (see ``CompiledFunction``).
    """
    if dynamic:
        raise NotImplementedError(
            "tensorplay_graph.compile(dynamic=True) is not supported: kernels are specialized "
            "to static shapes; use dynamic=False (each new shape recompiles, with a limit)")
    options = dict(options or {})
    backends = _requested_backends(backend, options)

    def build(fn: Any, args: tuple) -> GraphRunner:
        return build_runner(graph_module_of(fn, args), args, backends=backends, options=options)

    return CompiledFunction(fn_or_module, build, options)


def choose_backends(device: str) -> List[str]:
    """The ``"auto"`` policy: backends worth using on ``device``, best first.

    Why: a backend is only worth choosing where its kernels beat eager dispatch
    on that device, which each backend declares in ``profitable_devices``.
    Triton runs on the CPU only in its interpreter, far slower than eager, and
    TileLang's OpenMP C kernels lost to eager next to the framework's own thread
    pool (benchmarks/auto_cpu.py), so both declare CUDA alone: "auto" on the CPU
    is the captured graph through eager dispatch. CUDA backends need a GPU.
    An empty list means the interpreter: the captured graph runs through eager
    dispatch.
    """
    if device == "cuda" and not _cuda_available():
        return []
    from .backends.registry import try_resolve_backends
    usable, _missing = try_resolve_backends(AUTO_CANDIDATES)
    return [b.name for b in usable if device in getattr(b, "profitable_devices", ())]


def build_runner(gm: Any, example_inputs: Sequence[Any], *, backends: BackendSpec = AUTO,
                 options: Optional[Dict[str, Any]] = None) -> GraphRunner:
    """A :class:`GraphRunner` for a captured/imported GraphModule.

    Lowering is deferred to the first call that does not need autograd; its
    inputs stand in as example inputs for the pipeline.
    """
    options = dict(options or {})
    if backends == AUTO:
        backends = choose_backends(_device_of(example_inputs))
    names = [b for b in backends if b != "interpreter"]
    if not names and not options.get("debug_dir"):
        logger.debug("no backend chosen: the captured graph runs through eager dispatch")
        return GraphRunner(gm, None, graph_constants(gm))

    def lower(args: tuple) -> Callable[..., Any]:
        return lower_graph(copy_graph_module(gm), args, names, options)

    return GraphRunner(gm, lower, graph_constants(gm))


def lower_graph(gm: Any, example_inputs: Sequence[Any], backends: Sequence[str],
                options: Dict[str, Any]) -> Callable[..., Any]:
    """Run the pass pipeline (normalize ... cleanup) and return the executable module."""
    from .passes.pipeline import compile_graph
    backend_options = {name: dict(opts) for name, opts in options.get("backend_options", {}).items()}
    module = compile_graph(gm, tuple(example_inputs), backends=list(backends),
                           debug_dir=options.get("debug_dir"), backend_options=backend_options)
    if options.get("cuda_graphs"):
        # The whole lowered program is captured, so one call is one graph replay.
        from .backends.triton.launcher import cuda_graph_program
        module = cuda_graph_program(module, example_inputs)
    return module


def graph_module_of(fn: Any, example_inputs: Sequence[Any]) -> Any:
    """``fn`` captured on ``example_inputs``; a GraphModule is used as is (a copy of it:
    later edits of the caller's module do not reach the compiled program)."""
    from .ir import GraphModule
    if isinstance(fn, GraphModule):
        return copy_graph_module(fn)
    from .capture import capture
    return capture(fn, *example_inputs)


def copy_graph_module(gm: Any) -> Any:
    """A GraphModule over a copy of ``gm``'s graph (same attribute values), so passes
    can rewrite it while ``gm`` stays runnable for the eager-autograd path."""
    from .ir import Graph, GraphModule
    graph = Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    attrs = {n.target: _attr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    return GraphModule(attrs, graph) if attrs else GraphModule({}, graph)


# -- backends for the frameworks' compilers ------------------------------------------
def tensorplay_backend(gm: Any, example_inputs: Sequence[Any], *,
                       options: Optional[Dict[str, Any]] = None, **framework_kwargs: Any
                       ) -> Callable[..., Any]:
    """``tensorplay.compile(fn, backend="tensorplay_graph", options={...})``.

    Receives TensorPlay's captured ``tensorplay.graph.GraphModule``; returns a
    callable taking the user's arguments (positional or by parameter name).
    """
    if framework_kwargs.get("strict_native"):
        raise NotImplementedError(
            "backend 'tensorplay_graph' returns Python-level executables; "
            "strict_native=True needs TensorPlay's native backend (backend='stax')")
    from .capture.importers import import_tensorplay_graph, placeholder_defaults
    options = dict(options or {})
    runner = build_runner(import_tensorplay_graph(gm), example_inputs,
                          backends=_requested_backends(AUTO, options), options=options)
    names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    return _ArgumentBinder(runner, [str(n) for n in names], placeholder_defaults(gm))


def torch_backend(gm: Any, example_inputs: Sequence[Any], *,
                  options: Optional[Dict[str, Any]] = None, **framework_kwargs: Any
                  ) -> Callable[..., Any]:
    """``torch.compile(fn, backend="tensorplay_graph", options={...})``.

    Receives Dynamo's ``torch.fx.GraphModule``; returns a callable over the
    flat placeholder list, as Dynamo calls it.
    """
    from .capture.importers import import_fx_graph
    keep_opaque_to_dynamo()  # ops defined before Dynamo was loaded
    options = dict(options or {})
    return build_runner(import_fx_graph(gm), example_inputs,
                        backends=_requested_backends(AUTO, options), options=options)


class _ArgumentBinder:
    """Maps a framework's call (user args and kwargs) onto graph placeholder order."""

    def __init__(self, runner: GraphRunner, names: List[str], defaults: Dict[str, Any]) -> None:
        self.runner, self.names, self.defaults = runner, names, defaults

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs and len(args) == len(self.names):
            return self.runner(*args)
        values = list(args)
        for name in self.names[len(args):]:
            if name in kwargs:
                values.append(kwargs.pop(name))
            elif name in self.defaults:
                values.append(self.defaults[name])
            else:
                raise TypeError(f"compiled graph input {name!r} was not given; "
                                f"graph inputs are {self.names}")
        if kwargs:
            raise TypeError(f"unexpected arguments {sorted(kwargs)}; graph inputs are {self.names}")
        return self.runner(*values)


# -- helpers -------------------------------------------------------------------------------
def _requested_backends(backend: BackendSpec, options: Dict[str, Any]) -> BackendSpec:
    chosen = options.get("backends", backend)
    if isinstance(chosen, str):
        return AUTO if chosen == AUTO else [chosen]
    if not isinstance(chosen, (list, tuple)) or not all(isinstance(b, str) for b in chosen):
        raise TypeError(f"backend must be 'auto', a backend name or a list of names, "
                        f"got {chosen!r}")
    return list(chosen)


def _device_of(values: Sequence[Any]) -> str:
    for value in values:
        if is_tensor(value):
            return device_type(value) or "cpu"
    return "cpu"


def _cuda_available() -> bool:
    torch = sys.modules.get("torch")
    if torch is None and importlib.util.find_spec("torch") is None:
        return False
    import torch
    return bool(torch.cuda.is_available())


def _attr(gm: Any, qualname: str) -> Any:
    value = gm
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


keep_opaque_to_dynamo()
