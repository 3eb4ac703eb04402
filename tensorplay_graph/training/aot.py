"""Training through ``torch.compile``: AOTAutograd hands us forward AND backward graphs.

``torch_backend`` calls :func:`aot_backend` when the Dynamo graph needs
gradients (an input or parameter requires grad and grad mode is on). AOTAutograd
traces the joint forward+backward at the aten level, splits it with the
min-cut partitioner (recompute cheap pointwise ops instead of saving them, as
Inductor does) and gives each half to our compiler: import, passes, backends --
so the backward graph gets fused regions too. The pair runs inside torch's own
``autograd.Function`` (AOTAutograd's runtime), so ``.grad`` accumulation,
``retain_graph`` and ``no_grad`` behave as in eager.

* Custom ops with ``register_autograd`` stay ONE opaque node in the forward graph
  (:mod:`.torch_bridge`); their backward formula is traced into the backward graph.
* Backward aten ops (``tanh_backward``, ``native_layer_norm_backward`` ...) are
  decomposed by torch's own decompositions into ops our prims express.
* A graph AOTAutograd cannot take -- a ``triton_op`` / ``tile_lang_op`` without
  ``register_autograd``, or a trace failure -- runs through eager autograd, with
  the reason kept on its :class:`TrainingProgram` (``explain()``): never a
  silent wrong gradient.

>>> compiled = torch.compile(model, backend="tensorplay_graph")      # doctest: +SKIP
>>> compiled(x).sum().backward()                                     # doctest: +SKIP
>>> print(tpg.training.compiled_programs()[-1].explain())             # doctest: +SKIP
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..frameworks import is_tensor
from .report import TrainingProgram

logger = logging.getLogger("tensorplay_graph.compile")

_PROGRAMS: "collections.deque[TrainingProgram]" = collections.deque(maxlen=64)
_PROGRAMS_LOCK = threading.Lock()
_BUILT = 0  # programs ever recorded: the bounded list's length stops growing at 64


def compiled_programs() -> List[TrainingProgram]:
    """The training programs ``torch.compile`` built in this process, oldest first (last 64)."""
    with _PROGRAMS_LOCK:
        return list(_PROGRAMS)


def programs_built() -> int:
    """How many training programs this process has recorded so far (not bounded)."""
    return _BUILT


def programs_since(count: int) -> List[TrainingProgram]:
    """The recorded programs after the first ``count`` (those still in the bounded list)."""
    with _PROGRAMS_LOCK:
        newer = _BUILT - count
        return list(_PROGRAMS)[-newer:] if newer > 0 else []


def record_program(program: TrainingProgram, prefix: str) -> None:
    """Name ``program`` by its serial number and append it to the bounded list."""
    global _BUILT
    with _PROGRAMS_LOCK:
        program.name = f"{prefix}_{_BUILT}"
        _BUILT += 1
        _PROGRAMS.append(program)


def needs_autograd(fx_gm: Any, example_inputs: Sequence[Any]) -> bool:
    """Whether a Dynamo graph is compiled for training: grad mode on and an input or
    ``get_attr`` tensor (parameter) requires grad."""
    import torch
    if not torch.is_grad_enabled():
        return False
    if any(is_tensor(v) and v.requires_grad for v in example_inputs):
        return True
    for node in fx_gm.graph.nodes:
        if node.op == "get_attr":
            value = _resolve(fx_gm, str(node.target))
            if is_tensor(value) and value.requires_grad:
                return True
    return False


def aot_backend(fx_gm: Any, example_inputs: Sequence[Any], backends: Any,
                options: Dict[str, Any]) -> Callable[..., Any]:
    """Compile a Dynamo graph for training through AOTAutograd (see module docstring)."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    from .decompositions import training_decompositions
    from .torch_bridge import bridge_custom_ops, non_differentiable_ops

    program = TrainingProgram(name="graph")
    record_program(program, "graph")
    reasons = non_differentiable_ops(fx_gm)
    if reasons:
        return _eager_autograd(program, fx_gm, example_inputs, backends, options,
                               "; ".join(reasons))
    program.bridged = bridge_custom_ops(fx_gm)

    def compiler(kind: str) -> Callable[..., Any]:
        def compile_half(aten_gm: Any, inputs: Sequence[Any]) -> Any:
            runner = _lower_half(program, kind, aten_gm, inputs, backends, options)
            return make_boxed_func(_unshared(runner) if kind == "backward" else runner)
        return compile_half

    compile_aot = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                               decompositions=training_decompositions(),
                               partition_fn=min_cut_rematerialization_partition)
    try:
        return compile_aot(fx_gm, example_inputs)
    except Exception as exc:  # noqa: BLE001 - any trace failure: eager autograd is correct
        from .torch_bridge import restore_dynamo_graph
        restore_dynamo_graph(fx_gm)
        reason = f"AOTAutograd could not trace the graph ({type(exc).__name__}: {exc})"
        logger.warning("%s; it runs through eager autograd", reason)
        return _eager_autograd(program, fx_gm, example_inputs, backends, options, reason)


