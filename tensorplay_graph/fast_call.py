"""The steady-state call of a ``CompiledFunction``: one generated check-and-run function.

The general call path keys every call (``structure.call_key``: shape, dtype,
device, stride and requires_grad of each tensor, then hashing that tuple) and
checks the specialization's state guards in a loop: several microseconds per
tensor on TensorPlay, whose dtype/device getters cost ~0.7 us each. Like
torch.compile's guards plus its generated wrapper, each specialization gets one
straight-line Python function, generated for the call structure it was keyed on,
that checks exactly what its key and guards say and then calls the program:

* a torch tensor is checked by Dynamo's own C++ ``TensorGuards`` (type, dispatch
  keys, dtype, device, requires_grad, sizes, strides) when torch provides it, else
  attribute by attribute;
* a TensorPlay tensor first by identity: the same object as last time (a weak
  reference), with the same ``_version`` (every in-place op that changes metadata --
  ``resize_``, ``t_``, ``as_strided_``, ``set_`` -- bumps it), requires_grad and
  shape (``x.data = y`` bumps no version; a new shape is what a captured graph bakes
  in, as reshape sizes). A program of generated kernels also checks the stride and
  the data pointer (``.data =`` another storage). Any other tensor gets the full
  check of every field. Why two tiers: TensorPlay's getters cost 0.1-0.4 us each
  (dtype and device the most), so the full check of three tensors costs about as
  much as a small program's ops (benchmarks/RESULTS.md). Not seen by the identity
  tier of a program run through eager dispatch: ``x.data = y`` with ``y`` of x's
  shape but another dtype or strides -- eager dispatch computes eager's values for
  any strides and dtype; only a program that baked x's dtype into the graph (a cast
  to it) would differ;
* a scalar by type and value, a list / tuple by type and length, element-wise;
* state guards (parameters, globals, closure cells) by identity, inline; every module's plain
  numbers, flags and strings (``training``) in one call, an ``itemgetter`` per module.

When the program is a CUDA-graph replay (a runner with ``launch`` / ``collect``), the replay
is launched right after the argument checks and the state checks run while the GPU works:
they are most of a steady call's host time (about 120 us of a Llama call on the H200's
host), which the GPU otherwise idles through. A state check failing after the launch drops
the replay (it wrote only the graph's own buffers, which no caller holds).

It returns :data:`MISS` on any mismatch and the caller takes the general path,
which recompiles or reports exactly as before. Calls with structures not handled
here (dicts, dataclasses, other objects) always take the general path.

>>> entry = build_entry(spec, args, kwargs, key, runner.steady_callable())  # doctest: +SKIP
>>> out = entry(args, kwargs)   # MISS, or the program's result          # doctest: +SKIP
"""

from __future__ import annotations

import logging
import operator
import weakref
from typing import Any, Callable, Dict, List, Optional

from .capture.proxy import MISSING
from .capture.guards import HOOKS, VALUE, AttrKeys, _cell_value
from .capture.structure import SCALARS, framework_of_type, value_key
from .frameworks import adapter_for

logger = logging.getLogger("tensorplay_graph.compile")

#: What a generated entry returns when the call does not match its specialization.
MISS = object()


class _Unsupported(Exception):
    """The call holds a value the generated check does not handle."""


class _Writer:
    """Collects a generated function's lines and the constants it reads (as globals)."""

    def __init__(self, eager_dispatch: bool) -> None:
        #: The program runs framework ops (stride-generic), not generated kernels.
        self.eager_dispatch = eager_dispatch
        self.namespace: Dict[str, Any] = {"MISS": MISS, "MISSING": MISSING,
                                          "_fw": framework_of_type, "_ref": weakref.ref,
                                          "_cell": _cell_value}
        self.lines: List[str] = []
        self.state: List[str] = []     # globals the function rebinds (identity tier)
        self.leaves: List[str] = []    # tensor variables, in call_key order
        self.torch_leaves: List[str] = []
        self.torch_values: List[Any] = []
        self._count = 0

    def const(self, value: Any, stem: str = "c") -> str:
        name = f"{stem}{self._count}"
        self._count += 1
        self.namespace[name] = value
        return name

    def var(self) -> str:
        self._count += 1
        return f"v{self._count}"

    def fail_unless(self, condition: str, indent: str = "    ") -> None:
        self.lines.append(f"{indent}if not ({condition}):")
        self.lines.append(f"{indent}    return MISS")


