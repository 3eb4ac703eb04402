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
``cuda_graphs``     ``None`` (default): replay the whole lowered program through one
                    CUDA graph when safe (:mod:`.backends.cuda_graphs` says when, and
                    why not); ``False``: never; ``True``: also for dynamic sizes,
                    random and custom ops. Outputs behave like eager outputs
``backend_options`` ``{backend name: {option: value}}`` for ``backend.configure``
``channels_last``   ``None`` (default): conv nets on CUDA run channels_last
                    (:mod:`.passes.channels_last` says when); ``True``: whenever the
                    program has 4-d convolutions (the CPU too); ``False``: never
``shape_cache_size`` lowered programs kept per shape-generic graph (16; see
                    :mod:`tensorplay_graph.dynamic_shapes`)
==================  ===============================================================

Dynamo's symbolic graphs (``dynamic=True``, automatic dynamic) are imported
without specializing a size, so Dynamo keeps one graph for every length; our
runner lowers them per concrete signature (:mod:`tensorplay_graph.dynamic_shapes`).

Autograd: ``torch.compile`` graphs that need grad go through AOTAutograd
(:mod:`tensorplay_graph.training`): the forward and the backward graph are both
lowered. Our own capture (``compile``, ``tp.compile``) builds the backward graph in our
IR from the prims' VJP rules (:mod:`tensorplay_graph.training.step`); a program it
cannot differentiate runs through eager autograd (:mod:`tensorplay_graph.autograd_regions`).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .autograd_regions import GraphRunner, graph_constants
from .capture.structure import call_key
from .compiled import CompiledFunction, Specialization
from .eager_dispatch import eager_program, no_grad_program
from .frameworks import adapter_for, device_type, framework_of, is_tensor, loaded
from .library.registry import keep_opaque_to_dynamo
from .options import check_backend_names, check_options
from .progress import progress
from .ir.graph_module import copy_graph_module, get_attr_path  # noqa: F401 (re-exported)

logger = logging.getLogger("tensorplay_graph.compile")

AUTO = "auto"
BackendSpec = Union[str, Sequence[str]]


def compile(fn_or_module: Optional[Callable[..., Any]] = None, *, backend: BackendSpec = AUTO,
            options: Optional[Dict[str, Any]] = None, dynamic: Optional[bool] = None,
            fullgraph: bool = False) -> Any:
    """Compile a TensorPlay or torch function / module; capture happens on the first call.

    ``backend`` is ``"auto"`` (see :func:`choose_backends`), ``"interpreter"``
    (captured graph, eager dispatch), a backend name, or a list of names in
    preference order; ``options`` is described in this module's docstring.
    Each new input signature is a new specialization (see ``CompiledFunction``);
    ``dynamic=True`` compiles new sizes lazily without counting them against the
    recompile limit (``None``: automatically after the first size change;
    ``False``: never). A program that reads tensor data into Python control flow
    is handed to the framework's own frontend (Dynamo / ``tp.compile``) with this
    backend; ``fullgraph=True`` raises the capture error instead.

    Also a decorator: ``@tpg.compile`` or ``@tpg.compile(backend="reference")``.
    """
    options = check_options(options)
    backends = _requested_backends(backend, options)
    if fn_or_module is None:
        return lambda fn: compile(fn, backend=backend, options=options, dynamic=dynamic,
                                  fullgraph=fullgraph)
    if not callable(fn_or_module):
        raise TypeError(f"compile() takes a function or module, got "
                        f"{type(fn_or_module).__name__}")

    def build(fn: Any, args: tuple, kwargs: Dict[str, Any]) -> Specialization:
        from .ir import GraphModule
        if isinstance(fn, GraphModule):
            if kwargs:
                raise TypeError("a compiled GraphModule takes its inputs positionally")
            runner = build_runner(copy_graph_module(fn), args, backends=backends, options=options)
            return Specialization(runner, flat=False)
        from .capture import capture_program
        with progress(f"capturing {getattr(fn, '__name__', type(fn).__name__)}") as step:
            captured = capture_program(_with_signature(fn, len(args)), args, kwargs)
            step.detail = f"{len(captured.graph_module.graph)} nodes"
        leaves: list = []
        call_key(args, kwargs, leaves)
        runner = build_runner(captured.graph_module, leaves, backends=backends, options=options)
        return Specialization(runner, captured.guards, captured.output_spec)

    def graph_break(fn: Any, error: Exception, symbolic: bool = False) -> Any:
        return framework_frontend(fn, error, backends, options, True if symbolic else dynamic)

    return CompiledFunction(fn_or_module, build, options, fullgraph=fullgraph, dynamic=dynamic,
                            graph_break=graph_break)


