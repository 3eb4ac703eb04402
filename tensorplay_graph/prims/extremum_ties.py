"""``maximum`` / ``minimum`` on a tie of signed zeros (0.0 vs -0.0): which operand eager keeps.

The tie is visible downstream (``1 / minimum(-0.0, 0.0)`` is -inf or inf), so each backend
keeps eager's operand or declines.

* TensorPlay keeps the second operand for ``minimum``, the first for ``maximum`` (measured at
  1..65536 elements).
* torch's CPU kernel keeps the FIRST operand in its scalar loop (``std::min`` / ``std::max``)
  and the SECOND in its vectorised one (``_mm256_min_ps`` ...), which runs over chunks of two
  SIMD vectors of each contiguous inner row; the rest of a row goes through the scalar loop
  (measured, AVX2 kernels: float32 n < 16 first; n = 16 second; n = 17 second but the last
  element first). Which elements reach the vectorised loop depends on the layout and the
  CPU's vector width, so only a result smaller than one chunk (``scalar_loop_bytes``) has a
  known pick: the first operand. Larger floating results are declined (eager dispatch).
* CUDA eager and Triton on a GPU both use the hardware ``min`` / ``max``: the GPU kernels
  keep ``tl.minimum`` / ``tl.maximum``. Triton's interpreter runs CPU tensors, so it follows
  torch's CPU rule as the reference backend does.
"""

from __future__ import annotations

import functools
from typing import Optional

from ..ir.meta import TensorMeta

NAN_ALL = ", propagate_nan=tl.PropagateNan.ALL"
_FLOATS = ("float16", "bfloat16", "float32", "float64")


@functools.lru_cache(maxsize=1)
def scalar_loop_bytes() -> int:
    """Result bytes below which torch's CPU ``maximum`` / ``minimum`` never vectorise: two
    SIMD vectors (x86 kernels: 2 x 256 bits at least; ARM NEON: 2 x 128 bits)."""
    from ..frameworks import adapter_for
    try:
        capability = adapter_for("torch").module.backends.cpu.get_cpu_capability()
    except Exception:  # no torch (a TensorPlay-only install): the smallest width
        return 32
    return 64 if capability in ("DEFAULT", "AVX2", "AVX512") else 32


def _interpreter() -> bool:
    from .pointwise_lowerings import gpu_triton
    return not gpu_triton()


def _tie_rule_unknown(out: TensorMeta) -> Optional[str]:
    """Why torch's CPU tie pick for this result is unknown, or None (a float result too
    small to reach the vectorised loop, or a result without signed zeros)."""
    if not isinstance(out, TensorMeta) or out.dtype not in _FLOATS:
        return None
    try:
        nbytes = int(out.nbytes)
    except TypeError:  # a symbolic size
        nbytes = None
    if nbytes is not None and nbytes < scalar_loop_bytes():
        return None
    return (f"torch's CPU maximum / minimum keeps either operand on a 0.0 / -0.0 tie "
            f"depending on the size and layout (first in its scalar loop, second in its "
            f"vectorised one); only results under {scalar_loop_bytes()} bytes have a known "
            f"pick (this one: {out.dtype} {tuple(out.shape)}); not modelled")


def extremum_reference_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    if framework == "tensorplay":
        if out.dtype in ("float16", "bfloat16"):
            return "TensorPlay's 16-bit maximum / minimum drop some NaNs (measured); not modelled"
        return None
    return _tie_rule_unknown(out)


def extremum_triton_declines(args, out: TensorMeta, framework: str) -> Optional[str]:
    """Under the interpreter (CPU tensors, CPU eager) as the reference backend; GPU kernels
    match CUDA eager's hardware min / max."""
    if not _interpreter():
        return None
    if framework == "tensorplay":
        return "TensorPlay's maximum / minimum tie rule is not modelled in Triton's interpreter"
    return _tie_rule_unknown(out)


def minimum_ref(a, b, framework="torch"):
    if framework == "tensorplay":  # keeps the second operand on a tie
        return f"_pick({b}, {a}, {a} < {b})"
    return f"_pick({a}, {b}, {b} < {a})"  # torch CPU's scalar loop: the first


def maximum_ref(a, b, framework="torch"):
    return f"_pick({a}, {b}, {b} > {a})"  # both frameworks keep the first operand


def _keep_first(op: str):
    """Triton: ``b`` where ``b op a`` or ``b`` is NaN, else ``a`` (NaN ``a`` stays). Nested
    ``tl.where``, no ``|``: the interpreter cannot or a block with a 0-d operand's test."""
    def render(a, b):
        return f"tl.where({b} != {b}, {b}, tl.where({b} {op} {a}, {b}, {a}))"
    return render


def minimum_triton(a, b):
    if _interpreter():
        return _keep_first("<")(a, b)
    return f"tl.minimum({a}, {b}{NAN_ALL})"


def maximum_triton(a, b):
    if _interpreter():
        return _keep_first(">")(a, b)
    return f"tl.maximum({a}, {b}{NAN_ALL})"
