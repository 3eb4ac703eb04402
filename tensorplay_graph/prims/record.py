"""The ``Prim`` record: everything about one canonical op, in one place."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

#: Kinds of prims. ``norm`` is a row-wise fused pattern (softmax, layer_norm ...); ``gather``
#: moves elements into a fresh tensor, each output element one operand element (``cat``).
KINDS = ("pointwise", "reduction", "norm", "matmul", "view", "gather", "opaque")

#: Facts about a prim that backends read instead of its name (``Prim.traits``).
TRAITS = {
    "transcendental": "evaluated through exp / log / trig functions (costly per element)",
    "self_constant": "f(x, x) is a constant for finite x (x - x, x == x): a simplifier that "
                     "folds it is wrong for inf / NaN",
    "torch_opmath_scalar": "torch keeps a Python-scalar operand in opmath (float32) for "
                           "16-bit floats instead of casting it to the tensor's dtype",
    "tensorplay_opmath_scalar": "TensorPlay keeps a Python-scalar operand in opmath for "
                                "16-bit floats",
    "channels_last": "computes the same values from a channels_last 4-d input and, in eager, "
                     "keeps that layout (convolution, pooling, batch norm): the channels_last "
                     "pass runs it inside its channels_last region",
    "fresh": "an opaque prim whose result is always a new tensor, never an input's memory "
             "(convolution, pooling, a loss): nothing it returns aliases its operands",
    "float64_reference": "the reference backend computes float32 operands in float64 and rounds "
                         "once: NumPy's float32 routine is an ulp off eager's (tanh(9.5)); "
                         "lowerings['reference_float64'], if set, is the template it uses there",
}


def _parameters(fn: Callable[..., Any]) -> Any:
    try:
        return _cached_parameters(fn)
    except TypeError:  # unhashable template
        return _signature_parameters(fn)


def _signature_parameters(fn: Callable[..., Any]) -> Any:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


# Asked for every rendered node (one template per prim): the signature is read once.
_cached_parameters = functools.lru_cache(maxsize=1024)(_signature_parameters)


@dataclass
class Prim:
    """One canonical op.

    * ``signature`` -- a Python function whose parameters are the canonical
      arguments (``def add(a, b, alpha=1)``); ``normalize`` binds a node's
      args/kwargs to it and stores the result in ``node.meta["prim_args"]``.
    * ``meta`` -- pure rule ``(**prim_args with TensorMeta for tensors) -> TensorMeta``.
    * ``spellings`` -- the callables, method names and ``operator`` functions
      that normalize to this prim, as ``"tensorplay:add"``, ``"torch:add"``,
      ``"torch.nn.functional:gelu"``, ``"method:add"``, ``"operator:add"``.
    * ``lowerings`` -- backend name -> lowering template (backend-specific object).
    * ``side_effect`` / ``random`` / ``data_dependent`` -- barrier flags.
    * ``flags_if`` -- optional predicate ``(**prim_args) -> bool``: when set, the
      three flags hold only for calls where it is True (``dropout(training=False)``
      is the identity, not a random op). Unset: the flags hold for every call.
    * ``compute`` -- how a backend converts a pointwise prim's operands before computing:
      ``"result"`` to the output dtype (arithmetic, ``exp``), ``"promoted"`` to the operands'
      promoted dtype (comparisons: the output is bool), ``"none"`` left as they are
      (logical ops, casts).
    * ``dims`` -- reduction / norm: ``fn(ndim, **prim_args) -> dims`` of operand ``a`` the
      prim reduces or normalises over (read through :meth:`reduced_dims`; a reduction's
      default is its ``dim`` argument).
    * ``declines`` -- backend -> ``fn(args, out, framework) -> reason | None``: the cases
      where that backend's lowering exists but cannot match eager (``args``: canonical
      arguments with ``TensorMeta`` for tensors; ``out``: the result's ``TensorMeta``;
      ``framework``: whose eager semantics apply). Read by the backend's ``supports``.
    * ``traits`` -- facts from :data:`TRAITS` that backends read instead of the name.
    * ``aliases`` -- framework keyword names -> canonical names (``"self": "a"``);
      ``input``/``self`` always alias the first canonical parameter.
    * ``adapters`` -- spelling -> ``fn(args, kwargs) -> canonical dict`` for spellings
      whose argument order differs from ``signature`` (``"torch:var"``,
      ``"method:view"``; ``"tensorplay.method:var"`` for TensorPlay-only methods).
    * ``vjp`` -- reverse-mode rule ``(emitter, grad, out, **prim_args) -> {name: grad}``
      written in prims (registered by :mod:`.vjps`); ``None``: no rule, so a graph that
      needs this prim's gradient trains through eager autograd.
    """

    name: str
    kind: str
    signature: Callable[..., Any]
    meta: Callable[..., Any]
    spellings: Tuple[str, ...] = ()
    lowerings: Dict[str, Any] = field(default_factory=dict)
    side_effect: bool = False
    random: bool = False
    data_dependent: bool = False
    doc: str = ""
    aliases: Dict[str, str] = field(default_factory=dict)
    adapters: Dict[str, Callable[..., Dict[str, Any]]] = field(default_factory=dict)
    flags_if: Optional[Callable[..., bool]] = None
    compute: str = "result"
    dims: Optional[Callable[..., Tuple[int, ...]]] = None
    declines: Dict[str, Callable[..., Optional[str]]] = field(default_factory=dict)
    traits: FrozenSet[str] = frozenset()
    vjp: Optional[Callable[..., Any]] = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"prim {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        self.traits = frozenset(self.traits)
        unknown = self.traits - set(TRAITS)
        if unknown:
            raise ValueError(f"prim {self.name!r}: unknown traits {sorted(unknown)}; known: "
                             f"{sorted(TRAITS)}")
        self._sig = inspect.signature(self.signature)
        params = list(self._sig.parameters.values())
        # Signatures of plain parameters (most) bind without inspect (one bind per node).
        plain = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)
        self._plain = tuple((p.name, p.default) for p in params) if plain else None

    def bind(self, args: tuple, kwargs: dict) -> Dict[str, Any]:
        """Canonical argument dict (defaults applied) for a call's args/kwargs.

        Raises ``TypeError`` when the call does not fit the signature.
        """
        plain = self._plain
        if plain is None or len(args) > len(plain):
            bound = self._sig.bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)
        rest = plain[len(args):]
        if kwargs and any(all(key != name for name, _ in rest) for key in kwargs):
            raise TypeError(f"prim {self.name}: unexpected or repeated keyword arguments "
                            f"{sorted(kwargs)}")
        out: Dict[str, Any] = {plain[i][0]: arg for i, arg in enumerate(args)}
        for name, default in rest:
            if name in kwargs:
                out[name] = kwargs[name]
            elif default is inspect.Parameter.empty:
                raise TypeError(f"prim {self.name}: missing a required argument: {name!r}")
            else:
                out[name] = default
        return out

    def flags_apply(self, prim_args: Dict[str, Any]) -> bool:
        """Whether the barrier flags hold for a call with these canonical arguments."""
        return self.flags_if is None or bool(self.flags_if(**prim_args))

    def lowering(self, backend: str) -> Optional[Any]:
        """The record's lowering for ``backend`` (template, rule object or builder), or None."""
        return self.lowerings.get(backend)

    def reduced_dims(self, ndim: int, args: Dict[str, Any]) -> Tuple[int, ...]:
        """Sorted dims of operand ``a`` (``ndim`` dims) a reduction / norm reduces over."""
        if self.dims is not None:
            return tuple(self.dims(ndim, **args))
        if self.kind != "reduction":
            raise ValueError(f"prim {self.name!r} ({self.kind}) has no dims rule; give its "
                             f"record dims=fn(ndim, **args)")
        from .rules import reduction_dims
        return reduction_dims(args.get("dim"), ndim, self.name)

    def declined(self, backend: str, args: Dict[str, Any], out: Any,
                 framework: str = "torch") -> Optional[str]:
        """Why ``backend``'s lowering cannot match eager for this call (``declines``), or None."""
        check = self.declines.get(backend)
        return None if check is None else check(args, out, framework)

    def render(self, backend: str, framework: Optional[str] = None, **args: Any) -> str:
        """Expression text of this prim for ``backend``.

        ``args`` are the canonical arguments: tensor operands as expression
        strings (simple names -- templates may repeat them), Python scalars and
        static arguments as values. String templates are ``str.format``-ed;
        callable templates are called with the same keywords, plus ``framework``
        (``"torch"`` / ``"tensorplay"``) when they take it: the rare op whose semantics
        differ between the frameworks (``div(rounding_mode="floor")``).
        """
        template = self.lowerings.get(backend)
        if template is None:
            from ..errors import MissingLoweringError
            raise MissingLoweringError(f"prim {self.name!r} has no {backend!r} lowering; add one to "
                           f"its record's lowerings (have: {sorted(self.lowerings)})")
        if callable(template):
            if framework is not None and "framework" in _parameters(template):
                args["framework"] = framework
            return template(**args)
        return template.format(**args)

    def __repr__(self) -> str:
        return f"<prim {self.name} ({self.kind})>"
