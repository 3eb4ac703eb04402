"""Typed node metadata shared by passes.

``TensorMeta`` is framework-neutral: dtypes are canonical strings (``"float32"``),
devices are strings (``"cpu"``, ``"cuda:0"``).

Documented ``node.meta`` keys and the pass that writes each:

==================  =============================  ==========================================
key                 written by                     value
==================  =============================  ==========================================
``tensor_meta``     capture / ``shape_prop``       ``TensorMeta`` or a tuple of them
``val``             importers (tensorplay / fx)    the framework's example/fake value
``stack``           capture                        ``"file:line in fn"`` of the user's call
``prim``            ``normalize``                  ``prims.Prim`` record
``prim_args``       ``normalize``                  ``dict`` canonical argument name -> value
``barrier``         ``barriers``                   ``Barrier(code, reason)``
``region``          ``partition``                  region id (``int``)
``backend``         ``partition``                  name of the claiming backend (``str``)
``declined``        ``barriers`` / ``partition``   ``dict`` backend name -> reason
``claim``           ``barriers`` (``partition``    ``(backends, name, declined)``: the first
                    reads and removes it)          backend whose ``supports`` said yes
``kernel``          ``lower``                      the compiled ``Kernel`` of a lowered node
``subgraph``        ``lower``                      ``RegionGraph``: the region; ``.graph()`` builds its ``Graph``
``type``            ``Graph.create_node``          its ``type_expr`` argument (an annotation)
``layout``          ``channels_last`` (on the      ``str``: whether the program runs
                    output node)                   channels_last, and why
==================  =============================  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

FLOATING_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
INTEGER_DTYPES = frozenset({"uint8", "int8", "int16", "int32", "int64"})
ALL_DTYPES = FLOATING_DTYPES | INTEGER_DTYPES | {"bool", "complex64", "complex128"}
#: Node meta key: the value is an arange constant, element k holding k at offset k from its
#: data pointer (``training.functional``'s class indices, and a reshape of them); generated
#: kernels compute it from the index instead of reading it.
IOTA = "iota"


#: bytes per element of each dtype name
ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
            "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "complex64": 8,
            "complex128": 16}


def contiguous_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """Row-major strides of ``shape`` (in elements)."""
    strides = []
    running = 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def permuted_strides(meta: Any) -> Optional[Tuple[int, ...]]:
    """``meta``'s strides when they lay it out densely but not row-major (a transposed or
    channels_last result), else None. Exact comparison, size-1 dims included."""
    if not isinstance(meta, TensorMeta) or meta.stride is None:
        return None
    shape, stride = tuple(meta.shape), tuple(meta.stride)
    if 0 in shape or len(stride) != len(shape) or stride == contiguous_strides(shape):
        return None
    expected = 1  # a permutation of a row-major layout: no gap, no overlap (stride 0)
    for size, st in sorted((p for p in zip(shape, stride) if p[0] != 1), key=lambda p: p[1]):
        if not isinstance(st, int) or st != expected:
            return None
        expected *= size
    return stride


@dataclass(frozen=True, init=False)
class TensorMeta:
    """Shape, dtype, device and strides of one tensor value (no data).

    >>> TensorMeta((4, 8), "float32").stride
    (8, 1)
    """

    shape: Tuple[int, ...]
    dtype: str
    device: str = "cpu"
    stride: Optional[Tuple[int, ...]] = None
    requires_grad: bool = False

    def __init__(self, shape: Tuple[int, ...], dtype: str, device: str = "cpu",
                 stride: Optional[Tuple[int, ...]] = None, requires_grad: bool = False) -> None:
        # Written by hand (one per captured / propagated value): the frozen dataclass
        # __init__ plus __post_init__ cost ~8 object.__setattr__ calls.
        shape = tuple(map(int, shape))
        fields = self.__dict__
        fields["shape"] = shape
        fields["dtype"] = dtype
        fields["device"] = device
        fields["stride"] = contiguous_strides(shape) if stride is None else tuple(map(int, stride))
        fields["requires_grad"] = requires_grad

    @classmethod
    def of_ints(cls, shape: Tuple[int, ...], dtype: str, device: str,
                stride: Tuple[int, ...], requires_grad: bool) -> "TensorMeta":
        """The constructor without conversions or defaults: ``shape`` and ``stride`` are
        tuples of ``int`` already. Capture makes one per node."""
        meta = object.__new__(cls)
        fields = meta.__dict__
        fields["shape"] = shape
        fields["dtype"] = dtype
        fields["device"] = device
        fields["stride"] = stride
        fields["requires_grad"] = requires_grad
        return meta

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of a contiguous tensor of this shape and dtype (4 per element for a dtype
        the table lacks)."""
        return self.numel * ITEMSIZE.get(self.dtype, 4)

    @property
    def device_type(self) -> str:
        return self.device.split(":", 1)[0]

    @property
    def is_floating(self) -> bool:
        return self.dtype in FLOATING_DTYPES

    @property
    def is_contiguous(self) -> bool:
        """As the frameworks say: an empty tensor is contiguous whatever its strides (NumPy's
        empty arrays come with strides of 0; grad fuzz seed 99750605)."""
        if self.numel == 0:
            return True
        return all(
            size == 1 or st == cst
            for size, st, cst in zip(self.shape, self.stride, contiguous_strides(self.shape))
        )

    def with_(self, **changes: Any) -> "TensorMeta":
        """A copy with some fields replaced; strides reset to contiguous when shape changes."""
        fields = dict(shape=self.shape, dtype=self.dtype, device=self.device,
                      stride=self.stride, requires_grad=self.requires_grad)
        if "shape" in changes and "stride" not in changes:
            changes["stride"] = None
        fields.update(changes)
        return TensorMeta(**fields)

    def __str__(self) -> str:
        dims = "x".join(str(s) for s in self.shape) or "scalar"
        return f"{self.dtype}[{dims}]"


def tensor_meta_of(value: Any) -> Optional[TensorMeta]:
    """The ``TensorMeta`` a graph node carries (``node.meta["tensor_meta"]``), or None for
    constants, tuple-valued nodes and nodes shape_prop could not describe."""
    meta = getattr(value, "meta", None)
    found = meta.get("tensor_meta") if isinstance(meta, dict) else None
    return found if isinstance(found, TensorMeta) else None
