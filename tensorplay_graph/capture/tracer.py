"""``Tracer``: run a program on proxies and record its graph.

With example inputs the real computation runs alongside the trace: every
proxy carries its example value, every node gets ``meta["tensor_meta"]``, and
shape queries answer with real numbers (the graph is specialised to those
shapes, as an eager run would be). Parameters and buffers of every module the
program reaches become ``get_attr`` nodes named by qualname (``"fc1.weight"``),
tensors of the function's globals / closure / defaults ``g_<name>`` /
``c_<name>`` / ``d<i>`` (see ``capture.state``: read at call time, guarded);
any other real tensor that meets a proxy (tensors made inside the program) is
lifted to a ``get_attr`` constant ``_const<N>``. Submodules are traced
through, so ``nn.Linear`` becomes one ``linear`` node. ``capture()`` is in
``capture.api``.
"""

from __future__ import annotations

import gc
from contextlib import ExitStack
from typing import Any, Callable, Dict, Optional, Tuple

from ..errors import GraphCaptureError
from ..frameworks import adapter_for, framework_of, is_tensor, private_copy
from ..ir.effects import is_inplace
from ..ir.lint import lint_enabled
from ..ir.node import op_name
from .context import ACTIVE_TRACER, check_no_escape, raise_location, user_location
from . import grad_mode
from .examples import PLAIN as _PLAIN, examples as _examples, set_tensor_meta as _set_tensor_meta
from .inputs import call_inputs, signature_inputs
from .lifting import Lifted, erase_unused_attrs
from .host_random import HostRandomness
from .object_state import ObjectState, argument_roots, global_roots
from .naming import attribute_qualname
from .proxy import MISSING, GraphBreakError, Proxy, made_tensor_write, run_program
from .randomness import NOT_RANDOM, example_without_drawing
from .guards import check_root_hooks, tensor_layouts, unique
from .state import ProgramState, is_module
from .state_writes import StateWrites
from .trace_scope import abandon, enter_scope
from .structure import output_spec, plain
from .unknown_values import UnknownValues

#: ``example_fn`` value meaning "this node has no example value" (opaque op without a fake).
NO_EXAMPLE = object()


class _RetraceWithPrivateExamples(BaseException):
    """Raised by the first in-place node of a trace on shared examples; ``trace`` starts over.

    A ``BaseException``: it must pass ``except Exception`` blocks in user code and in
    framework dispatch between the node's creation and ``trace``.
    """


_is_module = is_module


