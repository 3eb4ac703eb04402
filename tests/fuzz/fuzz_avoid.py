"""TensorPlay 1.0.0 eager defects the generator keeps out of its programs (FINDINGS.md).

A candidate statement that would hit one is rejected like one eager refuses: the
generator picks another. Each framework's own semantics stay the reference; these are
results no compiler can reproduce, not semantics.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np


def tensorplay_eager_defect(T: Any, code: str, ns: Dict[str, Any], value: Any) -> bool:
    """True when TensorPlay eager's ``value`` of ``code`` is one of the defects below."""
    return mislabelled_contiguous(value) or loses_nan_to_bfloat16(T, code, ns, value)


def _name(t: Any) -> str:
    return str(t.dtype).split(".")[-1]


def loses_nan_to_bfloat16(T: Any, code: str, ns: Dict[str, Any], value: Any) -> bool:
    """True when TensorPlay's bfloat16 ``value`` of ``code`` lost a NaN that float32 keeps.

    TensorPlay 1.0.0 converts float32 to bfloat16 by rounding the bits with no NaN check:
    a NaN whose low mantissa bits are all ones carries into the exponent and becomes
    +-0.0 or inf. Its vectorised sin / cos / tan / tanh / sinh / cosh / log1p produce such
    NaNs (0xffffffff) in their 16-element chunks and ordinary ones (0xffc00000) in the
    scalar tail, so `sin(inf).bfloat16()` is 0.0 or NaN by the element's position (seed
    2017613). NaN payloads are unspecified; compiled code keeps NaN.
    """
    if _name(value) != "bfloat16":
        return False
    wide = {k: v.float() if isinstance(v, T.Tensor) and _name(v) == "bfloat16" else v
            for k, v in ns.items()}
    code32 = code.replace(".bfloat16()", ".float()").replace("T.bfloat16", "T.float32")
    try:
        ref = eval(code32, wide)  # noqa: S307 - the generator's own statement text
    except Exception:  # noqa: BLE001 - no float32 counterpart: nothing to compare
        return False
    if not isinstance(ref, T.Tensor) or tuple(ref.shape) != tuple(value.shape):
        return False
    want = np.isnan(np.asarray(ref.float().contiguous().numpy()))
    got = np.isnan(np.asarray(value.float().contiguous().numpy()))
    return bool((want & ~got).any())


def mislabelled_contiguous(value: Any) -> bool:
    """True when TensorPlay calls ``value`` contiguous although its strides are not row-major.

    TensorPlay 1.0.0's ``round`` / ``clone`` of a permuted tensor keep the permuted strides
    but report ``is_contiguous()``; its elementwise kernels then walk memory order as if it
    were the logical order (`T.round(x_t) == T.round(x_t)` with `zero_()` on one side gave
    transposed answers, seed 6000825; seed 301070). Compiled code reads the real strides.
    """
    if not value.is_contiguous():
        return False
    expected = 1
    for size, stride in reversed(list(zip(value.shape, value.stride()))):
        if size > 1 and stride != expected:
            return True
        expected *= size
    return False
