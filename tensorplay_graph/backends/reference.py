"""The ``"reference"`` backend: a region becomes ONE generated NumPy function.

It exists so the whole pipeline (partition, lower, run) is exercised and
tested without a GPU, and as the simplest example of a backend: ``supports``
reads the prim record and ``TensorMeta``; ``compile`` renders each node's
``prim.lowerings["reference"]`` template into one Python function, casts each
value to its node's dtype, and converts results back to the inputs' framework
(TensorPlay or torch). Numerics follow the program's framework eager, not NumPy:
every operand is converted to the op's common dtype and computed in eager's
opmath dtype (float32 for 16-bit floats), scalars are cast as that framework casts
them, and ``prims/reference_math.py`` supplies the ops NumPy defines differently.

>>> from tensorplay_graph.backends import get_backend
>>> ref = get_backend("reference")
>>> kernel = ref.compile(region)                      # doctest: +SKIP
>>> print(kernel.source)                              # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import linecache
import logging
from typing import Any, Callable, Dict, Iterable, Optional

import numpy as np

from ..frameworks import adapter_for, framework_of
from ..ir.meta import FLOATING_DTYPES, INTEGER_DTYPES, TensorMeta, tensor_meta_of
from ..ir.node import map_arg
from ..prims.reference_math import opmath
from ..prims.rules import (framework_rules, is_scalar, result_type, scalar_kept_in_opmath,
                           scalar_out_of_range)
from .base import Kernel, Region, record_declines
from .registry import register_backend

__all__ = ["ReferenceBackend", "BACKEND"]

log = logging.getLogger(__name__)

# NumPy has no bfloat16; complex values are outside the prims' reference rules.
SUPPORTED_DTYPES = frozenset((FLOATING_DTYPES - {"bfloat16"}) | INTEGER_DTYPES | {"bool"})
_NP_DTYPE = {d: ("bool_" if d == "bool" else d) for d in SUPPORTED_DTYPES}
_CACHE: Dict[Any, Callable[..., Any]] = {}


# ----------------------------------------------------------------------------- runtime helpers

def _to_numpy(value: Any) -> Any:
    framework = framework_of(value)
    return value if framework is None else adapter_for(framework).to_numpy(value)


def _from_numpy(value: Any, framework: Optional[str]) -> Any:
    array = np.ascontiguousarray(value).reshape(np.shape(value))  # ascontiguousarray makes 0-d 1-d
    return array if framework is None else adapter_for(framework).from_numpy(array)


def _framework(values: Iterable[Any]) -> Optional[str]:
    for value in values:
        framework = framework_of(value)
        if framework is not None:
            return framework
    return None


def _cast(value: Any, dtype: str) -> Any:
    return np.asarray(value).astype(_NP_DTYPE[dtype], copy=False)


def _namespace() -> Dict[str, Any]:
    from ..prims.pointwise import REFERENCE_NAMESPACE  # np and an exact vectorised erf

    return {**REFERENCE_NAMESPACE, "np": np, "inf": np.inf, "nan": np.nan, "_cast": _cast,
            "_to_numpy": _to_numpy, "_from_numpy": _from_numpy, "_framework": _framework}


# ----------------------------------------------------------------------------- the backend

def _tensor_metas(node) -> Iterable[TensorMeta]:
    meta = node.meta.get("tensor_meta")
    if isinstance(meta, TensorMeta):
        yield meta


class ReferenceBackend:
    """Pointwise and reduction prims on CPU, numeric dtypes other than bfloat16.

    ``kinds`` selects the prim kinds it claims (views are left out by default:
    a kernel returns fresh tensors, so it cannot keep a view's aliasing).
    """

    name = "reference"
    #: Device types its kernels run on (``explain`` plans for them).
    devices: tuple = ("cpu",)
    #: Devices where its kernels are worth choosing over eager dispatch (none: it is a model).
    profitable_devices: tuple = ()

    def __init__(self, kinds: Iterable[str] = ("pointwise", "reduction")) -> None:
        self.kinds = tuple(kinds)

    def supports(self, node) -> Optional[str]:
        """``None`` if this backend can compile ``node``, else the reason it cannot."""
        prim = node.meta.get("prim")
        if prim is None:
            return "no prim (run normalize first, or the op has no prim record)"
        if prim.kind not in self.kinds:
            return f"handles {'/'.join(self.kinds)} prims, not {prim.kind} ({prim.name})"
        if prim.lowering("reference") is None:
            return f"prim {prim.name} has no 'reference' lowering in its record"
        meta = node.meta.get("tensor_meta")
        if not isinstance(meta, TensorMeta):
            return "no single tensor_meta on the node (run shape_prop first)"
        for value_meta in [meta, *(m for i in node.all_input_nodes for m in _tensor_metas(i))]:
            if value_meta.device_type != "cpu":
                return f"runs on cpu only, got a tensor on {value_meta.device}"
            if value_meta.dtype not in SUPPORTED_DTYPES:
                return f"dtype {value_meta.dtype} is not supported (NumPy has no such type)"
        why = record_declines(self.name, node)
        if why:
            return why
        return scalar_out_of_range(node) if prim.kind == "pointwise" else None

    def compile(self, region: Region) -> Kernel:
        """One Python function per framework for the whole region, cached by source hash.

        The graph does not always say which framework it came from (a program of operators
        only), and the semantics differ (TensorPlay casts ``300`` to bool in
        ``bool_x == 300``), so the kernel picks the code for its inputs' framework.
        """
        planned = region_framework(region)
        variants = {fw: _load(generate_source(region, fw)) for fw in _FRAMEWORKS}
        source, digest = variants[planned][1], variants[planned][2]
        key = (planned,) + tuple(v[2] for v in variants.values())
        kernel = _CACHE.get(key)
        if kernel is None:
            kernel = _CACHE[key] = _dispatcher({fw: v[0] for fw, v in variants.items()}, planned)
        return Kernel(name=f"reference_{digest}", backend=self.name, fn=kernel,
                      source=_header(region) + source,
                      launch={"cache_key": digest,
                              "sources": {fw: v[1] for fw, v in variants.items()}})


_FRAMEWORKS = ("torch", "tensorplay")


def _dispatcher(functions: Dict[str, Callable[..., Any]], planned: str) -> Callable[..., Any]:
    def kernel(*inputs: Any) -> Any:
        return functions[_framework(inputs) or planned](*inputs)
    return kernel


def _load(source: str):
    """(function, source, digest) for a kernel source; equal code compiles once."""
    # The comments name the region's nodes; the cache key is the code without them,
    # so regions of the same structure (repeated layers) compile once.
    code = "\n".join(line.split("  #", 1)[0] for line in source.splitlines())
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    fn = _CACHE.get(digest)
    if fn is None:
        filename = f"<tpgraph-reference-{digest}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = _namespace()
        exec(compile(source, filename, "exec"), namespace)
        fn = _CACHE[digest] = namespace["kernel"]
    return fn, source, digest


def _local_names(region: Region) -> Dict[Any, str]:
    """Positional names (``in0``, ``t0``): regions of the same structure share one source."""
    names: Dict[Any, str] = {node: f"in{i}" for i, node in enumerate(region.inputs)}
    names.update({node: f"t{i}" for i, node in enumerate(region.nodes)})
    return names


def region_framework(region: Region) -> str:
    """``"torch"`` / ``"tensorplay"``: whose eager semantics the region's code follows."""
    from ..frameworks.graphs import graph_framework

    graph = getattr(region.nodes[0], "graph", None) if region.nodes else None
    return graph_framework(graph) if graph is not None else "torch"


def _common_dtype(node, prim, framework: str) -> str:
    """The dtype a pointwise node's operands are converted to before computing."""
    out = node.meta["tensor_meta"].dtype
    if prim.compute != "promoted":
        return out
    args = node.meta["prim_args"]
    operands = [tensor_meta_of(v) or v for k, v in args.items() if k in _operands()]
    return result_type(*[o for o in operands if isinstance(o, TensorMeta) or is_scalar(o)],
                       framework=framework)


_OPERANDS: list = []


def _operands() -> tuple:
    if not _OPERANDS:  # bound on first use (asked per rendered operand)
        from ..prims.pointwise import OPERANDS
        _OPERANDS.append(OPERANDS)
    return _OPERANDS[0]


def _convert(name: str, raw: Any, text: Any, common: str, prim, framework: str) -> Any:
    """Source text of operand ``name`` converted as eager converts it."""
    work = opmath(common)
    kept = scalar_kept_in_opmath(prim, name, common, framework)
    if is_scalar(raw):
        return f"_scalar({raw!r}, {None if kept else common!r}, {work!r})"
    meta = tensor_meta_of(raw)
    if meta is None:
        return text
    # eager reads a 0-d tensor operand as a scalar: where it keeps scalars, the tensor keeps
    # its own dtype
    if kept and meta.ndim == 0 and meta.dtype in SUPPORTED_DTYPES:
        return f"_as({text}, {meta.dtype!r}, {work!r})"
    return f"_as({text}, {common!r}, {work!r})"


def _render_node(node, names: Dict[Any, str], framework: str = "torch") -> str:
    prim = node.meta["prim"]
    raw = node.meta["prim_args"]
    args = map_arg(raw, lambda n: names[n])
    if prim.kind == "pointwise" and prim.compute != "none":
        common = _common_dtype(node, prim, framework)
        args = {k: _convert(k, raw[k], v, common, prim, framework)
                if k in _operands() and raw[k] is not None else v for k, v in args.items()}
    if prim.kind == "pointwise" and "float64_reference" in prim.traits and \
            prim.compute != "none" and common == "float32":
        operand = next(k for k in args if k in _operands())  # these prims are unary
        template = "reference_float64" if "reference_float64" in prim.lowerings else "reference"
        inner = prim.render(template, framework=framework, **{**args, operand: "_v"})
        expr = f"_f64(lambda _v: {inner}, {args[operand]})"
    else:
        expr = prim.render("reference", framework=framework, **args)
    meta = node.meta.get("tensor_meta")
    if isinstance(meta, TensorMeta) and meta.dtype in SUPPORTED_DTYPES:
        return f"_cast({expr}, {meta.dtype!r})"
    return f"np.asarray({expr})"


def generate_source(region: Region, framework: Optional[str] = None) -> str:
    """The Python source of ``kernel(*inputs) -> tuple(outputs)`` for ``region``.

    Values get positional names; each line's comment names its prim and node.
    NumPy's overflow / invalid warnings are silenced: inf and NaN are results here,
    exactly as in eager.
    """
    framework = framework or region_framework(region)
    names = _local_names(region)
    params = [names[n] for n in region.inputs]
    lines = [f"def kernel({', '.join(params)}):  # {framework} semantics",
             f"    framework = _framework(({''.join(p + ', ' for p in params)}))",
             "    with np.errstate(all='ignore'):"]
    lines += [f"        {p} = _to_numpy({p})  # {n.name}" for p, n in zip(params, region.inputs)]
    dead_after = _dead_after(region)
    with framework_rules(framework):
        for node in region.nodes:
            prim = node.meta["prim"].name
            lines.append(f"        {names[node]} = {_render_node(node, names, framework)}"
                         f"  # {prim}: {node.name}")
            if dead_after.get(node):
                lines.append(f"        del {', '.join(names[v] for v in dead_after[node])}")
    outs = "".join(f"_from_numpy({names[o]}, framework), " for o in region.outputs)
    lines.append(f"    return ({outs})  # {', '.join(o.name for o in region.outputs)}")
    return "\n".join(lines) + "\n"


def _dead_after(region: Region) -> Dict[Any, list]:
    """``{node: [values whose last reader in the region is node]}``, region outputs left out.

    The kernel deletes each such value right after that line, so NumPy frees intermediates
    as eager frees them: a chain of n ops holds about two arrays at a time, not n.
    """
    last_reader: Dict[Any, Any] = {}
    for node in region.nodes:
        map_arg(node.meta["prim_args"], lambda value: last_reader.__setitem__(value, node))
    keep = set(region.outputs)
    dead: Dict[Any, list] = {}
    for value, reader in last_reader.items():
        if value not in keep:
            dead.setdefault(reader, []).append(value)
    return dead


def _header(region: Region) -> str:
    return (f"# tensorplay_graph reference kernel: region {region.id}\n"
            f"# nodes: {', '.join(n.name for n in region.nodes)}\n")


BACKEND = register_backend(ReferenceBackend())
