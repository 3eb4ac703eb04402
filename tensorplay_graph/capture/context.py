"""Capture state shared by the tracer, the proxy and the custom-op library.

``capturing()`` is the one check a hot path pays outside capture (one
``ContextVar.get``). ``capture_call`` is how code that is not a framework
function -- a registered custom op -- records itself as one node.
The user's source location is found here too, for ``meta["stack"]`` and for
error messages.
"""

from __future__ import annotations

import inspect
import linecache
import os
import sys
import types
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from ..errors import GraphCaptureError
from ..frameworks import adapter_for, loaded
from .structure import SCALARS as _SCALARS, is_framework_object

#: The innermost active Tracer on this thread/context, or None.
ACTIVE_TRACER: ContextVar[Any] = ContextVar("tensorplay_graph_active_tracer", default=None)


def capturing() -> bool:
    """True while a ``tensorplay_graph`` trace is running in this context."""
    return ACTIVE_TRACER.get() is not None


def iter_proxies(value: Any) -> Iterator[Any]:
    """Yield every :class:`Proxy` inside nested tuples, lists, dicts and slices."""
    from .proxy import Proxy

    if isinstance(value, Proxy):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from iter_proxies(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_proxies(item)
    elif isinstance(value, slice):
        yield from iter_proxies(value.start)
        yield from iter_proxies(value.stop)
        yield from iter_proxies(value.step)


_proxy_type: list = [None]


def _flat_proxies(values: Any, proxy_type: type) -> Iterator[Any]:
    """``iter_proxies(values)`` for ``(args, kwargs)``-shaped values, flat levels walked inline."""
    # The hot path of capture: one level of args (and kwargs) holding proxies and scalars.
    for value in values:
        items = value.values() if type(value) is dict else value
        if type(items) not in (tuple, list, type({}.values())):
            yield from iter_proxies(value)
            continue
        for item in items:
            if type(item) is proxy_type:
                yield item
            elif isinstance(item, (tuple, list, dict, slice, proxy_type)):
                yield from iter_proxies(item)


def tracer_of(*values: Any) -> Any:
    """The tracer owning the proxies inside ``values`` (None when there are none)."""
    proxy_type = _proxy_type[0]
    if proxy_type is None:  # proxy.py imports this module: bound on first use
        from .proxy import Proxy
        proxy_type = _proxy_type[0] = Proxy
    tracer = None
    for proxy in _flat_proxies(values, proxy_type):
        if tracer is None:
            tracer = proxy.tracer
        elif proxy.tracer is not tracer:
            raise GraphCaptureError(
                f"cannot combine values from two different traces ({proxy.node.name!r}); "
                "pass tensors between captures as inputs, not as captured proxies"
            )
    return tracer


def capture_call(target: Callable[..., Any], args: Tuple[Any, ...], kwargs: Optional[dict] = None,
                 example_fn: Optional[Callable[..., Any]] = None) -> Any:
    """Record ``target(*args, **kwargs)`` as ONE ``call_function`` node if a proxy is among the args.

    Returns the result :class:`Proxy`, or ``None`` when no argument is a proxy
    (the caller then runs eagerly). With example values on every input,
    ``example_fn`` (a fake or real implementation) computes the node's
    example value, so ``meta["tensor_meta"]`` and shapes stay known; the
    op's own body never runs during capture; without ``example_fn`` the node
    has no example value (later shape queries on it become nodes).

    >>> def __call__(self, *args, **kwargs):            # in a custom-op class
    ...     if capturing():
    ...         proxy = capture_call(self, args, kwargs, example_fn=self._fake)
    ...         if proxy is not None:
    ...             return proxy
    ...     return self._eager(*args, **kwargs)
    """
    if ACTIVE_TRACER.get() is None:
        return None
    kwargs = kwargs or {}
    tracer = tracer_of(args, kwargs)
    if tracer is None:
        return None
    from .tracer import NO_EXAMPLE

    return tracer.create_proxy("call_function", target, tuple(args), dict(kwargs),
                               example_fn=NO_EXAMPLE if example_fn is None else example_fn)


# -- proxies must not leave the capture ----------------------------------------



def _find_proxy(value: Any, path: str, depth: int, seen: set) -> Optional[str]:
    """The path of a Proxy inside ``value`` (containers and plain objects), or None."""
    from .proxy import Proxy

    if isinstance(value, Proxy):
        return path
    if depth <= 0 or isinstance(value, _SCALARS) or id(value) in seen or \
            isinstance(value, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
        return None
    seen.add(id(value))
    if isinstance(value, (tuple, list, set, frozenset)):
        items = enumerate(value) if isinstance(value, (tuple, list)) else ((None, v) for v in value)
        for key, item in items:
            found = _find_proxy(item, f"{path}[{key}]" if key is not None else f"{path}{{...}}",
                                depth - 1, seen)
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in list(value.items()):
            found = _find_proxy(item, f"{path}[{key!r}]", depth - 1, seen)
            if found:
                return found
        return None
    if is_framework_object(value):
        return None  # a tensor or a framework object: never holds our proxies
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        for key, item in list(attrs.items()):
            found = _find_proxy(item, f"{path}.{key}", depth - 1, seen)
            if found:
                return found
    for cls in type(value).__mro__:  # attributes kept in __slots__ have no __dict__ entry
        slots = cls.__dict__.get("__slots__", ())
        for key in (slots,) if isinstance(slots, str) else slots:
            found = _find_proxy(getattr(value, key, None), f"{path}.{key}", depth - 1, seen)
            if found:
                return found
    return None


def check_no_escape(function: Any, root: Any, result: Any) -> None:
    """Raise ``GraphCaptureError`` if a traced value would reach the caller after capture.

    Ways out: a generator / coroutine result (its values are produced after capture
    ends), a returned object that is not a tuple, list or dict, and a traced value
    stored on the module (``self.cache = h``), in a global or in a closure variable -- the
    last a ``GraphBreakError``: the caller undoes the trace's stores and the framework's
    frontend runs the program.
    """
    name = getattr(function, "__qualname__", repr(function))
    if inspect.isgenerator(result) or inspect.iscoroutine(result) or inspect.isasyncgen(result):
        getattr(result, "close", lambda: None)()
        raise GraphCaptureError(
            f"{name} is a generator or async function: its values are produced after capture "
            f"ends, so they would be traced placeholders. Compile the function that computes "
            f"each value, or return them all at once (`return tuple(...)`)")
    where = _returned_proxy(result, "result", set())
    if where is not None:
        raise GraphCaptureError(
            f"{name} returns a traced tensor inside an object compiled programs cannot rebuild "
            f"({where}); return tensors in tuples, lists or dicts (or a named tuple)")
    for label, value in _state_of(function, root):
        where = _find_proxy(value, label, 4, set())
        if where is not None:
            from .proxy import GraphBreakError
            error = GraphBreakError(
                f"{name} stores a traced tensor in {where} during capture (a cache, a log); a "
                f"captured graph cannot repeat that store, and after capture it would hold a "
                f"placeholder instead of a tensor. tensorplay_graph.compile hands such programs "
                f"to the framework's frontend (a graph break: Dynamo replays the store) or runs "
                f"them eagerly (TensorPlay); to keep our capture, return the value instead of "
                f"storing it (or keep the store outside the compiled function)")
            error.eager_for_tensorplay = True  # type: ignore[attr-defined]
            raise error


def _returned_proxy(value: Any, path: str, seen: set) -> Optional[str]:
    from .proxy import Proxy

    if isinstance(value, Proxy) or isinstance(value, _SCALARS):
        return None
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            found = _returned_proxy(item, f"{path}[{i}]", seen)
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _returned_proxy(item, f"{path}[{key!r}]", seen)
            if found:
                return found
        return None
    if isinstance(value, slice):
        return None
    from .structure import _traced_attributes
    traced = _traced_attributes(value)
    if traced:  # a plain object (a KV cache): rebuilt around the graph's outputs
        for key in traced:
            found = _returned_proxy(vars(value)[key], f"{path}.{key}", seen)
            if found:
                return found
        return None
    return _find_proxy(value, f"{path} ({type(value).__name__})", 4, seen)


def _state_of(function: Any, root: Any) -> Iterator[Tuple[str, Any]]:
    """What a program can write to and keep: module attributes (their tables too), globals,
    class attributes, closure cells and function attributes (the walk of ``object_state``)."""
    from .object_state import function_roots, module_roots
    for path, value, _ in module_roots(root, internal=True):
        yield path, value
    for path, value, _ in function_roots(function):
        yield path, value


# -- the user's source location ---------------------------------------------

_CAPTURE_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_DIR = os.path.dirname(_CAPTURE_DIR)
_LIBRARY_DIRS = (os.path.join(_CAPTURE_DIR, ""), os.path.join(_PACKAGE_DIR, "frameworks", ""),
                 os.path.join(_PACKAGE_DIR, "library", ""))


_dirs_cache: list = [None, None]  # [the imported frameworks, their dirs]


def _framework_dirs() -> Tuple[str, ...]:
    """Directories of the imported frameworks: their frames are never the user's call site."""
    # Asked once per captured node: cached until a framework is imported.
    key = loaded()
    if _dirs_cache[0] == key:
        return _dirs_cache[1]
    dirs = list(_LIBRARY_DIRS)
    for name in key:
        path = adapter_for(name).source_dir()
        if path:
            dirs.append(path)
    _dirs_cache[0], _dirs_cache[1] = key, tuple(dirs)
    return _dirs_cache[1]


def user_frame(frame: Optional[Any] = None) -> Optional[Any]:
    """The innermost frame (from ``frame`` outwards) outside our capture code and the frameworks."""
    skip = _framework_dirs()
    frame = frame if frame is not None else sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skip) and not filename.startswith("<frozen"):
            return frame
        frame = frame.f_back
    return None


#: id(code object) -> (the code object, kept so the id stays its own; for the user's code
#: a dict bytecode offset -> ``"file:line in fn"``, for library code ``None``). Keyed by
#: id: code objects compare equal across files. Valid for one ``_framework_dirs()``
#: answer. Capture asks once per node, mostly from the same few lines (loops, layers).
_code_verdicts: Dict[int, Tuple[Any, Optional[Dict[int, str]]]] = {}
_verdicts_for: list = [None]


def user_location() -> str:
    """``"file:line in fn"`` of the user's call site ("<unknown>" if none is found)."""
    skip = _framework_dirs()
    verdicts = _code_verdicts
    if _verdicts_for[0] is not skip:
        verdicts.clear()
        _verdicts_for[0] = skip
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        try:
            lines = verdicts[id(code)][1]
        except KeyError:
            filename = code.co_filename
            library = filename.startswith(skip) or filename.startswith("<frozen")
            lines = None if library else {}
            if len(verdicts) > 4096:  # programs made of fresh code objects (exec)
                verdicts.clear()
            verdicts[id(code)] = (code, lines)
        if lines is not None:
            where = lines.get(frame.f_lasti)
            if where is None:
                where = lines[frame.f_lasti] = \
                    f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
            return where
        frame = frame.f_back
    return "<unknown>"


def user_source_line(frame: Optional[Any] = None) -> str:
    """``"file:line in fn: `<source text>`"`` of the user's call site, for error messages."""
    frame = user_frame(frame)
    if frame is None:
        return "<unknown location>"
    code = frame.f_code
    text = linecache.getline(code.co_filename, frame.f_lineno).strip()
    where = f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
    return f"{where}: `{text}`" if text else where


def raise_location(error: BaseException) -> str:
    """``user_source_line`` of the innermost user frame in ``error``'s traceback."""
    tb = error.__traceback__
    innermost = None
    while tb is not None:
        innermost, tb = tb.tb_frame, tb.tb_next
    return user_source_line(innermost) if innermost is not None else "<unknown location>"
