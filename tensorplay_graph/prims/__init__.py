"""The prim registry: canonical ops, and the lookup from a graph node to its prim.

>>> from tensorplay_graph import prims
>>> prims.get("exp").render("triton", a="x")
'tl.exp(x)'

Records live in ``pointwise``, ``reductions``, ``norms``, ``matmul``, ``views``,
``effects`` (random, data-dependent and side-effecting ops: barriers with a reason) and
``nn`` (convolution, batch norm, flatten, dropout variants);
each file registers its prims in one place (a ``register`` call per record).
Spellings are resolved lazily to callables of whichever frameworks are imported.
"""

from __future__ import annotations

import builtins
import importlib
import operator
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import UnsupportedOpError
from ..frameworks import adapter_for, loaded
from .record import KINDS, Prim

__all__ = ["Prim", "KINDS", "register", "unregister", "get", "all_prims", "lookup",
           "canonical_args", "prim_name"]

# ``vjps`` last: it attaches reverse-mode rules to the records the others registered.
_RECORD_MODULES = ("pointwise", "reductions", "norms", "matmul", "views", "index_maps", "effects",
                   "nn", "losses", "vjps")
_REGISTRY: Dict[str, Prim] = {}
_loaded = False

# Framework keywords that carry no meaning for a prim when left at these values;
# any other value (``out=t``, ``inplace=True``) means the call is not that prim.
_NEUTRAL_KWARGS: Dict[str, Tuple[Any, ...]] = {
    "out": (None,), "inplace": (False,), "implicit": (False,), "non_blocking": (False,),
    "copy": (False,), "_stacklevel": None, "memory_format": None, "cudnn_enable": None,
    "layout": None, "pin_memory": (None, False),
}


def register(prim: Prim) -> Prim:
    """Add ``prim`` to the registry (names are unique)."""
    if prim.name in _REGISTRY:
        raise ValueError(f"prim {prim.name!r} is registered twice")
    _REGISTRY[prim.name] = prim
    _TABLES.clear()
    return prim


def unregister(name: str) -> Prim:
    """Remove the prim called ``name`` (tests, notebooks); its spellings stop normalizing."""
    _load()
    prim = _REGISTRY.pop(name, None)
    if prim is None:
        raise UnsupportedOpError(f"no prim named {name!r} to unregister; known prims: "
                                 f"{', '.join(sorted(_REGISTRY))}")
    _TABLES.clear()
    return prim


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for name in _RECORD_MODULES:
            importlib.import_module(f"{__name__}.{name}")


def get(name: str) -> Prim:
    """The prim called ``name``; ``UnsupportedOpError`` lists the known names otherwise."""
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnsupportedOpError(f"no prim named {name!r}; known prims: "
                                 f"{', '.join(sorted(_REGISTRY))}") from None


def all_prims() -> List[Prim]:
    _load()
    return list(_REGISTRY.values())


# ----------------------------------------------------------------------------- arguments

def _canonical_value(value: Any) -> Any:
    """Framework dtypes become canonical strings; TensorPlay's ``DType.undefined`` is None."""
    text = type(value).__name__
    if text in ("dtype", "DType"):
        name = str(value).rsplit(".", 1)[-1].split(":", 1)[0]
        return None if name == "undefined" else name
    if text in ("Size",):
        return tuple(value)
    return value