def _check_value(w: _Writer, var: str, value: Any, key: Any) -> None:
    """Lines that return MISS unless ``var`` matches ``value``'s key ``key``.

    The checks are written from ``value`` (the call's own objects, after the call ran), so
    ``value`` must still have ``key``: a program that changed its argument in place
    (``x.resize_``, ``lst.append``) gets no entry."""
    if value_key(value, []) != key:
        raise _Unsupported("an argument changed during the call")
    if isinstance(key, tuple) and len(key) == 7 and key[0] == "tensor":
        _check_tensor(w, var, value, key[1])
    elif isinstance(value, SCALARS):
        if value is None or isinstance(value, bool):
            w.fail_unless(f"{var} is {value!r}")
        else:
            w.fail_unless(f"type({var}) is {w.const(type(value))} and {var} == "
                          f"{w.const(value)}")
    elif type(value) in (list, tuple):
        names = [w.var() for _ in value]
        w.fail_unless(f"type({var}) is {type(value).__name__} and len({var}) == {len(value)}")
        if names:
            w.lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = {var}")
        for name, item, item_key in zip(names, value, key[1]):
            _check_value(w, name, item, item_key)
    else:
        raise _Unsupported(type(value).__name__)


def _full_tensor_check(w: _Writer, var: str, value: Any, framework: str) -> str:
    return (f"_fw({var}) == {framework!r} and {var}.shape == {w.const(value.shape)} "
            f"and {var}.stride() == {w.const(value.stride())} and {var}.dtype == "
            f"{w.const(value.dtype)} and {var}.device == {w.const(value.device)} and "
            f"{var}.requires_grad is {bool(value.requires_grad)}")


def _check_tensor(w: _Writer, var: str, value: Any, framework: str) -> None:
    """Tensor checks; see the module docstring for the tiers."""
    w.leaves.append(var)
    if framework == "torch" and _tensor_guards() is not None:
        w.torch_leaves.append(var)       # checked together, once all leaves are known
        w.torch_values.append(value)
        return
    try:
        ref = weakref.ref(value)
    except TypeError:
        w.fail_unless(_full_tensor_check(w, var, value, framework))
        return
    # Identity tier: ``last`` holds (weak reference, _version, data_ptr) of the last tensor
    # that passed the full check; the tuple is rebound whole, so threads never mix halves.
    last = w.const((ref, value._version, value.data_ptr()), "last")
    w.state.append(last)
    layout = "" if w.eager_dispatch else \
        f" and {var}.stride() == {w.const(value.stride())} and {var}.data_ptr() == {last}[2]"
    same = (f"{last}[0]() is {var} and {var}._version == {last}[1] and "
            f"{var}.requires_grad is {bool(value.requires_grad)} and {var}.shape == "
            f"{w.const(value.shape)}{layout}")
    w.lines.append(f"    if not ({same}):")
    w.fail_unless(_full_tensor_check(w, var, value, framework), "        ")
    w.lines.append(f"        {last} = (_ref({var}), {var}._version, {var}.data_ptr())")


def _tensor_guards() -> Any:
    """Dynamo's C++ tensor check (``torch._C._dynamo.guards.TensorGuards``), or None."""
    return adapter_for("torch").tensor_guards()


def _modules_unchanged(checks: tuple) -> bool:
    """Every module's plain attributes and the scalars of the lists / dicts the program reads
    (``AttrKeys`` guards) as captured, in one C-level pass: an ``itemgetter`` per container
    (a deleted attribute or a shorter list fails it)."""
    getters, dicts, expected = checks
    try:
        return tuple(map(_call, getters, dicts)) == expected
    except (KeyError, IndexError):  # a deleted attribute, a shorter list
        return False


def _module_checks(guards: List[Any]) -> tuple:
    # itemgetter of one key returns the value itself, of several a tuple
    getters = tuple(operator.itemgetter(*keys) for _, keys, _ in guards)
    expected = tuple(values if len(values) > 1 else values[0] for _, _, values in guards)
    return getters, tuple(attrs for attrs, _, _ in guards), expected


