"""Compiled training for our own capture: the lowered forward / backward pair as one
``autograd.Function`` of the program's framework.

:func:`build_training` builds the joint graph (:mod:`.joint`), splits it (:mod:`.mincut`)
and wraps each half in a ``GraphRunner`` (lowered through the normal pipeline on its first
call). :class:`CompiledTraining` calls ``Function.apply(program, *inputs, *parameters)``:
the framework's autograd records ONE node for the whole program, so ``loss.backward()``,
``.grad`` accumulation, ``no_grad`` and ``retain_graph`` behave as in eager. When the
program cannot be differentiated in our IR, :func:`build_training` returns an
:class:`EagerTraining` carrying the reason: the caller runs the captured graph through
eager autograd and ``explain()`` shows why.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..backends.cuda_graph_pool import SharedPool
from ..frameworks import adapter_for, is_tensor
from ..ir.node import map_aggregate
from .opaque import Slot
from .report import TrainingProgram
from ..ir.graph_module import attr_reader

logger = logging.getLogger("tensorplay_graph.compile")

__all__ = ["CompiledTraining", "EagerTraining", "build_training"]


class EagerTraining:
    """The program trains through eager autograd: ``reason`` says why."""

    compiled = False

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.report = TrainingProgram(name="program", eager_reason=reason)

    def explain(self) -> str:
        return self.report.explain()


def build_training(captured: Any, args: Sequence[Any], backends: Sequence[str],
                   options: Dict[str, Any]) -> Any:
    """A :class:`CompiledTraining` for ``captured`` called with ``args``, or an
    :class:`EagerTraining` with the reason it cannot be."""
    from ..compiler import build_runner
    from .dead_tangents import drop_dead_tangents
    from .joint import NeedsEager, build_joint
    from .mincut import split_joint
    try:
        joint = build_joint(captured, args)
        split = split_joint(joint)
    except NeedsEager as exc:
        logger.info("training runs through eager autograd: %s", exc)
        eager = EagerTraining(str(exc))
        _remember(eager.report)
        return eager
    report = TrainingProgram(name="program", compiled_by="our joint graph (VJP rules)")
    report.bridged = list(dict.fromkeys(joint.opaque))
    report.saved = split.saved
    report.saved_bytes = split.saved_bytes
    report.recomputed = split.recomputed
    report.saved_sizes = split.saved_sizes
    # one CUDA-graph pool: the backward's memory reuses the forward's freed intermediates
    pool = SharedPool("training step")

    def runner(graph: Any) -> Any:
        return build_runner(graph, (), backends=list(backends), options=options,
                            graph_pool=pool)
    forward, backward = runner(split.forward), runner(split.backward)
    report.attach("forward", forward, split.forward)
    report.attach("backward", backward, split.backward)
    _remember(report)

    def specialize(dead: Sequence[int]) -> Any:
        """The backward for outputs ``dead`` the loss did not use, and the tangents it takes."""
        graph, kept = drop_dead_tangents(split.backward, len(split.saved), dead)
        specialized = runner(graph)
        report.attach("backward", specialized, graph)
        return specialized, kept
    return CompiledTraining(captured, joint, forward, backward, report, split.saved_primals,
                            specialize)


def _remember(report: TrainingProgram) -> None:
    """Listed by ``training.compiled_programs()`` with the torch.compile programs."""
    from .aot import record_program
    record_program(report, "program")


def describe_training(runners: Any) -> List[str]:
    """``explain()`` lines for the training side of each runner (one per specialization)."""
    lines = []
    for i, runner in enumerate(runners):
        training = getattr(runner, "training", None)
        if training is not None:
            text = training.explain().replace("\n", "\n    ")
            lines.append(f"  specialization {i} training: {text}")
    return lines


def _function(framework: str) -> type:
    cls = _FUNCTIONS.get(framework)
    if cls is None:
        base = adapter_for(framework).autograd_function()
        cls = _FUNCTIONS[framework] = type("CompiledProgram", (base,), {
            "forward": staticmethod(_forward), "backward": staticmethod(_backward)})
    return cls


_FUNCTIONS: Dict[str, type] = {}


def _forward(ctx: Any, program: "CompiledTraining", *inputs: Any) -> Any:
    results = program.forward(*inputs)
    n = len(program.joint.outputs)
    outs, produced = tuple(results[:n]), iter(results[n:])
    primals = program.saved_primals
    saved = [inputs[primals[i]] if i in primals else next(produced)
             for i in range(program.saved_count)]
    layout = program.saved_layout(saved)
    tensors = [s for s, tensor in zip(saved, layout) if tensor]
    ctx.program = program
    ctx.set_materialize_grads(False)  # None: an output the loss did not use (see _backward)
    ctx.layout = layout
    ctx.others = [s for s, tensor in zip(saved, layout) if not tensor]
    ctx.save_for_backward(*tensors)
    if tensors and ctx.others:
        program.track(ctx)
    fixed = [o for i, o in enumerate(outs) if i not in program.differentiable and is_tensor(o)]
    if fixed and program.marks_outputs:
        ctx.mark_non_differentiable(*fixed)
    return outs


def _backward(ctx: Any, *grads: Any) -> Any:
    program: CompiledTraining = ctx.program
    saved_tensors = ctx.saved_tensors
    tensors, others = iter(saved_tensors), iter(ctx.others)
    saved = [next(tensors) if is_tensor_slot else next(others) for is_tensor_slot in ctx.layout]
    live = sum(1 << i for i in program.joint.differentiable if grads[i] is not None)
    backward, kept = program.backward_for(live)
    tangents = []
    for position in kept:
        i = program.joint.differentiable[position]
        grad = grads[i]
        tangents.append(program.zeros(program.joint.outputs[i].meta["tensor_meta"])
                        if grad is None else grad)
    found = iter(backward(*saved, *tangents))
    out: List[Optional[Any]] = [None]  # the program argument
    for grad, reach in zip(program.joint.grads, program.reaches):
        value = None if grad is None else next(found)
        # eager leaves .grad None for an input whose outputs all went unused
        out.append(value if reach & live else None)
    if program.joint.framework == "torch":
        unshare_gradients(out, saved_tensors)
    return tuple(out)


def unshare_gradients(grads: List[Optional[Any]], saved_tensors: Sequence[Any]) -> None:
    """Clone, in place in ``grads`` (torch tensors or None), each gradient whose storage a
    saved tensor or an earlier gradient holds.

    torch's ``AccumulateGrad`` moves a gradient into ``.grad`` uncopied when no other tensor
    object refers to it, and a view is its own object: two parameters' ``.grad`` would share
    memory (the gradients of ``x.unsqueeze(0) + y`` are one buffer and its view), so the next
    accumulation into one adds into the other too, and a ``.grad`` aliasing a saved tensor
    would change what a retained graph's next backward reads. Eager's gradients never share
    storage like that."""
    taken = {_storage(t) for t in saved_tensors}
    for i, grad in enumerate(grads):
        if grad is None:
            continue
        key = _storage(grad)
        if key in taken:
            grads[i] = grad.clone()
        else:
            taken.add(key)


def _storage(tensor: Any) -> int:
    return tensor.untyped_storage().data_ptr()


class CompiledTraining:
    """Runs the lowered forward under the framework's autograd; its backward on ``backward()``."""

    compiled = True

    def __init__(self, captured: Any, joint: Any, forward: Any, backward: Any,
                 report: TrainingProgram, saved_primals: Optional[Dict[int, int]] = None,
                 specialize: Optional[Callable[[Sequence[int]], Any]] = None) -> None:
        self.captured, self.joint = captured, joint
        #: positions of the backward's saved inputs that are the call's own inputs
        self.saved_primals = dict(saved_primals or {})
        self.saved_count = len(report.saved)
        self.forward, self.backward, self.report = forward, backward, report
        self._full = sum(1 << i for i in joint.differentiable)
        #: per mask of the outputs the loss used: (backward runner, tangent positions it takes)
        self._backwards: Dict[int, Tuple[Any, List[int]]] = {
            self._full: (backward, list(range(len(joint.differentiable))))}
        self._specialize = specialize
        self.differentiable = frozenset(joint.differentiable)
        self._function = _function(joint.framework)
        self._adapter = adapter_for(joint.framework)
        self._contexts: List[Any] = []  # weak references to contexts holding tapes
        self._zeros: Dict[tuple, Any] = {}  # (zeros, its version) per (shape, dtype, device)
        #: TensorPlay 1.0.0's ``mark_non_differentiable`` refuses the forward's results (they
        #: are leaves while it runs): its non-differentiable outputs are detached after
        #: ``apply`` instead, which is what eager's are (``requires_grad`` False, no grad_fn).
        self.marks_outputs = joint.framework == "torch"
        self._fixed = [i for i in range(len(joint.outputs)) if i not in self.differentiable]
        self.reaches = _reaches(joint)
        self._params = [attr_reader(captured, name) for name in joint.params]
        self._saved_layout: Optional[List[bool]] = None
        #: the framework's apply may not record (TensorPlay: F27): checked until one call
        #: records (TensorPlay settles that with the process's first apply, for good)
        self._unverified = bool(self.differentiable)

    def saved_layout(self, saved: Sequence[Any]) -> List[bool]:
        """Which saved values are tensors: fixed by the program, found on its first call."""
        if self._saved_layout is None:
            self._saved_layout = [is_tensor(s) for s in saved]
        return self._saved_layout

    def backward_for(self, live: int) -> Tuple[Any, List[int]]:
        """The backward runner for the outputs in bit mask ``live`` (those the loss used)
        and the positions of the tangents it takes; one specialization per mask."""
        found = self._backwards.get(live)
        if found is None:
            dead = [p for p, i in enumerate(self.joint.differentiable) if not live >> i & 1]
            found = self._backwards[live] = self._specialize(dead) if self._specialize \
                else self._backwards[self._full]
        return found

    def track(self, ctx: Any) -> None:
        self._contexts.append(weakref.ref(ctx))

    def release_spent_tapes(self) -> None:
        """Drop the opaque ops' tapes of contexts whose backward already ran for good.

        Why: a tape holds what its op saved for backward (attention's activations, ...).
        Eager frees those in ``backward()`` unless ``retain_graph``; we cannot ask whether it
        was kept, but the framework frees our saved tensors in exactly that case, so their
        absence (read before the next forward) says the tapes can go too.
        """
        alive = []
        for ref in self._contexts:
            ctx = ref()
            if ctx is None:
                continue
            try:
                ctx.saved_tensors
            except RuntimeError:
                ctx.others = None
                continue
            alive.append(ref)
        self._contexts = alive

    def zeros(self, meta: Any) -> Any:
        """The gradient of an output the loss did not use (GPT-2's logits: 412 MB at 8x512).
        One tensor per shape for the program's life: no fill per step, and a backward graph
        reads it in place instead of copying it in. Nothing writes into backward inputs; the
        version counter says if something did, and then a new one is made."""
        key = (tuple(meta.shape), meta.dtype, str(meta.device))
        found = self._zeros.get(key)
        if found is not None and getattr(found[0], "_version", None) == found[1]:
            return found[0]
        zeros = self._adapter.zeros(meta.shape, meta.dtype, device=meta.device)
        version = getattr(zeros, "_version", None)
        if version is not None:  # TensorPlay tensors have no version counter: not cached
            self._zeros[key] = (zeros, version)
        return zeros

    def __call__(self, *args: Any) -> Any:
        if self._contexts:
            self.release_spent_tapes()
        params = [read() for read in self._params]
        outs = self._function.apply(self, *args, *params)
        if not isinstance(outs, (tuple, list)):
            outs = (outs,)
        if self._unverified:
            self._adapter.check_recorded([outs[i] for i in self.differentiable],
                                         "compiled training call")
            self._unverified = False
        if self._fixed and not self.marks_outputs:
            outs = [o.detach() if i in self._fixed and is_tensor(o) else o
                    for i, o in enumerate(outs)]
        return map_aggregate(self.joint.template,
                             lambda v: outs[v.index] if isinstance(v, Slot) else v)

    def explain(self) -> str:
        return self.report.explain()


def _reaches(joint: Any) -> List[int]:
    """Per primal, a bit mask of the outputs it reaches in the joint graph (one reverse sweep)."""
    index = {node: i for i, node in enumerate(joint.outputs)}
    mask: Dict[Any, int] = {}
    for node in reversed(list(joint.gm.graph.nodes)):
        bits = 1 << index[node] if node in index else 0
        for user in node.users:
            bits |= mask.get(user, 0)
        mask[node] = bits
    return [mask.get(p, 0) for p in joint.primals]

