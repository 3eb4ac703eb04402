"""Defining operators and the module-level ``register_*`` / ``get_kernel`` functions."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from .custom_op import CustomOpDef
from .registry import add_op, resolve_op
from .schema import (
    check_mutated_names,
    dispatch_key_of,
    normalize_device_types,
    slot_key,
    validate_mutates_args,
    validate_name,
    validate_schema,
)


def _op_definer(public_name: str, kind: dict, doc: str) -> Callable[..., Any]:
    """One of the ``custom_op``-style definers: they share one signature and differ only in
    the flag ``kind`` sets on the CustomOpDef (as torch.library's three do)."""

    def define(name: str, fn: Optional[Callable[..., Any]] = None, /, *,
               mutates_args: Sequence[str] = (), device_types: Any = None,
               schema: Optional[str] = None) -> Any:
        validate_name(name)
        mutated = validate_mutates_args(mutates_args)
        normalize_device_types(device_types)
        validate_schema(schema, name)

        def decorator(f: Callable[..., Any]) -> CustomOpDef:
            if not callable(f):
                raise TypeError(f"{name}: operator body must be callable, got {type(f)!r}")
            check_mutated_names(name, f, mutated)
            op = CustomOpDef(name, mutates_args=mutated, device_types=device_types,
                             schema=schema, **kind)
            add_op(op)
            op._install_default_kernel(f)
            return op

        return decorator(fn) if fn is not None else decorator

    define.__name__ = define.__qualname__ = public_name
    define.__doc__ = doc
    return define


custom_op = _op_definer(
    "custom_op", {},
    """Define an opaque custom operator ``"ns::name"`` (decorator, or ``fn`` positional).

    The body is the kernel of ``device_types`` (every device when omitted);
    add more with ``op.register_kernel``.  ``mutates_args`` names the
    arguments the kernel writes in place (compilers order them as barriers).

    >>> @custom_op("mylib::scale", mutates_args=())
    ... def scale(x, factor: float):
    ...     return x * factor
    """)

triton_op = _op_definer(
    "triton_op", {"is_triton_op": True},
    """Define an operator whose kernel launches Triton kernels through ``wrap_triton``.

    Captured as one node whose body never runs during capture; the Triton
    backend runs its registered kernels.
    """)

tile_lang_op = _op_definer(
    "tile_lang_op", {"is_tile_lang_op": True},
    """Define an operator whose kernel launches TileLang kernels through ``wrap_tilelang``.

    Like ``triton_op``: one opaque fusion-barrier node under capture.
    """)


def register_kernel(op: Any, device_types: Any = None, func: Optional[Callable] = None,
                    /, *, lib: Any = None) -> Any:
    """Register ``func`` for ``device_types`` of ``op`` (a CustomOpDef or its name).

    ``None``, an empty iterable and ``Composite...`` spellings select the
    device-agnostic slot.  Direct or as a decorator.
    """
    del lib
    op_def = resolve_op(op)
    key = slot_key(device_types)
    return op_def.register_kernel(key) if func is None else op_def.register_kernel(key, func)


def register_fake(op: Any, func: Optional[Callable] = None, /, *, lib: Any = None,
                  allow_override: bool = True) -> Any:
    """Register ``op``'s fake (meta) kernel; direct or as a decorator."""
    del lib, allow_override
    op_def = resolve_op(op)
    return op_def.register_fake(func) if func is not None else op_def.register_fake


def register_autograd(op: Any, backward: Callable, /, *,
                      setup_context: Optional[Callable] = None, lib: Any = None) -> None:
    """Register ``op``'s backward formula (see ``CustomOpDef.register_autograd``)."""
    del lib
    resolve_op(op).register_autograd(backward, setup_context=setup_context)


def register_vmap(op: Any, func: Optional[Callable] = None, /, *, lib: Any = None) -> Any:
    """Store ``op``'s vmap rule; direct or as a decorator."""
    del lib
    op_def = resolve_op(op)
    return op_def.register_vmap(func) if func is not None else op_def.register_vmap


def register_autocast(op: Any, device_type: str, cast_inputs: Any, /, *, lib: Any = None) -> None:
    """Cast ``op``'s floating inputs to ``cast_inputs`` while autocast is on for ``device_type``."""
    del lib
    resolve_op(op).register_autocast(device_type, cast_inputs)


def get_kernel(op: Any, dispatch_key: str) -> Callable[..., Any]:
    """The kernel registered under ``dispatch_key`` (``"cpu"``, ``"cuda"``, ``"default"``...).

    A disabled kernel counts as absent; a concrete key is not satisfied by the
    device-agnostic kernel (ask for ``"default"``).  LookupError when absent.
    """
    op_def = resolve_op(op)
    key = dispatch_key_of(dispatch_key)
    fn = op_def._kernels.get(key)
    if fn is not None and (key is None or key not in op_def._disabled):
        return fn
    raise LookupError(
        f"No kernel registered for {op_def.name} with dispatch key {dispatch_key!r}; "
        f"registered: {sorted(str(k) for k in op_def._kernels)}"
    )
