"""Backend checks of the pointwise prims (records: ``pointwise.py``; templates:
``pointwise_lowerings.py``).

Each is a record's ``declines`` entry: ``fn(args, out, framework)`` with ``TensorMeta`` for
tensor arguments; it names a case where a template exists but cannot match eager, and the
backend's ``supports`` declines it.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

from ..frameworks import adapter_for
from ..ir.meta import TensorMeta
from .rules import HALF_FLOATS, is_scalar


def add_reference_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    if args.get("alpha", 1) != 1 and out.dtype in HALF_FLOATS:
        return (f"alpha on {out.dtype}: eager rounds alpha * b to {out.dtype} before adding; "
                "not modelled")
    return None


def div_floor_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    if args.get("rounding_mode") == "floor":
        # eager: (a - fmod(a, b)) / b rounded; floor(a / b) differs (1.0 // 0.1 is 9, not 10)
        return "div(rounding_mode='floor') is not floor(a / b) in eager"
    return None


def _zero(value: Any) -> bool:
    return is_scalar(value) and not isinstance(value, bool) and float(value) == 0.0


def div_tilelang_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    # TVM's arith simplifier folds float expressions as if they were integers: 0 / x becomes
    # 0 (eager: NaN for x = 0 or NaN); the folded kernel also drops x from its signature.
    # The C target (CPU) keeps constants opaque to it (backends/tilelang/exprs.opaque_step).
    if _zero(args.get("a")) and out.device_type != "cpu":
        return "div with a literal zero dividend: TIR folds it to 0 (eager gives NaN for 0 / 0)"
    return div_floor_declines(args, out, framework)


def mul_tilelang_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    if (_zero(args.get("a")) or _zero(args.get("b"))) and out.device_type != "cpu":
        return ("mul with a literal zero operand: TIR folds it to 0 (eager gives NaN for inf / "
                "NaN operands)")
    return None


def pow_triton_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    if out.dtype not in ("float32", "float16", "bfloat16", "float64"):
        return f"integer pow ({out.dtype}) must be exact; the template computes through exp2/log2"
    b = args.get("b")
    if out.dtype == "float16" and not isinstance(b, TensorMeta) and b in (0.5, -0.5):
        # torch takes sqrt for x ** 0.5 in float32 but C pow in float16: pow(-inf, .5) differs
        return "float16 x ** +-0.5: eager's special values differ from sqrt's"
    return None


@functools.lru_cache(maxsize=None)
def cpu_gelu_nan_at_inf(dtype: str) -> bool:
    """Whether this process's torch gives NaN for the erf gelu of +inf on the CPU in ``dtype``.

    Its vectorised kernel computes ``x * 0.5 * (1 + erf(x / sqrt 2))`` through a polynomial
    that is NaN at +inf, its scalar path (a one-element tensor) gives +inf. Which dtypes take
    the NaN depends on the build and the CPU (float16 gave +inf on an AVX2 machine, NaN on an
    AVX-512 one, torch 2.13), so it is measured here once per dtype, not listed.
    """
    torch = adapter_for("torch")  # only the torch framework asks, so torch is there
    x = torch.module.full((64,), math.inf, dtype=getattr(torch.module, dtype))
    return bool(torch.functional().gelu(x).isnan().any())


def _cpu_gelu_differs_at_inf(args, out: TensorMeta, framework: str) -> bool:
    return out.device_type == "cpu" and framework == "torch" and \
        args.get("approximate", "none") == "none" and \
        out.dtype in ("float16", "bfloat16", "float32", "float64") and \
        cpu_gelu_nan_at_inf(out.dtype)


def gelu_triton_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    if _cpu_gelu_differs_at_inf(args, out, framework):
        # the kernel follows CUDA eager and torch's scalar path: +inf
        return (f"torch's {out.dtype} CPU gelu gives NaN at +inf in its vectorised path "
                "only; the kernel follows CUDA eager (use CUDA tensors, or "
                "approximate='tanh')")
    return None


def gelu_reference_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    if out.dtype == "float32" and args.get("approximate", "none") == "none" and \
            framework == "torch":
        return ("torch's float32 gelu kernel gives NaN at +inf and inf near the float32 "
                "maximum (its vectorised erf); not modelled")
    if _cpu_gelu_differs_at_inf(args, out, framework):
        return (f"torch's {out.dtype} CPU gelu gives NaN at +inf in its vectorised path "
                "only; not modelled")
    return None


def tensorplay_scalar_bounds(lo, hi, framework: str) -> bool:
    """Whether TensorPlay 1.0.0's clamp takes these tensor bounds as scalars (input's shape and
    dtype): when every tensor bound has one element; larger bounds broadcast and promote."""
    bounds = [b for b in (lo, hi) if isinstance(b, TensorMeta)]
    return framework == "tensorplay" and bool(bounds) and all(math.prod(b.shape) == 1 for b in bounds)


def clamp_scalar_bounds_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    bounds = [args.get("min"), args.get("max")]
    if framework == "tensorplay" and any(isinstance(b, float) and math.isnan(b) for b in bounds):
        return "TensorPlay's clamp ignores a NaN bound (torch's propagates it); not modelled"
    if tensorplay_scalar_bounds(*bounds, framework):
        return ("TensorPlay's clamp with one-element tensor bounds treats them as scalars "
                "in the input's dtype (no broadcast, no promotion); not modelled")
    if framework == "tensorplay" and out.dtype in ("float16", "bfloat16") and any(
            isinstance(b, TensorMeta) for b in bounds):
        # measured on 1.0.0: clamp(x, min=nan) keeps x, clamp(nan, max=0) is 0 (seed 2597)
        return "TensorPlay's 16-bit clamp with tensor bounds drops some NaNs; not modelled"
    return None


def clamp_kernel_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    """Triton / TileLang: TensorPlay casts number bounds to an integer / bool input's dtype
    first (int64 ``clamp(x, -1.5, 2.5)`` bounds at -1 and 2; ``clamp(False, min=-1)`` is True);
    the templates compare with the number itself, so a float bound turned ``clamp(x, -1.5, 2.5)
    * 2`` into 5 where eager gives 4. The reference backend casts the bounds (``_scalar``)."""
    bounds = [b for b in (args.get("min"), args.get("max")) if is_scalar(b)]
    if framework == "tensorplay" and not out.is_floating and any(
            isinstance(b, float) or (out.dtype == "bool" and not isinstance(b, bool))
            for b in bounds):
        return ("TensorPlay's clamp casts number bounds to the integer / bool input's dtype "
                "first; not modelled in the kernel")
    return clamp_scalar_bounds_declines(args, out, framework)


def clamp_tilelang_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    if out.dtype == "bool":
        # TensorPlay casts the bounds to bool first (clamp(False, min=-1.0) is True)
        return "clamp of a bool tensor: the bounds' cast to bool differs per framework"
    return clamp_kernel_declines(args, out, framework)