_call = getattr(operator, "call", lambda function, *args: function(*args))  # Python < 3.11


def _state_check(w: _Writer, guard: Any) -> str:
    container, key, expected = guard
    current = f"_cell({w.const(container)})" if key is None else \
        f"{w.const(container)}.get({w.const(key)}, MISSING)"
    if isinstance(expected, SCALARS):
        return f"type({current}) is {w.const(type(expected))} and {current} == {w.const(expected)}"
    return f"{current} is {w.const(expected)}"


def build_entry(spec: Any, args: tuple, kwargs: Dict[str, Any], key: tuple,
                run: Callable[..., Any], eager_dispatch: bool = False
                ) -> Optional[Callable[[tuple, dict], Any]]:
    """The generated check-and-run function of ``spec`` for calls shaped like this one,
    or None when the call holds values it does not handle (the general path serves them).

    ``run`` is what the specialization calls: its runner, or the runner's steady callable;
    ``eager_dispatch``: ``run`` is the captured graph through eager dispatch.
    """
    w = _Writer(eager_dispatch)
    names = [f"a{i}" for i in range(len(args))]
    kw_names = [f"k{i}" for i in range(len(kwargs))]
    w.lines.append("def entry(args, kwargs):")
    w.lines.append("")  # the global statement, once the rebound names are known
    if kwargs:
        w.fail_unless(f"len(args) == {len(args)} and tuple(kwargs) == {w.const(tuple(kwargs))}")
    else:
        w.fail_unless(f"not kwargs and len(args) == {len(args)}")
    if names:
        w.lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args")
    for name, kw_name in zip(kwargs, kw_names):
        w.lines.append(f"    {kw_name} = kwargs[{name!r}]")
    try:
        for var, value, value_key in zip(names + kw_names, list(args) + list(kwargs.values()),
                                         list(key[:len(args)]) + _kwarg_keys(key, kwargs)):
            _check_value(w, var, value, value_key)
        if w.torch_leaves:
            guards = _tensor_guards()(*w.torch_values, dynamic_dims_sizes=None,
                                      dynamic_dims_strides=None)
            w.fail_unless(f"{w.const(guards.check)}({', '.join(w.torch_leaves)})")
    except _Unsupported as exc:
        logger.debug("no fast call path for this call structure (%s)", exc)
        return None
    call_args = ", ".join(w.leaves if spec.flat else names)
    # A CUDA-graph runner replays as soon as the arguments match; the program-state checks
    # below then run while the GPU works (a failed one drops the replay: ``launch``).
    launch = getattr(run, "launch", None) if getattr(run, "speculative", False) else None
    if launch is not None:
        w.lines.append(f"    launched = {w.const(launch, 'launch')}({call_args})")
    module_guards = [g for g in spec.guards if isinstance(g[1], AttrKeys)]
    for guard in spec.guards:
        if guard[1] is HOOKS:
            w.fail_unless(f"{w.const(guard[0].holds)}()")
        elif guard[1] is VALUE:
            w.fail_unless(f"{w.const(guard[0].read)}() == {w.const(guard[0].expected)}")
        elif not isinstance(guard[1], AttrKeys):
            w.fail_unless(_state_check(w, guard))
    if module_guards:
        checks = _module_checks(module_guards)
        w.fail_unless(f"{w.const(_modules_unchanged)}({w.const(checks)})")
    result = f"{w.const(run, 'run')}({call_args})"
    if launch is not None:
        result = f"{w.const(run.collect, 'collect')}(launched, {call_args})"
    if spec.output_spec is not None:
        result = f"{w.const(spec.restore, '_restore')}({result})"
    w.lines.append(f"    return {result}")
    w.lines[1] = f"    global {', '.join(w.state)}" if w.state else "    pass"
    source = "\n".join(w.lines) + "\n"
    exec(compile(source, "<tensorplay_graph fast call>", "exec"), w.namespace)
    entry = w.namespace["entry"]
    entry.source = source  # for tests and debugging
    return entry


def _kwarg_keys(key: tuple, kwargs: Dict[str, Any]) -> List[Any]:
    if not kwargs:
        return []
    return [item_key for _, item_key in key[-1][1]]
