"""CUDA-graph replay of a whole lowered program: when it is safe, and how outputs stay eager-like.

:func:`decide` looks at the lowered program and the call's inputs once per specialization and
says whether one call can become one ``graph.replay()`` -- and why not when it cannot
(``options={"cuda_graphs": None}``, the default, means "when safe"; ``False`` never; ``True``
also for dynamic sizes, random ops and custom ops). Safe means: static shapes, every tensor
(inputs and constants) a torch CUDA tensor, no node that reads data back to the host or makes
CPU tensors, no write into a graph input (replays may read a private copy of it), and -- under
the default -- no random op and no custom op running arbitrary host code.

:class:`CudaGraphRunner` then runs the program: call 1 as is (kernels compile, lazy state
settles), call 2 captures it and replays, later calls replay. Inputs whose storage (the same
storage object, not only the address) is the same on calls 1 and 2 are read in place; when some
moved, call 2 is one more warm-up and call 3 captures (a backward's inputs are the forward
graph's buffers only from the forward's capture on); inputs that moved again are copied into
private buffers before each replay -- unless those copies would cost more than the launches a
replay saves (``COPY_BYTES_PER_LAUNCH``), which turns graphs off under the default. Call-time
caches (a channels_last conv weight, a padded linear weight: ``refresh_for_replay``) are brought
up to date before each replay; a constant moved to new memory (``p.data = other``) captures
again. A steady call may launch the replay before its program-state checks (:meth:`launch`).

Outputs behave like eager outputs: a caller still holding one of the previous call's outputs
(the tensor or a view of it) never sees it overwritten. The buffers it holds are left to it
and the call replays a second recording of the program, in its own private pool (made on
first need): ``out = model(x)`` in a loop alternates between the two graphs without a copy,
as cudagraph trees' separate recordings would, at the price of a second graph's memory. A
caller keeping results of both (every result, or a graph in a training step's shared pool)
gets the copy path instead: the program is captured again (new buffers) and from then on each
call returns copies of the outputs the caller kept (a training loop's ``loss``), the graph's
own buffers for the rest.
Those are returned as new tensor objects each call, so a caller can own one outright
(autograd moves an unshared gradient into ``.grad`` uncopied). A reference held only from C++
(a DLPack capsule) is not seen: keep a Python reference, or turn graphs off. The graph's
memory pool (the program's intermediates and outputs) stays allocated while the compiled
program lives -- shared between a training step's forward and backward graphs
(:mod:`.cuda_graph_pool`) -- and one runner is not meant to be called from two threads at once.

A capture first runs the program once more on its own stream with the capture's arguments
(lazy work -- a new Triton specialization's compile and module load -- stays outside it) and
captures in ``thread_local`` mode; a failed capture names the node, its kernels and the first
CUDA error (:mod:`.cuda_graph_capture`) in the WARNING and in ``explain()``.

>>> runner = wrap(lowered_module, example_inputs, option=None)          # doctest: +SKIP
>>> runner.cuda_graphs                                                  # doctest: +SKIP
'on: static shapes, every tensor on CUDA, no host syncs or host-side ops'
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .cuda_graph_capture import (ConstantAddresses, capture_failure, copy_into, private_copy,
                                 stayed, where)
from .cuda_graph_ops import TorchGraphs
from .output_tree import GraphOutputs, flatten as _flatten, unfit_outputs
from .cuda_graph_policy import (COPY_BYTES_PER_LAUNCH, HOST_FUNCTIONS, HOST_METHODS,  # noqa: F401
                                 ON, decide, is_cuda_tensor, launches,
                                 replay_writes_only_its_buffers, written_constants)

log = logging.getLogger("tensorplay_graph.compile")
hints = logging.getLogger("tensorplay_graph.perf_hints")

MAX_RECAPTURES = 2

def wrap(module: Any, example_inputs: Sequence[Any], option: Optional[bool] = None,
         dynamic: bool = False, pool: Any = None) -> Any:
    """``module`` in a :class:`CudaGraphRunner` when :func:`decide` says so; the decision is
    logged (INFO on ``compile`` when on, on ``perf_hints`` when the default left them off)
    and kept as ``.cuda_graphs`` on what is returned. ``pool``: a
    :class:`~.cuda_graph_pool.SharedPool` to capture into (a training step's two halves)."""
    use, why = decide(module, example_inputs, option, dynamic)
    if use:
        log.info("cuda graphs %s", why)
        return CudaGraphRunner(module, reason=why, pool=pool, forced=bool(option))
    (log if option else hints).info("cuda graphs %s", why)
    try:
        module.cuda_graphs = why
    except AttributeError:
        pass
    return module


class CudaGraphRunner:
    """Replay ``fn`` (a lowered program of one specialization) through one CUDA graph.

    One runner serves one input signature: its caller (``CompiledFunction`` / Dynamo) guards
    shapes, strides and dtypes. See the module docstring for the input and output contract.
    ``state`` is ``"warm-up"``, ``"graph"``, ``"graph, copying K of N outputs"`` or
    ``"off: why"``.
    """

    def __init__(self, fn: Callable[..., Any], reason: str = ON, ops: Any = TorchGraphs,
                 pool: Any = None, forced: bool = False, double_buffer: bool = True) -> None:
        self.fn = fn
        self.forced = forced  # graphs asked for (option True): kept whatever the copies cost
        self.ops = ops
        self._pool = pool  # a SharedPool this runner's first capture joins, or None
        self.reason = reason
        self.captures = 0
        self.replays = 0
        self.state = "warm-up"
        self._warm: Optional[List[Optional[Tuple[int, Any]]]] = None  # (address, storage ref)
        self._graph: Any = None
        self._static: List[Tuple[int, int]] = []        # (slot, pointer) read in place
        self._private: List[Tuple[int, Any]] = []       # (slot, private buffer) copied in
        self._outputs: Optional[GraphOutputs] = None  # the captured graph's
        self._copy_out: set = set()  # output positions handed out as copies
        self._rewarmed = False
        #: why the last capture failed: {"text", "node", "kernels", "error", "final"}
        self.capture_failure: Optional[Dict[str, Any]] = None
        # Call-time caches the graph reads (channels_last conv weights): brought up to date
        # before each replay, since a replay runs none of the program's Python.
        graph = getattr(fn, "graph", None)
        self._refresh = [n.target for n in getattr(graph, "nodes", ())
                         if callable(getattr(n.target, "refresh_for_replay", None))]
        self._launches = launches(fn)
        #: a replay may run before the caller's state checks (:meth:`launch`)
        self.speculative = not forced and replay_writes_only_its_buffers(fn)
        self._pending = False  # a launched replay not collected yet
        self._constants: Any = None  # ConstantAddresses of the captured graph
        #: a second recording (its own private pool) for calls while the caller keeps this
        #: one's last results: ``out = model(x)`` in a loop alternates between the two
        self.double_buffer = double_buffer
        self._twin: Optional["CudaGraphRunner"] = None
        self._launched_twin = False

    @property
    def cuda_graphs(self) -> str:
        """The decision and where the runner stands (``explain()`` shows it)."""
        if self.state.startswith("off"):
            return self.state
        twin = self._twin
        second = ", a second graph for results the caller keeps" \
            if twin is not None and twin._graph is not None else ""
        return f"{self.reason} [{self.state}{second}]"

    def __getattr__(self, name: str) -> Any:  # .graph, .code ... of the wrapped module
        if name.startswith("_") or name == "fn":
            raise AttributeError(name)
        return getattr(self.fn, name)

    def __call__(self, *args: Any) -> Any:
        if self._pending:  # a launch whose checks failed, and the general path came back here
            self._pending = self.speculative = False
        self._launched_twin = False
        if self._graph is None:
            if self.state == "warm-up":
                return self._first(args)
            if self.state == "capture next" and not self._rewarmed and self._moved(args):
                # One more warm-up when inputs moved since the last one: a compiled
                # backward's saved activations live in the forward graph's output buffers
                # only from the forward's capture on, and read in place they cost no copy
                self._rewarmed = True
                return self._first(args)
            if not self.state.startswith("off"):
                return self._capture(args)
            return self.fn(*args)
        why = self._prepare(args)
        if why is not None:
            twin = self._twin_for(why[0])
            if twin is not None:
                try:
                    return twin(*args)
                except Exception as exc:  # noqa: BLE001 - only running out of memory is ours
                    if type(exc).__name__ != "OutOfMemoryError":
                        raise
                    self._no_twin("recording it ran out of device memory")
            return self._divert(args, *why)
        self.ops.replay(self._graph)
        self.replays += 1
        return self._result()

    # -- a replay launched before the caller's state checks ------------------------------
    def launch(self, *args: Any) -> bool:
        """Replay the graph for ``args`` if the call needs nothing else; say whether it did.
        ``fast_call``'s entry checks the arguments, launches, checks the program's state while
        the GPU runs, then calls :meth:`collect`. A failed state check drops the replay: it wrote
        only the graph's own buffers, which no caller holds (:attr:`speculative`). A runner
        whose launch was dropped once stops launching early (two states taking turns)."""
        if self._pending:  # the last launch was never collected: its checks failed
            self._pending = self.speculative = False
        self._launched_twin = False
        if self._graph is None or not self.speculative:
            return False
        why = self._prepare(args, constants=False)
        if why is not None:
            twin = self._twin_for(why[0])
            self._launched_twin = twin is not None and twin.launch(*args)
            return self._launched_twin
        self.ops.replay(self._graph)
        self.replays += 1
        self._pending = True
        return True

    def collect(self, launched: bool, *args: Any) -> Any:
        """The results of the replay :meth:`launch` made, or the whole call when it made none."""
        if launched and self._launched_twin:
            self._launched_twin = False
            return self._twin.collect(True, *args)
        if launched:
            self._pending = False
            if not self._constants.moved():
                return self._result()
            return self._divert(args, "constant", None)  # that replay read the old memory
        return self(*args)

    def _prepare(self, args: tuple, constants: bool = True) -> Optional[Tuple[str, Any]]:
        """Make the graph's buffers ready for a replay on ``args``: None, or why another step
        must run first (``(kind, detail)``: :meth:`_divert`). An early launch checks the
        constants' memory in :meth:`collect` instead, off the critical path."""
        if constants and self._constants.moved():
            return "constant", None
        for slot, ptr in self._static:
            if args[slot].data_ptr() != ptr:
                return "moved", slot
        held = self._held_outputs()
        if held:
            return "held", held
        if self._pool is not None and self._pool.holder(self) is not None:
            return "pool", None
        for slot, buffer in self._private:
            value = args[slot]
            if value.data_ptr() != buffer.data_ptr():
                copy_into(buffer, value)
        # after the copies in: a cached weight made from an input copied in per call (a
        # weight passed as an argument) must see this call's values, not the last call's
        for cache in self._refresh:
            if not cache.refresh_for_replay():
                return "cache", None
        return None

    def _divert(self, args: tuple, kind: str, detail: Any) -> Any:
        if kind == "moved":
            return self._recapture(args, f"input {detail} moved to new storage")
        if kind == "held":
            # The caller owns those buffers now: a new graph (new buffers) that hands out
            # copies of the outputs the caller keeps (a loop's ``loss``), its buffers for the rest
            self._copy_out |= detail
            self._drop_graph()
            hints.info("cuda graphs: the caller still holds %d of the previous call's outputs; "
                       "capturing again and copying those out of the graph's pool from now on "
                       "(drop the previous result before calling again to avoid the copy)",
                       len(detail))
            return self._capture(args, [slot for slot, _ in self._private])
        if kind == "pool":
            return self._leave_pool(args)
        return self._recapture(args, "a parameter or buffer moved to new memory" if kind ==
                               "constant" else "a cached weight's parameter was replaced")

    def _twin_for(self, why: str) -> Optional["CudaGraphRunner"]:
        """The second recording, for a call ``why`` diverted because the caller still holds
        this graph's last results: made on first need, used while its own results are free.
        None -- the copy path -- in a shared pool (a training step's graphs), for a twin, and
        when the caller keeps results of both (it keeps every result: copies are cheaper
        than a graph per result)."""
        if why != "held" or not self.double_buffer or self._pool is not None:
            return None
        twin = self._twin
        if twin is None:
            room = getattr(self.ops, "room_for_another", None)
            if room is not None and not room(self._graph):
                return self._no_twin("the device has too little free memory for a second one")
            twin = self._twin = _Runner(self.fn, self.reason, ops=self.ops, forced=self.forced,
                                        double_buffer=False)
            hints.info("cuda graphs: the caller keeps the previous call's results; recording "
                       "a second graph (its own memory) to alternate with")
        if twin.state.startswith("off"):
            return self._no_twin(f"the second graph is {twin.state}")
        if not twin.outputs_free():
            return self._no_twin("the caller keeps results of both graphs")
        return twin

    def _no_twin(self, why: str) -> None:
        self._twin, self.double_buffer = None, False
        hints.info("cuda graphs: no second graph (%s): the outputs the caller keeps are "
                   "copied out of the graph instead", why)

    # -- steps ---------------------------------------------------------------------------
    def _moved(self, args: tuple) -> bool:
        return any(self.ops.is_tensor(a) and not stayed(a, place)
                   for a, place in zip(args, self._warm or ()))

    def _first(self, args: tuple) -> Any:
        self._warm = [where(a) if self.ops.is_tensor(a) else None for a in args]
        self.state = "capture next"
        pool = self._pool.warm_up_handle(self.ops) if self._pool is not None else None
        return self.ops.warm_up(self.fn, args, pool=pool)

    def _capture(self, args: tuple, moved: Sequence[int] = ()) -> Any:
        pool = self._pool
        if pool is not None and self.captures and not pool.is_last(self):
            # a recapture stays in the pool only where no later graph allocated around it
            pool.leave(self)
            self._pool = pool = None
        static, private, capture_args = [], [], list(args)
        copied = [slot for slot, value in enumerate(args) if self.ops.is_tensor(value)
                  and (slot in moved or not stayed(value, self._warm[slot]))]
        size = sum(args[slot].numel() * args[slot].element_size() for slot in copied)
        if not self.forced and size > COPY_BYTES_PER_LAUNCH * max(1, self._launches):
            return self._off(args, f"input(s) {copied} move between calls: copying their "
                                   f"{size / 2 ** 20:.1f} MiB into the graph's buffers before "
                                   f"each replay would cost more than the {self._launches} "
                                   "launch(es) a replay saves")
        for slot, value in enumerate(args):
            if not self.ops.is_tensor(value):
                continue
            if slot not in copied:
                static.append((slot, value.data_ptr()))
            else:
                buffer = private_copy(value)
                private.append((slot, buffer))
                capture_args[slot] = buffer
        written = written_constants(self.fn)
        before = [value.detach().clone() for value in written]
        try:
            graph, out = self.ops.capture(self.fn, capture_args,
                                          pool=None if pool is None else pool.handle(self.ops))
        except Exception as exc:  # e.g. an op that synchronizes with the host
            for value, saved in zip(written, before):
                value.detach().copy_(saved)
            self.capture_failure = capture_failure(exc, self.fn)
            return self._off(args, f"capture failed {self.capture_failure['text']}", warn=True)
        for value, saved in zip(written, before):  # the capture's own run wrote them once
            value.detach().copy_(saved)
        leaves: List[Any] = []
        spec = _flatten(out, leaves)
        del out  # the baseline below counts only the runner's own references
        why = unfit_outputs(self.ops, leaves, capture_args)
        if why is not None:
            return self._off(args, why)
        self._graph, self._static, self._private = graph, static, private
        self._constants = ConstantAddresses(self.fn)
        self._outputs = GraphOutputs(self.ops, leaves, spec, self._copy_out)
        self.captures += 1
        self.state = "graph"
        if self._copy_out:
            tensors = sum(1 for v in self._outputs.values if self.ops.is_tensor(v))
            self.state += f", copying {len(self._copy_out)} of {tensors} outputs"
        if pool is not None:
            pool.join(self)
            self.state += f", memory pool shared across the {pool.name}"
        log.info("cuda graphs: captured (%d input(s) read in place, %d copied in per call)",
                 len(static), len(private))
        for slot, buffer in private:
            copy_into(buffer, args[slot])
        self.ops.replay(graph)
        self.replays += 1
        return self._result()

    def _recapture(self, args: tuple, why: str) -> Any:
        if self.captures > MAX_RECAPTURES:
            return self._off(args, f"{why} after {self.captures} captures")
        moved = [slot for slot, ptr in self._static if args[slot].data_ptr() != ptr]
        moved += [slot for slot, _ in self._private]
        self._graph = None
        log.info("cuda graphs: %s; capturing again with it copied in", why)
        return self._capture(args, moved)

    def _leave_pool(self, args: tuple) -> Any:
        hints.info("cuda graphs: results of a later graph in the %s's shared memory pool are "
                   "still held (gradients kept in .grad across steps?); capturing this graph "
                   "again in a private pool (drop them before the next call -- "
                   "zero_grad(set_to_none=True) before the forward -- to keep sharing)",
                   self._pool.name)
        self._drop_graph()
        return self._capture(args, [slot for slot, _ in self._private])

    def _off(self, args: tuple, why: str, warn: bool = False) -> Any:
        if self._pool is not None:
            self._pool.leave(self)
            self._pool = None
        self.state = f"off: {why}"
        self._drop_graph()
        self._twin = None
        (log.warning if warn else log.info)("cuda graphs %s; running without them", self.state)
        return self.fn(*args)

    def _drop_graph(self) -> None:
        self._graph, self._outputs = None, None

    # -- outputs ---------------------------------------------------------------------------
    def _held_outputs(self) -> set:
        """Positions of the graph's output buffers that a tensor (or view) handed out by the
        last replay still references (outputs handed out as copies are not watched)."""
        return self._outputs.held() if self._outputs is not None else set()

    def outputs_free(self) -> bool:
        """No tensor (or view) handed out by the last replay is still referenced elsewhere."""
        return not self._held_outputs()

    def _result(self) -> Any:
        return self._outputs.result()


_Runner = CudaGraphRunner  # the twin's class, whatever a test substitutes for the name