def framework_frontend(fn: Any, error: Exception, backends: BackendSpec,
                       options: Dict[str, Any], dynamic: Optional[bool]) -> Tuple[str, Any]:
    """``(frontend name, fn compiled by its framework's own compiler with our backend)``.

    For a program our capture cannot take whole: Dynamo splits a torch program at
    data-dependent Python (graph breaks), ``tp.compile`` runs TensorPlay's.
    """
    framework = getattr(error, "framework", None) or _framework_of_program(fn)
    options = dict(options)
    if backends != AUTO:
        options.setdefault("backends", list(backends))
    frontends = {"torch": ("dynamo", _torch_backend), "tensorplay": ("tensorplay", tensorplay_backend)}
    if framework not in frontends:
        raise error
    frontend, backend = frontends[framework]
    compiled = adapter_for(framework).compile(fn, backend, options, dynamic)
    keep_opaque_to_dynamo()  # Dynamo is loaded now and has not traced yet
    return frontend, compiled


def _framework_of_program(fn: Any) -> Optional[str]:
    """The framework of the module (or the module a bound method belongs to) being compiled."""
    owner = getattr(fn, "__self__", fn)
    for name in loaded():
        if isinstance(owner, adapter_for(name).module_type()):
            return name
    return None


def _with_signature(fn: Any, arity: int) -> Any:
    """``fn`` itself, or -- for builtins without a Python signature (``torch.sigmoid``) -- a
    wrapper taking the ``arity`` positional arguments of this call, so capture can name them."""
    try:
        inspect.signature(getattr(fn, "forward", fn))
        return fn
    except (TypeError, ValueError):
        pass

    def call(*args: Any) -> Any:
        return fn(*args)

    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(arity)])
    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "builtin")
    return call


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
    from .backends.registry import PREFERENCE, try_resolve_backends
    usable, _missing = try_resolve_backends(PREFERENCE)
    return [b.name for b in usable if device in getattr(b, "profitable_devices", ())]


def build_runner(gm: Any, example_inputs: Sequence[Any], *, backends: BackendSpec = AUTO,
                 options: Optional[Dict[str, Any]] = None,
                 shape_generic: Optional[bool] = None, graph_pool: Any = None) -> GraphRunner:
    """A :class:`GraphRunner` for a captured/imported GraphModule.

    Lowering is deferred to the first call that does not need autograd; its
    inputs stand in as example inputs for the pipeline. ``shape_generic``
    (default: whether ``gm`` records symbolic sizes) lowers a copy of ``gm`` per
    concrete input signature instead of once (:mod:`.dynamic_shapes`). ``graph_pool``: the
    CUDA-graph memory pool it shares with other programs (:mod:`.backends.cuda_graph_pool`).
    """
    from .dynamic_shapes import DEFAULT_SHAPE_CACHE, ShapeSpecializingProgram, is_symbolic_graph
    from .dynamic_shapes import specialize
    options = check_options(options)
    requested_explicitly = backends != AUTO
    if "gemm" not in options:  # named backends compile what they name; "auto" picks per GEMM
        from .backends.gemm_choice import DEFAULT_POLICY
        options["gemm"] = "tilelang" if requested_explicitly else DEFAULT_POLICY
    if backends == AUTO:
        backends = choose_backends(_device_of(example_inputs))
    names = [b for b in backends if b != "interpreter"]
    explicit = list(names)
    if not names and not options.get("debug_dir") and options.get("channels_last") is not True:
        logger.debug("no backend chosen: the captured graph runs through eager dispatch")
        framework = _framework_of(example_inputs)
        eager = eager_program(gm, framework)
        return GraphRunner(gm, None, graph_constants(gm), eager=eager,
                           no_grad=no_grad_program(eager, framework))

    if shape_generic is None:
        shape_generic = is_symbolic_graph(gm)
    if not shape_generic:
        def lower(args: tuple) -> Callable[..., Any]:
            return _warn_if_unclaimed(lower_graph(copy_graph_module(gm), args, names, options,
                                                  graph_pool=graph_pool),
                                      explicit if requested_explicitly else [])

        def train(args: tuple) -> Any:
            from .training.step import build_training
            return build_training(gm, args, names, options)
        return GraphRunner(gm, lower, graph_constants(gm), train=train)

    def lower_for(args: tuple) -> Callable[..., Any]:
        return lower_graph(specialize(copy_graph_module(gm), args), args, names, options,
                           dynamic=True)

    limit = options.get("shape_cache_size", DEFAULT_SHAPE_CACHE)
    return GraphRunner(gm, lambda args: ShapeSpecializingProgram(lower_for, limit),
                       graph_constants(gm))


