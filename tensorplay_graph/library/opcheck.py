"""``opcheck``: catch the registration mistakes that break compiled programs.

Four checks, on TensorPlay or torch sample inputs:

- ``test_schema``: no undeclared input mutation, no output aliasing an input;
- ``test_autograd_registration``: gradients reach every floating input;
- ``test_faketensor``: the fake kernel reproduces output count/shape/dtype/device;
- ``test_aot_dispatch_dynamic``: the op captures as one node and the captured
  graph reproduces eager outputs; on torch inputs, ``torch.compile(dynamic=True)``
  of a training call (AOTAutograd) reproduces eager outputs and gradients.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional, Sequence

from ..frameworks import adapter_for
from . import dispatch as _dispatch
from .registry import resolve_op

DEFAULT_TESTS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)


def _flatten(value: Any) -> list:
    return list(_dispatch.iter_tensors(value))


def _module(tensor: Any) -> Any:
    """The top-level module of ``tensor``'s framework (``equal``, ``ones_like``, ``allclose``)."""
    return adapter_for(tensor).module


def _bind_named_tensors(op: Any, args: tuple, kwargs: dict) -> dict:
    """Argument name -> tensor, through the kernel's signature when it binds."""
    named: dict = {}
    fn = op.signature_fn
    bound = None
    if fn is not None:
        try:
            bound = inspect.signature(fn).bind_partial(*args, **kwargs)
        except (TypeError, ValueError):
            bound = None
    if bound is not None:
        for name, value in bound.arguments.items():
            tensors = _flatten(value)
            for i, tensor in enumerate(tensors):
                named[name if i == 0 else f"{name}[{i}]"] = tensor
        return named
    for index, value in enumerate(args):
        for i, tensor in enumerate(_flatten(value)):
            named[f"arg{index}" if i == 0 else f"arg{index}[{i}]"] = tensor
    for name, value in kwargs.items():
        for i, tensor in enumerate(_flatten(value)):
            named[name if i == 0 else f"{name}[{i}]"] = tensor
    return named


def _same(a: Any, b: Any) -> bool:
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return False
    return bool(_module(a).equal(a, b))


def _span(tensor: Any) -> tuple[int, int]:
    """Byte range ``[start, end)`` a tensor can touch."""
    start = tensor.data_ptr()
    extent = 1 + sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride()))
    return start, start + extent * tensor.element_size()


def _overlaps(a: Any, b: Any) -> bool:
    if a.numel() == 0 or b.numel() == 0:
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def test_schema(op: Any, args: tuple, kwargs: dict) -> None:
    named = _bind_named_tensors(op, args, kwargs)
    snapshots = {name: tensor.clone() for name, tensor in named.items()}
    output = op(*args, **kwargs)
    for name, before in snapshots.items():
        if name.split("[")[0] in op.mutates_args:
            continue
        if not _same(before, named[name]):
            raise AssertionError(
                f"{op.name}: the kernel mutated argument {name!r}, which is not declared "
                f"in mutates_args; add it to mutates_args or stop mutating it"
            )
    for i, tensor in enumerate(_flatten(output)):
        for name, source in named.items():
            if _overlaps(tensor, source):
                raise AssertionError(
                    f"{op.name}: output {i} aliases input {name!r}; custom ops must return "
                    "fresh tensors (return a .clone(); in-place writes go through mutates_args)"
                )


def test_faketensor(op: Any, args: tuple, kwargs: dict) -> None:
    if not op.has_fake:
        raise AssertionError(
            f"{op.name}: no fake kernel registered; register one with "
            f"{op.name}.register_fake(fn) so compilers can infer output metadata"
        )
    real = _flatten(op(*args, **kwargs))
    fake = _flatten(op.fake(*args, **kwargs))
    if len(real) != len(fake):
        raise AssertionError(
            f"{op.name}: fake kernel returned {len(fake)} tensor(s) but the real kernel "
            f"returned {len(real)}"
        )
    for i, (r, f) in enumerate(zip(real, fake)):
        if tuple(r.shape) != tuple(f.shape):
            raise AssertionError(
                f"{op.name}: output {i} shape mismatch (real {tuple(r.shape)} vs fake "
                f"{tuple(f.shape)}); fix the fake kernel"
            )
        if r.dtype != f.dtype:
            raise AssertionError(
                f"{op.name}: output {i} dtype mismatch (real {r.dtype} vs fake {f.dtype})"
            )
        if str(r.device) != str(f.device):
            raise AssertionError(
                f"{op.name}: output {i} device mismatch (real {r.device} vs fake {f.device})"
            )


def _as_leaf(value: Any, leaves: list) -> Any:
    if _dispatch.framework_of(value) is not None and value.dtype.is_floating_point:
        leaf = value.detach().clone().requires_grad_(True)
        leaves.append((value, leaf))
        return leaf
    return value


def _mutated_positions(op: Any, args: tuple, kwargs: dict) -> set:
    """Positions and keyword names of declared-mutated arguments (never made leaves)."""
    if not op.mutates_args or op.signature_fn is None:
        return set()
    try:
        names = list(inspect.signature(op.signature_fn).parameters)
    except (TypeError, ValueError):
        return set()
    found = {i for i, name in enumerate(names[: len(args)]) if name in op.mutates_args}
    return found | {k for k in kwargs if k in op.mutates_args}


