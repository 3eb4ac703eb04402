"""``Library`` (DEF / IMPL / FRAGMENT) and the string-based ``define`` / ``impl`` API."""

from __future__ import annotations

from typing import Any, Callable, Optional

from .api import register_fake, register_kernel
from .custom_op import CustomOpDef
from .registry import DEF_NAMESPACES, LOCK, add_op, find_op, resolve_op
from .schema import is_composite, require_str, schema_head, validate_name, validate_schema

_KINDS = ("DEF", "IMPL", "FRAGMENT")


def _define_or_get(qualname: str, schema: Optional[str]) -> CustomOpDef:
    validate_name(qualname)
    validate_schema(schema, qualname)
    with LOCK:
        op = find_op(qualname)
        if op is None:
            op = add_op(CustomOpDef(qualname, schema=schema))
        elif schema is not None:
            op._schema = schema
    return op


class Library:
    """Operators of one namespace, defined from schema strings.

    ``"DEF"`` owns the namespace (one DEF library per namespace), ``"IMPL"``
    adds kernels, ``"FRAGMENT"`` extends a namespace from several places.

    >>> lib = Library("mylib", "FRAGMENT")
    >>> lib.define("mylib::twice(Tensor x) -> Tensor")
    >>> lib.impl("twice", lambda x: x * 2, device_type="cpu")   # doctest: +SKIP
    """

    def __init__(self, namespace: str, kind: str = "DEF") -> None:
        if not isinstance(namespace, str) or not namespace.isidentifier():
            raise ValueError(f"library namespace must be an identifier, got {namespace!r}")
        if kind not in _KINDS:
            raise ValueError(f"unknown Library kind {kind!r}; expected one of {_KINDS}")
        self.ns = namespace
        self.kind = kind
        self._op_names: list[str] = []
        if kind == "DEF":
            with LOCK:
                if namespace in DEF_NAMESPACES:
                    raise RuntimeError(
                        f"only a single DEF Library may exist for namespace {namespace!r}; "
                        'use Library(ns, "FRAGMENT") to add operators elsewhere'
                    )
                DEF_NAMESPACES.add(namespace)

    def define(self, schema: str, *, alias_analysis: str = "", tags: Any = ()) -> None:
        """Define an operator from ``"op(Tensor x) -> Tensor"`` or ``"ns::op(...) -> ..."``.

        The schema is kept on the op; ``alias_analysis`` and ``tags`` are
        accepted for call-site compatibility.
        """
        del alias_analysis, tags
        if not isinstance(schema, str) or "(" not in schema:
            raise ValueError(f'schema must look like "ns::op(Tensor x) -> Tensor", got {schema!r}')
        head = schema_head(schema)
        if "::" not in head:
            head = f"{self.ns}::{head}"
            schema = f"{head}({schema.split('(', 1)[1]}"
        namespace, _ = validate_name(head)
        if namespace != self.ns:
            raise ValueError(
                f"schema namespace {namespace!r} does not match library namespace {self.ns!r}"
            )
        with LOCK:
            existing = find_op(head)
            if existing is not None and self.kind != "FRAGMENT":
                raise RuntimeError(
                    f"operator {head!r} already defined in namespace {self.ns!r}; "
                    f"use get_op({head!r}) or a FRAGMENT library"
                )
            op = existing or add_op(CustomOpDef(head))
            if "->" in schema:
                op._schema = validate_schema(schema, head)
        if op.name not in self._op_names:
            self._op_names.append(op.name)

    def impl(
        self,
        op_name: Any,
        fn: Optional[Callable[..., Any]] = None,
        *,
        device_type: str = "CompositeExplicitAutograd",
        dispatch_key: str = "",
        allow_override: bool = True,
    ) -> Any:
        """Register a kernel of ``op_name`` (``"op"`` or ``"ns::op"``); direct or decorator.

        ``dispatch_key`` wins over ``device_type`` when given; composite
        spellings select the device-agnostic slot.
        """
        del allow_override
        if dispatch_key:
            device_type = dispatch_key
        require_str(device_type, "device_type")
        key = None if is_composite(device_type) else device_type.lower()
        if isinstance(op_name, CustomOpDef):
            op = op_name
        else:
            target = op_name if "::" in op_name else f"{self.ns}::{op_name}"
            op = resolve_op(target)
        if fn is not None and not callable(fn):
            raise TypeError(f"{op.name}: kernel must be callable, got {type(fn)!r}")

        def wrapper(func: Callable[..., Any]) -> Callable[..., Any]:
            op.register_kernel(key, func)
            return func

        return wrapper(fn) if fn is not None else wrapper

    def fallback(self, kind: Any = None, *args: Any, **kwargs: Any) -> None:
        """Not supported: there is no per-dispatch-key fallthrough table."""
        raise NotImplementedError(
            f"Library.fallback is not supported (namespace {self.ns!r}, kind={kind!r}): "
            "there is no per-dispatch-key fallthrough table; register kernels with impl()"
        )

    def __repr__(self) -> str:
        return f"<Library ns={self.ns!r} kind={self.kind}>"


def define(qualname: str, schema: Optional[str] = None, *, lib: Any = None, tags: Any = ()) -> None:
    """Define ``"ns::op"`` (a full ``"ns::op(Tensor x) -> Tensor"`` string may be pasted).

    Kernels follow with ``impl``; the schema stays on the op.
    """
    del lib, tags
    if isinstance(qualname, str) and "(" in qualname:
        if schema is None:
            schema = qualname
        qualname = schema_head(qualname)
    _define_or_get(qualname, schema)


def impl(qualname: Any, types: Any, func: Optional[Callable] = None, /, *, lib: Any = None) -> Any:
    """Register a kernel of ``qualname`` for ``types`` (devices or ``Composite...``)."""
    del lib
    return register_kernel(qualname, types, func)


def impl_abstract(qualname: Any, func: Optional[Callable] = None, /, *, lib: Any = None) -> Any:
    """Register the fake kernel of ``qualname`` (alias of ``register_fake``)."""
    return register_fake(qualname, func, lib=lib)