def lower_graph(gm: Any, example_inputs: Sequence[Any], backends: Sequence[str],
                options: Dict[str, Any], dynamic: bool = False,
                graph_pool: Any = None) -> Callable[..., Any]:
    """Run the pass pipeline (normalize ... cleanup) and return the executable module
    (replayed through CUDA graphs where :func:`.backends.cuda_graphs.decide` finds it safe,
    captured into ``graph_pool`` when given; ``dynamic``: one of many sizes of a
    shape-generic program)."""
    from .passes.pipeline import PLANNING_PASSES, compile_graph
    backend_options = {name: dict(opts) for name, opts in options.get("backend_options", {}).items()}
    if "gemm" in options:
        backend_options.setdefault("tilelang", {}).setdefault("gemm", options["gemm"])
    managers: list = []
    module = compile_graph(gm, tuple(example_inputs), backends=list(backends),
                           debug_dir=options.get("debug_dir"), backend_options=backend_options,
                           manager_out=managers, layout=options.get("channels_last"))
    timings = managers[0].timings
    planned = [name for name in PLANNING_PASSES if name in timings]
    logger.info("planning (%s): %.2f s", ", ".join(planned), sum(timings[n] for n in planned))
    from .backends.aligned_gemm import rewrite_misaligned_gemms
    # A training step's weights change every step, so a cached padded copy would be made
    # again each step anyway, and held outside the step's shared graph pool: pad per call.
    module = rewrite_misaligned_gemms(module, cache_weights=graph_pool is None)
    # When safe, the whole lowered program is captured, so one call is one graph replay.
    from .backends.cuda_graphs import wrap
    from .backends.gemm_choice import module_choices
    choices = module_choices(module)
    module = wrap(module, example_inputs, options.get("cuda_graphs"), dynamic=dynamic,
                  pool=graph_pool)
    if choices:
        try:
            module.gemm_choices = choices  # for CompiledFunction.explain()
        except AttributeError:
            pass
    return module


def _warn_if_unclaimed(module: Any, requested: Sequence[str]) -> Any:
    """WARNING when backends the user asked for by name claimed none of the program's ops
    (e.g. ``backend="triton"`` on CPU tensors): everything then runs eagerly."""
    nodes = list(getattr(module, "graph", None).nodes) if hasattr(module, "graph") else []
    if requested and nodes and not any("kernel" in n.meta for n in nodes) and any(
            n.op == "call_function" for n in nodes):
        logger.warning("backend %s claimed no op of this program: it runs through eager "
                       "dispatch; tensorplay_graph.explain(fn, *inputs, backend=%r) says why",
                       " / ".join(repr(b) for b in requested), list(requested))
    return module


def graph_module_of(fn: Any, example_inputs: Sequence[Any]) -> Any:
    """``fn`` captured on ``example_inputs``; a GraphModule is used as is (a copy of it:
    later edits of the caller's module do not reach the compiled program)."""
    from .ir import GraphModule
    if isinstance(fn, GraphModule):
        return copy_graph_module(fn)
    from .capture import capture
    return capture(fn, *example_inputs)


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
    options = check_options(options)
    # tp.compile(dynamic=True) calls one graph with every size: lower it per concrete shape.
    runner = build_runner(import_tensorplay_graph(gm), example_inputs,
                          backends=_requested_backends(AUTO, options), options=options,
                          shape_generic=bool(framework_kwargs.get("dynamic")) or None)
    names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    return _ArgumentBinder(runner, [str(n) for n in names], placeholder_defaults(gm))


def _torch_backend(gm: Any, example_inputs: Sequence[Any], *,
                  options: Optional[Dict[str, Any]] = None, **framework_kwargs: Any
                  ) -> Callable[..., Any]:
    """``torch.compile(fn, backend="tensorplay_graph", options={...})``.

    Receives Dynamo's ``torch.fx.GraphModule``; returns a callable over the
    flat placeholder list, as Dynamo calls it.
    """
    from .capture.importers import import_fx_graph
    from .training import aot_backend, needs_autograd
    options = check_options(options)
    backends = _requested_backends(AUTO, options)
    if needs_autograd(gm, example_inputs):
        # Dynamo guards on grad mode and requires_grad: a later no_grad call recompiles
        # and takes the inference path below.
        return aot_backend(gm, example_inputs, backends, options)
    return build_runner(import_fx_graph(gm), example_inputs, backends=backends, options=options)


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
        check_backend_names(chosen)
        return AUTO if chosen == AUTO else [chosen]
    if not isinstance(chosen, (list, tuple)) or not all(isinstance(b, str) for b in chosen):
        raise TypeError(f"backend must be 'auto', a backend name or a list of names, "
                        f"got {chosen!r}")
    check_backend_names(chosen)
    return list(chosen)


def _framework_of(values: Sequence[Any]) -> Optional[str]:
    for value in values:
        if is_tensor(value):
            return framework_of(value)
    return None


def _device_of(values: Sequence[Any]) -> str:
    for value in values:
        if is_tensor(value):
            return device_type(value) or "cpu"
    return "cpu"


def _cuda_available() -> bool:
    return adapter_for("torch").cuda_available()


keep_opaque_to_dynamo()


def __getattr__(name: str) -> Any:
    """``torch_backend`` (our Dynamo entry point), served on each lookup: Dynamo resolves it
    before it traces, the moment to mark ops defined before Dynamo loaded ``allow_in_graph``."""
    if name == "torch_backend":
        keep_opaque_to_dynamo()
        return _torch_backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