def canonical_args(prim: Prim, args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
    """Bind a call to ``prim.signature``, renaming framework keywords; None if it does not fit."""
    first = next(iter(prim._sig.parameters))
    renamed = {}
    for key, value in kwargs.items():
        if key in _NEUTRAL_KWARGS:
            allowed = _NEUTRAL_KWARGS[key]
            if allowed is None or any(value is v for v in allowed):
                continue
            return None
        key = prim.aliases.get(key, first if key in ("input", "self") else key)
        renamed[key] = value
    try:
        bound = prim.bind(tuple(args), renamed)
    except TypeError:
        return None
    return {k: _canonical_value(v) for k, v in bound.items()}


def _default_adapter(prim: Prim) -> Callable[[tuple, dict], Optional[Dict[str, Any]]]:
    return lambda args, kwargs: canonical_args(prim, args, kwargs)


def _custom_adapter(prim: Prim, adapter: Callable) -> Callable:
    def adapt(args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
        try:
            result = adapter(args, kwargs)
        except (TypeError, ValueError):
            return None
        return None if result is None else canonical_args(prim, (), result)
    return adapt


# ----------------------------------------------------------------------------- lookup tables

_TABLES: Dict[str, Any] = {}
_FRAMEWORK_MODULES = {
    "tensorplay": ("tensorplay", "tensorplay.functional", "tensorplay.nn.functional"),
    "torch": ("torch", "torch.nn.functional"),
}


def _resolve(spelling: str) -> Tuple[str, str, str]:
    """``"torch.nn.functional:gelu"`` -> (framework, module, name); methods/operators too."""
    module, _, name = spelling.partition(":")
    return module.split(".", 1)[0], module, name


def _adapter_for(prim: Prim, key: str) -> Callable:
    custom = prim.adapters.get(key)
    return _custom_adapter(prim, custom) if custom else _default_adapter(prim)


def _key(target: Any) -> Any:
    """Targets are dict keys; a few framework callables are unhashable: key those by id
    (the tables keep the object alive, so the id stays valid)."""
    try:
        hash(target)
        return target
    except TypeError:
        return ("id", id(target))


def _build_tables(frameworks: Tuple[str, ...]) -> Dict[str, Any]:
    functions: Dict[Any, Tuple[Prim, Callable]] = {}
    methods: Dict[Tuple[str, str], Tuple[Prim, Callable]] = {}
    keep: List[Any] = []
    for prim in all_prims():
        for spelling in prim.spellings:
            framework, module, name = _resolve(spelling)
            if framework in ("operator", "builtins"):
                module_object = operator if framework == "operator" else builtins
                functions[_key(getattr(module_object, name))] = (prim, _adapter_for(prim, spelling))
            elif framework == "method":
                for fw in ("torch", "tensorplay"):
                    adapter = _adapter_for(prim, spelling if fw == "torch" or
                                           f"tensorplay.{spelling}" not in prim.adapters
                                           else f"tensorplay.{spelling}")
                    methods[(fw, name)] = (prim, adapter)
                    target = adapter_for(fw).method(name) if fw in frameworks else None
                    if target is not None:
                        functions.setdefault(_key(target), (prim, adapter))
                        keep.append(target)
            elif framework == "tensorplay_graph":  # our own callables (batch_norm_channels)
                target = getattr(importlib.import_module(module), name)
                functions[_key(target)] = (prim, _adapter_for(prim, spelling))
                keep.append(target)
            elif framework in frameworks:
                target = adapter_for(framework).callable_named(module, name)
                if target is not None:
                    functions[_key(target)] = (prim, _adapter_for(prim, spelling))
                    keep.append(target)
                    if framework == "tensorplay" and module == "tensorplay":
                        # tensorplay.X is tensorplay.functional.X; register both, in case.
                        ftarget = adapter_for(framework).callable_named("tensorplay.functional", name)
                        if ftarget is not None:
                            functions.setdefault(_key(ftarget), (prim, _adapter_for(prim, spelling)))
                            keep.append(ftarget)
    return {"functions": functions, "methods": methods, "keep": keep}


def _tables() -> Dict[str, Any]:
    present = tuple(fw for fw in loaded() if fw in _FRAMEWORK_MODULES)
    tables = _TABLES.get(present)
    if tables is None:
        for fw in present:  # nn.functional may not be imported yet
            for module in _FRAMEWORK_MODULES[fw][1:]:
                adapter_for(fw).import_module(module)
        tables = _TABLES[present] = _build_tables(present)
    return tables


def lookup_call(op: str, target: Any, args: tuple, kwargs: dict,
                framework: str = "torch") -> Optional[Tuple[Prim, Dict[str, Any]]]:
    """(Prim, canonical args) of a call, or None when no prim expresses it.

    ``framework`` picks the argument convention of ``call_method`` targets whose
    positional meaning differs between TensorPlay and torch (``x.var(0)``).
    """
    tables = _tables()
    if op == "call_function":
        entry = tables["functions"].get(_key(target))
    elif op == "call_method":
        entry = tables["methods"].get((framework, target))
    else:
        return None
    if entry is None:
        return None
    prim, adapter = entry
    prim_args = adapter(tuple(args), dict(kwargs))
    return None if prim_args is None else (prim, prim_args)


def prim_name(node: Any) -> Optional[str]:
    """The name of the prim ``normalize`` recorded on graph node ``node``, or None (not a
    node, or no prim)."""
    meta = getattr(node, "meta", None)
    prim = meta.get("prim") if isinstance(meta, dict) else None
    return None if prim is None else prim.name


def lookup(node: Any, framework: str = "torch") -> Optional[Tuple[Prim, Dict[str, Any]]]:
    """(Prim, canonical args) of a graph node, or None (placeholders, unknown ops)."""
    return lookup_call(node.op, node.target, node.args, node.kwargs, framework)
