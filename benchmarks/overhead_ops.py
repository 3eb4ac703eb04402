"""Eager call overhead of an identity custom op vs TensorPlay's own ``tensorplay.library`` op.

``measure()`` returns ``(label, ours_seconds_per_call, anchor_seconds_per_call)``;
the target is ours/anchor <= 1.0.  Run ``python benchmarks/overhead_ops.py``.
"""

from __future__ import annotations

import timeit
import uuid


def _per_call(fn, arg, number: int, repeat: int) -> float:
    fn(arg)  # warm: resolves the kernel table and learns the tensor class
    timer = timeit.Timer(lambda: fn(arg))
    # Subtract the lambda's own cost so both sides measure the op call alone.
    base = min(timeit.Timer(lambda: arg).repeat(repeat, number)) / number
    return min(timer.repeat(repeat, number)) / number - base


def measure(number: int = 100_000, repeat: int = 5) -> list[tuple[str, float, float]]:
    """Per-call seconds of our identity op and TensorPlay's, on several call shapes."""
    import tensorplay as tp
    import tensorplay.library as tp_library
    import torch

    from tensorplay_graph.library import custom_op

    ns = f"bench_{uuid.uuid4().hex[:8]}"
    ours = custom_op(f"{ns}::identity", lambda x: x, mutates_args=())
    anchor = tp_library.custom_op(f"{ns}::identity", lambda x: x, mutates_args=())
    ours_ag = custom_op(f"{ns}::identity_ag", lambda x: x, mutates_args=())
    ours_ag.register_autograd(lambda ctx, g: g)
    anchor_ag = tp_library.custom_op(f"{ns}::identity_ag", lambda x: x, mutates_args=())
    anchor_ag.register_autograd(lambda ctx, g: g)

    x_tp = tp.randn(16)
    x_torch = torch.randn(16)
    rows = [
        ("identity op, TensorPlay tensor", _per_call(ours, x_tp, number, repeat),
         _per_call(anchor, x_tp, number, repeat)),
        ("identity op, torch tensor", _per_call(ours, x_torch, number, repeat),
         _per_call(anchor, x_torch, number, repeat)),
    ]
    with tp.no_grad():
        rows.append(("identity op with autograd, no_grad, TensorPlay tensor",
                     _per_call(ours_ag, x_tp, number // 4, repeat),
                     _per_call(anchor_ag, x_tp, number // 4, repeat)))
    x_req = tp.randn(16).requires_grad_(True)
    rows.append(("identity op with autograd, requires_grad, TensorPlay tensor",
                 _per_call(ours_ag, x_req, number // 10, repeat),
                 _per_call(anchor_ag, x_req, number // 10, repeat)))
    return rows


if __name__ == "__main__":
    for label, ours_s, anchor_s in measure():
        print(f"{label:60s} ours {ours_s * 1e9:8.0f} ns  tensorplay {anchor_s * 1e9:8.0f} ns  "
              f"ratio {ours_s / anchor_s:5.2f}x")
