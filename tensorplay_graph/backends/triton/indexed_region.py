"""Regions with view / gather nodes: indexed kernels, and eager views where aliasing shows.

* A region of pointwise, view and gather nodes only gets one :class:`IndexedKernel` per
  output shape; every node is computed where it is needed (nothing in between is written).
* A region that also reduces keeps its rows kernels (``lowering.group_nodes``); each gather
  or copying view there is one indexed kernel of its own, each alias view the framework's
  own view of its operand (read strided by the next kernel, like an input).
* A view whose value leaves the region and shares memory in eager (not a copy there) is not
  computed: it runs as the framework's own view of its base (a region input, or a value a
  kernel writes with eager's strides), so a later write through either name is seen
  through both, as in eager. A view that copies in eager (``reshape`` of a transposed
  tensor, ``contiguous()``) is a fresh tensor: the kernel writes it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...frameworks import adapter_for
from ..base import node_framework
from ..padded_rows import padded_empty
from ...ir.meta import contiguous_strides
from .codegen_indexed import ROW_MAJOR, WALK, IndexedKernel, index_map, out_strides_for
from .launcher import SpecializedLaunch
from .layout import Layout
from .layout import next_pow2
from .plan import OperandError, interpreting, specialization

Shape = Tuple[int, ...]


def copies_in_eager(node: Any) -> bool:
    """True when eager returns a fresh tensor for this view call (the record's ``copies``).

    The records' rules are torch's (TensorPlay copies in other cases): a TensorPlay view is
    always taken for an alias, so where it leaves a region it runs eagerly.
    """
    from ..base import node_framework
    rule = index_map(node)
    if rule is None or node.meta["prim"].kind != "view":
        return True
    if rule.copies is None or node_framework(node) != "torch":
        return False
    args = {k: v.meta.get("tensor_meta") if hasattr(v, "users") else v
            for k, v in node.meta.get("prim_args", {}).items()}
    return bool(rule.copies(node.meta["tensor_meta"], **args))


class _Desc:
    def __init__(self, name: str) -> None:
        self.name = name


class IndexedPlan:
    """``plan(*inputs) -> outputs`` for one :class:`IndexedKernel` (``KernelPlan``'s interface)."""

    #: outputs are allocated with the kernel's ``out_strides``: eager's
    writes_eager_strides = True

    def __init__(self, kernel: IndexedKernel, cache: Any) -> None:
        self.kernel, self.cache = kernel, cache
        self.desc = _Desc(kernel.name)
        self.in_shapes = [tuple(n.meta["tensor_meta"].shape) for n in kernel.inputs]
        self.sources: Dict[tuple, Any] = {}
        self._specs: Dict[tuple, tuple] = {}
        torch = adapter_for("torch")
        self._empty = torch.module.empty_strided
        self._outs = [(tuple(o.meta["tensor_meta"].shape), tuple(strides),
                       torch.dtype(o.meta["tensor_meta"].dtype))
                      for o, strides in zip(kernel.outputs, kernel.out_strides)]
        self._padded: Dict[int, Tuple[int, int]] = {}  # see ``pad_rows``
        # a kernel reading no input (every cat piece empty) allocates on the planned device
        self._device = kernel.outputs[0].meta["tensor_meta"].device
        self.numel = 1
        for n in kernel.shape:
            self.numel *= n

    def pad_rows(self, index: int, width: int, pitch: int) -> bool:
        """Write output ``index`` into zero-padded rows of ``pitch`` elements
        (:mod:`..padded_rows`): the kernel stores it through its coordinates."""
        from ..padded_rows import rows_layout
        shape, strides, dtype = self._outs[index]
        found = rows_layout(shape, strides, width, pitch)
        if found is None:
            return False
        self.kernel.out_strides[index] = found[1]
        self._outs[index] = (shape, found[1], dtype)
        self._padded[index] = (width, pitch)
        self.sources.clear()
        self._specs.clear()
        return True

    def layout_for(self, in_meta: Sequence[Tuple[Shape, Shape]]) -> tuple:
        """Per input, ``WALK`` / ``ROW_MAJOR`` flags (``codegen_indexed``) for its strides."""
        k = self.kernel

        def same(stride, want, shape):
            return all(a == b for a, b, n in zip(stride, want, shape) if n != 1)
        return tuple((WALK if tuple(shape) == k.shape and same(stride, k.walk, shape) else 0)
                     | (ROW_MAJOR if same(stride, contiguous_strides(tuple(shape)), shape) else 0)
                     for shape, stride in in_meta)

    def render(self, linear: tuple):
        src = self.sources.get(linear)
        if src is None:
            src = self.sources[linear] = self.kernel.render(linear)
        return src

    def _specialize(self, tensors: Sequence[Any]) -> SpecializedLaunch:
        metas = [(tuple(t.shape), tuple(t.stride())) for t in tensors]
        if [m[0] for m in metas] != self.in_shapes:
            raise OperandError(f"triton backend: kernel {self.desc.name} was planned for shapes "
                               f"{self.in_shapes}, called with {[m[0] for m in metas]}")
        source = self.render(self.layout_for(metas))
        fn = self.cache.jit_function(source.name, source.text)
        numel = self.numel
        layout = Layout((max(numel, 1),), tuple(m[1] for m in metas))
        block = min(16384 if interpreting() else 1024, max(128, next_pow2(self.kernel.width)))
        return SpecializedLaunch(fn, source, layout, (self.kernel.grid(block),),
                                 {"BLOCK_SIZE": block}, 4)

    def __call__(self, *tensors: Any) -> List[Any]:
        spec, tensors = specialization(self._specs, tensors, self.desc.name, self._specialize)
        device = tensors[0].device if tensors else self._device
        if self._padded:
            outs = [padded_empty(shape, strides, *self._padded[i], dtype, device)
                    if i in self._padded else self._empty(shape, strides, dtype=dtype, device=device)
                    for i, (shape, strides, dtype) in enumerate(self._outs)]
        else:
            outs = [self._empty(shape, strides, dtype=dtype, device=device)
                    for shape, strides, dtype in self._outs]
        if self.numel:  # an empty result: nothing to launch
            spec.launch(tuple(tensors) + tuple(outs))
        return outs


class ViewStep:
    """The framework's own view ops, from a base value to a view that leaves the region."""

    def __init__(self, chain: List[Any], inputs: List[Any], output: Any, members: set) -> None:
        from ...ir import GraphModule
        from ..base import Region, region_subgraph
        sub = Region(id=-1, backend="triton", nodes=chain, inputs=inputs, outputs=[output])
        self.module = GraphModule({}, region_subgraph(sub))
        self.desc = _Desc(f"eager_view_{output.name}")
        self.foreign = node_framework(output) != "torch"
        # A base a rows / pointwise kernel wrote row-major where eager's is permuted: the view
        # is taken of eager's layout (a copy), so its strides are eager's.
        from ...passes.eager_layout import needs_eager_layout
        self.relayout = [(i, needs_eager_layout(n.meta.get("tensor_meta")))
                         for i, n in enumerate(inputs) if n in members]
        self.relayout = [(i, st) for i, st in self.relayout if st is not None]

    def __call__(self, *values: Any) -> List[Any]:
        if self.relayout:
            from ...passes.eager_layout import to_eager_layout
            values = list(values)
            for i, stride in self.relayout:
                values[i] = to_eager_layout(values[i], stride)
        if not self.foreign:
            return list(self.module(*values))
        # the region runs on torch tensors; a TensorPlay program's views are TensorPlay's
        # own ops: cross over (zero-copy, so the view still shares the base's memory)
        tp, torch = adapter_for("tensorplay"), adapter_for("torch")
        out = self.module(*[tp.from_dlpack(v) if torch.is_tensor(v) else v for v in values])
        return [torch.from_dlpack(v) for v in out]


def _view_chain(view: Any, members: set) -> Tuple[List[Any], List[Any]]:
    """The in-region view nodes from ``view`` up to its base, and the chain's outside inputs."""
    chain, stack = [], [view]
    while stack:
        node = stack.pop()
        if node in chain:
            continue
        chain.append(node)
        for inp in node.all_input_nodes:
            if inp in members and _alias_view(inp):
                stack.append(inp)
    order = {n: i for i, n in enumerate(next(iter(members)).graph.nodes)}
    chain.sort(key=order.__getitem__)
    inputs: List[Any] = []
    for node in chain:
        for inp in node.all_input_nodes:
            if inp not in chain and inp not in inputs:
                inputs.append(inp)
    return chain, inputs


def plan_indexed(region: Any, cache: Any, make_step, group_nodes, describe_group, namer,
                 emit_node) -> List[Any]:
    """Steps for a region holding view / gather nodes (see the module docstring)."""
    kinds = {n.meta["prim"].kind for n in region.nodes}
    if not kinds <= {"pointwise", "view", "gather"}:
        return _mixed(region, cache, make_step, group_nodes, describe_group, namer, emit_node)
    members = set(region.nodes)
    escaping = [o for o in region.outputs if _alias_view(o)]
    views: List[Tuple[List[Any], List[Any], Any]] = []
    needed = [o for o in region.outputs if o not in escaping]
    for view in escaping:
        chain, inputs = _view_chain(view, members)
        views.append((chain, inputs, view))
        needed += [i for i in inputs if i in members and i not in needed]
    by_shape: Dict[Shape, List[Any]] = {}
    for node in needed:
        by_shape.setdefault(tuple(node.meta["tensor_meta"].shape), []).append(node)
    steps: List[Any] = []
    for k, outs in enumerate(by_shape.values()):
        kernel = IndexedKernel(f"tpg_indexed_r{region.id}_k{k}", outs, members,
                               [out_strides_for(o) for o in outs], namer, emit_node)
        steps.append(make_step(IndexedPlan(kernel, cache), kernel.inputs, outs))
    for chain, inputs, view in views:
        steps.append(make_step(ViewStep(chain, inputs, view, members), inputs, [view]))
    return steps


def _alias_view(node: Any) -> bool:
    return index_map(node) is not None and node.meta["prim"].kind == "view" and \
        not copies_in_eager(node)


def _mixed(region, cache, make_step, group_nodes, describe_group, namer, emit_node):
    """Rows kernels as without views; each alias view is the framework's own view of its
    (materialized) operand, read strided like any input; each gather or copying view is one
    indexed kernel of its own."""
    from .lowering import needed_outputs
    groups = group_nodes(list(region.nodes))
    steps = []
    for gi, (group, want) in enumerate(zip(groups, needed_outputs(groups, region))):
        if group.kind != "indexed":
            steps.append(describe_group(group, gi, want))
            continue
        (node,) = group.nodes
        if _alias_view(node):
            inputs = list(node.all_input_nodes)
            steps.append(make_step(ViewStep([node], inputs, node, set(region.nodes)), inputs,
                                   [node]))
        elif node in want:
            kernel = IndexedKernel(f"tpg_indexed_r{region.id}_k{gi}", [node], {node},
                                   [out_strides_for(node)], namer, emit_node)
            steps.append(make_step(IndexedPlan(kernel, cache), kernel.inputs, [node]))
    return steps


def check_static(shape: Sequence[Any]) -> Optional[str]:
    if not all(isinstance(s, int) for s in shape):
        return f"shape {tuple(shape)} is not static: views and cat are generated for static shapes"
    return None