def test_autograd_registration(op: Any, args: tuple, kwargs: dict) -> None:
    leaves: list = []
    mutated = _mutated_positions(op, args, kwargs)
    new_args = tuple(a if i in mutated else _as_leaf(a, leaves) for i, a in enumerate(args))
    new_kwargs = {k: v if k in mutated else _as_leaf(v, leaves) for k, v in kwargs.items()}
    if not leaves:
        return  # nothing differentiable to probe
    outputs = [t for t in _flatten(op(*new_args, **new_kwargs)) if t.dtype.is_floating_point]
    if not outputs:
        return
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise AssertionError(
                f"{op.name}: output {i} does not require grad although a floating input "
                f"does; the kernel breaks the autograd graph: register a formula with "
                f"{op.name}.register_autograd(backward, setup_context=...)"
            )
    first = outputs[0]
    first.backward(_module(first).ones_like(first))
    for original, leaf in leaves:
        grad = leaf.grad
        if grad is None:
            raise AssertionError(
                f"{op.name}: no gradient reached an input of shape {tuple(original.shape)}; "
                f"register an autograd formula with {op.name}.register_autograd"
            )
        if tuple(grad.shape) != tuple(original.shape):
            raise AssertionError(
                f"{op.name}: gradient shape {tuple(grad.shape)} does not match input shape "
                f"{tuple(original.shape)}"
            )


def _clone_tensors(value: Any) -> Any:
    if _dispatch.framework_of(value) is not None:
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone_tensors(v) for v in value)
    return value


def test_aot_dispatch_dynamic(op: Any, args: tuple, kwargs: dict) -> None:
    from ..capture import capture

    positions = [i for i, a in enumerate(args) if _dispatch.framework_of(a) is not None]
    if not positions:
        return  # nothing symbolic can flow: capture adds no information

    def program(*tensors: Any) -> Any:
        call_args = list(args)
        for position, tensor in zip(positions, tensors):
            call_args[position] = tensor
        return op(*call_args, **kwargs)

    # The tracer reads the signature for placeholders: give it one name per tensor.
    program.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for i in range(len(positions))
    ])
    examples = [args[i].clone() for i in positions]
    gm = capture(program, *examples)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    if len(calls) != 1 or calls[0].target is not op:
        raise AssertionError(
            f"{op.name}: capture recorded {[str(n.target) for n in calls]} instead of one "
            f"call_function node targeting the op"
        )
    eager_inputs = [args[i].clone() for i in positions]
    graph_inputs = [args[i].clone() for i in positions]
    want = _flatten(program(*eager_inputs))
    got = _flatten(gm(*graph_inputs))
    if len(want) != len(got):
        raise AssertionError(
            f"{op.name}: captured graph returned {len(got)} tensor(s), eager returned {len(want)}"
        )
    for i, (w, g) in enumerate(zip(want, got)):
        if not bool(_module(w).allclose(w, g, equal_nan=True)):
            raise AssertionError(f"{op.name}: captured output {i} diverges from eager")
    for i, (w, g) in enumerate(zip(eager_inputs, graph_inputs)):
        if not _same(w, g):
            raise AssertionError(
                f"{op.name}: input {i} after the captured graph differs from eager "
                "(a declared mutation was lost or repeated)"
            )
    if _dispatch.framework_of(examples[0]) == "torch":
        from ..training.opcheck_aot import check_aot_training
        check_aot_training(op, program, examples)  # forward + backward through AOTAutograd


_TESTS = {
    "test_schema": test_schema,
    "test_autograd_registration": test_autograd_registration,
    "test_faketensor": test_faketensor,
    "test_aot_dispatch_dynamic": test_aot_dispatch_dynamic,
}


def opcheck(
    op: Any,
    args: tuple,
    kwargs: Optional[dict] = None,
    *,
    test_utils: Any = DEFAULT_TESTS,
    raise_exception: bool = True,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
) -> dict:
    """Run the selected checks on ``op(*args, **kwargs)``; returns ``{test: failure}``.

    ``test_utils`` is one name, a sequence of names or ``"all"``; unknown
    names raise ValueError.  With ``raise_exception`` a failure raises
    RuntimeError listing every failed check.

    >>> opcheck(my_op, (tensorplay.randn(3),))        # doctest: +SKIP
    {}
    """
    del atol, rtol  # accepted for signature compatibility; comparisons use allclose defaults
    op_def = resolve_op(op)
    kwargs = dict(kwargs or {})
    if isinstance(test_utils, str):
        selected: Sequence[str] = DEFAULT_TESTS if test_utils == "all" else (test_utils,)
    else:
        selected = tuple(test_utils)
    unknown = [t for t in selected if t not in _TESTS]
    if unknown:
        raise ValueError(
            f"unknown opcheck test_utils {unknown}; expected a subset of {sorted(_TESTS)} or 'all'"
        )
    failures: dict = {}
    for name in selected:
        try:
            _TESTS[name](op_def, tuple(_clone_tensors(list(args))), _clone_tensors_dict(kwargs))
        except Exception as exc:  # noqa: BLE001 - reported per check, raised together below
            failures[name] = f"{type(exc).__name__}: {exc}"
    if failures and raise_exception:
        rendered = "\n".join(f"  {k}: {v}" for k, v in failures.items())
        raise RuntimeError(f"opcheck({op_def.name}) failed {len(failures)} check(s):\n{rendered}")
    return failures


def _clone_tensors_dict(kwargs: dict) -> dict:
    return {k: _clone_tensors(v) for k, v in kwargs.items()}


# pytest must not collect the check functions when tests import this module.
for _fn in _TESTS.values():
    _fn.__test__ = False  # type: ignore[attr-defined]