class Tracer:
    """Capture a function or module into a :class:`~tensorplay_graph.ir.GraphModule`.

    Seed-compatible: ``Tracer(concrete_args=None).trace(root, sample_inputs=None)``.
    ``concrete_args`` maps parameter names to values baked into the graph (no
    placeholder); ``sample_inputs`` maps parameter names to example tensors.

    >>> gm = Tracer().trace(lambda x: x * 2, sample_inputs={"x": tp.ones(3)})  # doctest: +SKIP
    """

    def __init__(self, concrete_args: Optional[Dict[str, Any]] = None) -> None:
        from ..ir.graph import Graph

        self.graph = Graph()
        self.root: Any = None
        self.concrete_args: Dict[str, Any] = dict(concrete_args or {})
        self.sample_inputs: Dict[str, Any] = {}
        #: qualname -> value for every ``get_attr`` node (the GraphModule's root).
        self.attrs: Dict[str, Any] = {}
        self._lifted = Lifted()
        self._framework: Optional[str] = None
        #: > 0 while an example value is computed: random calls then are real draws, not nodes.
        self.computing_example = 0
        #: Examples are private copies of the inputs, parameters and buffers (see ``trace``).
        self.private_examples = False
        #: What the program read that must not change between calls (see ``capture.state``).
        self.guards: list = []
        #: How to give the graph's plain output back its types (``structure.restore``).
        self.output_spec: Any = None
        #: torch's random-call mode while a trace runs; paused around example computation.
        self._random_mode: Any = None
        self._objects: Any = None  # ObjectState of the running trace
        self._grad: Any = None  # grad_mode.GradModeReads of the running trace
        self._state_writes = StateWrites()
        self._inplace_by_target: Dict[Tuple[str, Any], bool] = {}
        #: Nodes whose example values are made up (fakes, random draws; ``unknown_values``).
        self.unknown = UnknownValues()

    # -- recording -------------------------------------------------------

    def create_proxy(self, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                     example_fn: Any = None) -> Proxy:
        """Record one node and return its proxy.

        ``example_fn`` computes the example value from the inputs' examples;
        ``None`` replays the node itself, :data:`NO_EXAMPLE` leaves it unknown.
        """
        node = self.graph.create_node(kind, target, self._to_node_args(args),
                                      self._to_node_args(kwargs) if kwargs else None)
        if grad_mode.runs_autograd(kind, target):
            # before its example runs: that would accumulate into the caller's ``.grad``
            raise grad_mode.AutogradCallError(op_name(node), user_location())
        first = node.args[0] if node.args else None
        if getattr(first, "target", None) in self._lifted.made_inside and is_inplace(node):
            # Later native uses of that tensor would read its capture-time value as a constant.
            raise made_tensor_write(node.name, user_location())
        if not self.private_examples and self._writes_in_place(node, kind, target, args, kwargs):
            raise _RetraceWithPrivateExamples()
        node.meta["stack"] = user_location()
        mode = self._random_mode
        paused = mode is not None and self._pause_mode(mode)
        try:
            example = self._example(node, kind, target, args, kwargs, example_fn)
            _set_tensor_meta(node, example)
        finally:
            if paused:
                self._resume_mode(mode)
        proxy = Proxy(node, self, example)
        if self._grad is not None and self._grad.stack:
            # made under the program's own no_grad: read through detach() (grad_mode); never
            # ``or``: the truth value of a proxy is data
            detached = self._grad.in_region(self, node, proxy)
            if detached is not None:
                return detached
        return proxy

    def holds_state(self, tensor: Any) -> bool:
        """Whether a real ``tensor`` shares memory with a parameter, buffer or global tensor
        the trace reads (:mod:`.state_writes`)."""
        return self._state_writes.holds(tensor, self.attrs)

    def _writes_in_place(self, node: Any, kind: str, target: Any, args: tuple,
                         kwargs: Dict[str, Any]) -> bool:
        """``effects.is_inplace(node)``, remembered per target for plain calls (no keywords
        such as ``out=`` / ``inplace=``, no bool argument: the target alone decides)."""
        if kwargs or any(type(arg) is bool for arg in args):
            return is_inplace(node)
        try:
            return self._inplace_by_target[(kind, target)]
        except KeyError:
            verdict = self._inplace_by_target[(kind, target)] = is_inplace(node)
            return verdict
        except TypeError:  # unhashable target
            return is_inplace(node)

    def proxy(self, node: Any, example: Any = MISSING) -> Proxy:
        """A proxy for an existing node."""
        return Proxy(node, self, example)

    def lift(self, value: Any) -> Any:
        """A real tensor as a ``get_attr`` proxy of a copy of its value now (``lifting``);
        other values unchanged."""
        if isinstance(value, Proxy) or not is_tensor(value):
            return value
        lifted = self._lifted.find(value)
        if lifted is not None:
            return lifted
        if self._objects is not None:
            self._objects.read(value)  # the caller's state behind a plain object: not a constant
        return self._lifted.constant(value, self._get_attr)

    def lifted(self, value: Any) -> Optional[Proxy]:
        """The proxy a tensor was lifted to in this trace, if any and not written since."""
        return self._lifted.find(value)

    def attr_proxy(self, qualname: str, value: Any) -> Proxy:
        """A new ``get_attr`` proxy reading ``value`` (``qualname`` made unique)."""
        base, count = qualname, 1
        while attribute_qualname(qualname) in self.attrs:
            qualname, count = f"{base}_{count}", count + 1
        return self._get_attr(qualname, value)

    def tensor_type(self, proxy: Proxy) -> Optional[type]:
        """The class a proxy stands for, for attribute checks (None if unknown)."""
        if proxy.example is not MISSING:
            return type(proxy.example)
        return adapter_for(self._framework).tensor_type() if self._framework else None

    def result_fields(self, node: Any) -> Tuple[str, ...]:
        """Field names of the named tuple ``node``'s call returns (``framework.result_fields``)."""
        if self._framework is None or node.op not in ("call_function", "call_method"):
            return ()
        name = op_name(node)
        return adapter_for(self._framework).result_fields(name, node.args, node.kwargs)

    def _get_attr(self, qualname: str, value: Any) -> Proxy:
        qualname = attribute_qualname(qualname)
        node = self.graph.get_attr(qualname)
        node.meta["stack"] = user_location()
        _set_tensor_meta(node, value)
        self.attrs[qualname] = value
        proxy = Proxy(node, self, self._example_of(value))
        self._lifted.register(value, proxy)
        self._note_framework(value)
        return proxy

    def _to_node_args(self, value: Any) -> Any:
        """Proxies -> their nodes, real tensors -> lifted constants, shape tuples -> plain tuples."""
        cls = type(value)
        if cls is Proxy:
            return value.node
        if cls is tuple or cls is dict:  # the hot path: one level of proxies and scalars
            items = value.values() if cls is dict else value
            out = []
            for item in items:
                kind = type(item)
                out.append(item.node if kind is Proxy else
                           item if kind in _PLAIN else self._to_node_args(item))
            return tuple(out) if cls is tuple else dict(zip(value, out))
        if isinstance(value, Proxy):
            return value.node
        if isinstance(value, tuple):
            return tuple(self._to_node_args(item) for item in value)
        if isinstance(value, list):
            return [self._to_node_args(item) for item in value]
        if isinstance(value, dict):
            return {key: self._to_node_args(item) for key, item in value.items()}
        if isinstance(value, slice):
            return slice(self._to_node_args(value.start), self._to_node_args(value.stop),
                         self._to_node_args(value.step))
        if is_tensor(value):
            return self.lift(value).node
        return value

    def _example(self, node: Any, kind: str, target: Any, args: Tuple[Any, ...],
                 kwargs: Dict[str, Any], example_fn: Any) -> Any:
        if example_fn is NO_EXAMPLE:
            return MISSING
        example_args = _examples(args)
        example_kwargs = _examples(kwargs) if kwargs else {}
        unknown = self.unknown
        if example_args is MISSING or example_kwargs is MISSING:
            unknown.note(node, MISSING)
            return MISSING
        # A random call's example draws nothing from the global stream (randomness.py).
        example = example_without_drawing(node, self._framework, example_args)
        if example is not NOT_RANDOM:
            unknown.mark(node, is_inplace(node))
            return example
        made_up = unknown.reads(node)
        if unknown.shape_from_made_up(node, kind, target, example_args):
            return MISSING  # its shape would come from made-up values
        self.computing_example += 1
        try:
            if example_fn is not None:
                example = example_fn(*example_args, **example_kwargs)
            elif kind == "call_method":
                example = getattr(example_args[0], target)(*example_args[1:], **example_kwargs)
            else:
                example = target(*example_args, **example_kwargs)
        except GraphCaptureError:
            raise
        except Exception as error:
            if made_up:  # e.g. an index out of range in a fake's garbage: learned at run time
                unknown.mark(node, is_inplace(node))
                unknown.varying.add(node)
                return MISSING
            error.add_note(f"while computing the example value of node {node.name!r} "
                           f"({node.format_node()}) captured at {node.meta['stack']}")
            raise
        finally:
            self.computing_example -= 1
        if not unknown.mark_custom_op(node) and made_up:
            unknown.mark(node, is_inplace(node))
        unknown.note(node, example)
        return example

    def _example_of(self, value: Any) -> Any:
        """The example a leaf (input, parameter, buffer, constant) carries during the trace."""
        return private_copy(value) if self.private_examples else value

    def _note_framework(self, value: Any) -> None:
        if self._framework is None:
            self._framework = framework_of(value)

    # -- tracing ---------------------------------------------------------

    def trace(self, root: Any, sample_inputs: Optional[Dict[str, Any]] = None) -> Any:
        """Trace ``root`` (a function or module) and return a GraphModule.

        Every parameter not in ``concrete_args`` becomes a placeholder; those
        with an entry in ``sample_inputs`` carry its example value.
        """
        self.sample_inputs = dict(sample_inputs or {})
        return self._retrying(root, lambda function: signature_inputs(self, function))

    def trace_call(self, root: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        """Trace ``root(*args, **kwargs)`` exactly as called; return a GraphModule.

        The tensors inside ``args`` / ``kwargs`` (nested tuples, lists, dicts,
        dataclasses included), in ``structure.call_key`` order, become the
        placeholders; every other value is seen as is (specialised).
        """
        return self._retrying(root, lambda function: call_inputs(self, function, args, kwargs))

    def _retrying(self, root: Any, inputs: Callable[[Any], Tuple[tuple, dict]]) -> Any:
        # A trace allocates long-lived objects (nodes, metas, proxies) and frees few; cyclic
        # GC sweeps over them find nothing and cost ~30% of capturing a 20k-node program.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._retrying_gc_off(root, inputs)
        finally:
            if was_enabled:
                gc.enable()

    def _retrying_gc_off(self, root: Any, inputs: Callable[[Any], Tuple[tuple, dict]]) -> Any:
        try:
            return self._trace(root, inputs)
        except _RetraceWithPrivateExamples:
            # The program writes in place. Example values are computed for real while
            # tracing, so trace again on private copies of the leaves: the writes must not
            # reach the caller's tensors or the module's state. Pure programs (most) share
            # the leaves and cost no copy.
            samples = self.sample_inputs
            Tracer.__init__(self, self.concrete_args)
            self.sample_inputs = samples
            self.private_examples = True
            return self._trace(root, inputs)

    def _trace(self, root: Any, inputs: Callable[[Any], Tuple[tuple, dict]]) -> Any:
        from ..ir.graph_module import GraphModule

        self.root = root
        function = root.forward if _is_module(root) else root
        if not callable(function):
            raise TypeError(f"capture() expects a function or module, got {type(root).__name__}")
        if _is_module(root):
            check_root_hooks(root)
        args, kwargs = inputs(function)
        objects = self._objects = ObjectState(argument_roots(args, kwargs), global_roots(function, root))
        host = HostRandomness(objects.generators)
        state: Optional[ProgramState] = None
        token = ACTIVE_TRACER.set(self)
        try:
            with ExitStack() as stack:
                state = ProgramState(self, stack)
                grad_reads, autocast_guards = enter_scope(self, stack, state)
                if _is_module(root):
                    state.patch_module(root, "")
                result = run_program(state.rebind(function), args, kwargs)
                host.check_unchanged()
                objects.check_unchanged()
                self.output_spec = output_spec(result)
                self.graph.output(self._to_node_args(plain(result)))
                state.finish()
                self.guards = state.guards
        except BaseException as error:
            abandon(objects, state, host)  # a failed trace leaves the caller's state as it was
            if not isinstance(error, RuntimeError) or \
                    type(error).__name__ != "GraphCaptureError" or isinstance(error, GraphCaptureError):
                raise
            # A framework's own capture error (e.g. TensorPlay's raw Triton launch check).
            raise GraphCaptureError(f"{error} (at {raise_location(error)})") from error
        finally:
            ACTIVE_TRACER.reset(token)
            self._random_mode = self._objects = self._grad = None
        self.guards = unique(self.guards + state.late_guards(self._framework)
                             + objects.scalar_guards() + grad_reads.guards()
                             + [autocast_guards[f] for f in [self._framework] if f in autocast_guards])
        self.guards += tensor_layouts(self.guards)
        try:
            check_no_escape(function, root, result)
        except GraphBreakError:
            abandon(objects, state)  # a traced value stored in the program's state: undo it
            raise
        self._lifted.keep_unwritten(self.attrs)
        erase_unused_attrs(self.graph, self.attrs)
        if lint_enabled():
            self.graph.lint()
        self.graph.framework = self._framework
        return GraphModule(self.attrs, self.graph)

    def placeholder(self, name: str, example: Any) -> Any:
        """A placeholder node named ``name``: a proxy carrying ``example``, or a non-tensor
        example itself (specialised)."""
        node = self.graph.placeholder(name)
        if example is not MISSING and not is_tensor(example):
            # A non-tensor input is specialised: the program sees the value,
            # the placeholder only keeps the call signature.
            return example
        if example is not MISSING:
            self._note_framework(example)
            example = self._example_of(example)
            _set_tensor_meta(node, example)
        return Proxy(node, self, example)
