"""A GEMM group run as the framework's own matmul (cuBLAS) + its epilogue as one Triton kernel.

The other candidate to a TileLang GEMM + epilogue kernel (see :mod:`.gemm_choice`). The matmul
node runs through eager dispatch exactly as the program wrote it, so a linear's / addmm's bias
is folded into the cuBLAS call where eager folds it; the pointwise nodes after it (the
epilogue: bias, activation, residual, scale, cast) become one Triton pointwise kernel, or none
when there is no epilogue. Results are eager's: the matmul is eager's own call and the
epilogue reads its rounded output as eager's next op does.

>>> step = CublasGemm(group.nodes, region_id=3)       # doctest: +SKIP
>>> (out,) = step(*[env[v] for v in step.inputs])     # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from .base import Region, region_subgraph

__all__ = ["CublasGemm", "external_inputs", "unavailable"]


def external_inputs(nodes: Sequence[Any]) -> List[Any]:
    """The values ``nodes`` read from outside themselves, in first-use order."""
    inside, inputs = set(nodes), []
    for node in nodes:
        for value in node.all_input_nodes:
            if value not in inside and value not in inputs:
                inputs.append(value)
    return inputs


def _triton():
    from .registry import get_backend
    return get_backend("triton")


def unavailable(nodes: Sequence[Any]) -> Optional[str]:
    """Why ``nodes`` (a matmul then its epilogue) cannot run this way, or None."""
    epilogue = list(nodes[1:])
    if not epilogue:
        return None
    try:
        triton = _triton()
    except Exception as exc:  # no Triton here: only the TileLang kernel fuses the epilogue
        return f"the Triton backend is unavailable ({exc})"
    for node in epilogue:
        why = triton.supports(node)
        if why is not None:
            return f"Triton declines epilogue node {node.name}: {why}"
    return None


class CublasGemm:
    """``step(*values of .inputs) -> (result,)``: eager matmul, then the epilogue kernel."""

    def __init__(self, nodes: Sequence[Any], region_id: int) -> None:
        from ..ir import GraphModule

        mm, epilogue = nodes[0], list(nodes[1:])
        self.inputs = external_inputs(nodes)
        mm_inputs = list(mm.all_input_nodes)
        self._mm = GraphModule({}, region_subgraph(Region(region_id, "eager", [mm], mm_inputs, [mm])))
        self._mm_slots = [self.inputs.index(v) for v in mm_inputs]
        self.call = mm.format_node()
        self.source = f"# cuBLAS through eager dispatch: {self.call}\n"
        self.key = f"cublas:{mm.name}"
        self._epilogue = None
        self.epilogue_kernels: List[str] = []
        if epilogue:
            ep_inputs = external_inputs(epilogue)
            region = Region(region_id, "triton", epilogue, ep_inputs, [epilogue[-1]])
            self._epilogue = _triton().compile(region)
            self._ep_slots = [None if v is mm else self.inputs.index(v) for v in ep_inputs]
            self.source += self._epilogue.source
            self.epilogue_kernels = list(self._epilogue.launch.get("kernels", []))

    def __call__(self, *values: Any) -> tuple:
        (product,) = tuple(self._mm(*[values[i] for i in self._mm_slots]))
        if self._epilogue is None:
            return (product,)
        return tuple(self._epilogue(*[product if i is None else values[i] for i in self._ep_slots]))