def _lower_half(program: TrainingProgram, kind: str, aten_gm: Any, inputs: Sequence[Any],
                backends: Any, options: Dict[str, Any]) -> Callable[..., Any]:
    """Import one AOT graph and build its runner (lowered on its first call)."""
    from ..capture.importers import import_fx_graph
    from ..compiler import build_runner
    from .decompositions import drop_detaches, views_as_reshapes
    from .torch_bridge import restore_ops

    if kind == "backward":
        _keep_saved_buffers()
    drop_detaches(aten_gm)
    views_as_reshapes(aten_gm)
    gm = import_fx_graph(aten_gm)
    restore_ops(gm)
    # Saved activations and gradients outlive the call: CUDA graphs only when asked for.
    options = {**options, "cuda_graphs": options.get("cuda_graphs") or False}
    runner = build_runner(gm, inputs, backends=backends, options=options)
    program.attach(kind, runner, gm)
    return runner


def _unshared(backward: Callable[..., Any]) -> Callable[..., Any]:
    """``backward`` whose gradients never share storage with each other or with its inputs
    (:func:`~.step.unshare_gradients`; AOTAutograd hands them to ``AccumulateGrad`` as
    they are, and torch.compile's own backend gives ``x.unsqueeze(0) + y`` a 3x gradient
    after two backward passes of a retained graph, where eager gives 2x)."""
    from .step import unshare_gradients

    def run(*args: Any) -> Any:
        out = backward(*args)
        grads = list(out)
        unshare_gradients(grads, [a for a in args if is_tensor(a)])
        return type(out)(grads) if isinstance(out, tuple) else grads
    return run


def _keep_saved_buffers() -> None:
    """Declare that our backward overwrites no saved activation (no donated buffers).

    Why: AOTAutograd marks saved activations "donated" for Inductor's backward to reuse and
    then refuses ``backward(retain_graph=True)`` ("non-empty donated buffers"), which eager
    allows. Our backward reuses none of them, so the program gives nothing up. torch reads
    the list (``fw_metadata.bw_donated_idxs``) right after the backward compile we are in;
    ``None`` (``donated_buffer=False`` at compile time) would fail its check as well.
    """
    from torch._guards import TracingContext
    context = TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None)
    if metadata is not None and hasattr(metadata, "bw_donated_idxs"):
        metadata.bw_donated_idxs = []


def _eager_autograd(program: TrainingProgram, fx_gm: Any, example_inputs: Sequence[Any],
                    backends: Any, options: Dict[str, Any], reason: str) -> Callable[..., Any]:
    """Today's path: the imported Dynamo graph runs through eager autograd when grad is on."""
    from ..capture.importers import import_fx_graph
    from ..compiler import build_runner
    program.eager_reason = reason
    logger.info("training graph runs through eager autograd: %s", reason)
    runner = build_runner(import_fx_graph(fx_gm), example_inputs, backends=backends,
                          options=options)
    program.attach("eager", runner, runner.captured)
    return runner


def _resolve(root: Any, qualname: str) -> Any:
    value = root
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value
