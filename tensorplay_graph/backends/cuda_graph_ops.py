"""The CUDA operations a :class:`~.cuda_graphs.CudaGraphRunner` performs: warm-up runs and
captures on one side stream per device, replays, the memory pool runs allocate from, and the
storage use counts the output contract relies on. Tests substitute a CPU stand-in for
:class:`TorchGraphs`.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Dict, Iterator, Sequence, Tuple

from ..frameworks import adapter_for
from .cuda_graph_policy import is_cuda_tensor


def _torch() -> Any:
    return adapter_for("torch").module


@functools.lru_cache(maxsize=None)
def _use_count() -> Callable[[int], int]:
    return _torch()._C._storage_Use_Count  # called for every watched output of every replay


_SIDE_STREAMS: Dict[int, Any] = {}


def side_stream(torch: Any) -> Any:
    """The one side stream of the current device that every warm-up and capture runs on.
    Why one: cuBLAS keeps a 32 MiB workspace per stream it ran on, for the process's life (a
    stream per capture held seven of them, 224 MiB, in a GPT-2 training process)."""
    index = torch.cuda.current_device()
    stream = _SIDE_STREAMS.get(index)
    if stream is None:
        stream = _SIDE_STREAMS[index] = torch.cuda.Stream()
    return stream


def _pool_id(pool: Any) -> Any:
    return getattr(pool, "id", pool)


@contextlib.contextmanager
def allocating_to(torch: Any, pool: Any) -> Iterator[None]:
    """This thread's allocations on the current device go to ``pool`` (a ``MemPool``, which
    keeps the pool alive: the allocator requires it) while the block runs; anything else:
    the default pool. What cudagraph trees do for their warm-up runs, through the same
    allocator calls."""
    if not hasattr(pool, "id"):
        yield
        return
    pool = pool.id
    device = torch.cuda.current_device()
    C = torch._C
    begin = getattr(C, "_cuda_beginAllocateCurrentThreadToPool", None)
    if begin is not None:
        begin(device, pool)
    else:  # torch before the per-thread call: route the current stream's allocations
        stream = torch.cuda.current_stream().cuda_stream
        C._cuda_beginAllocateToPool(device, pool, lambda s: s == stream)
    try:
        yield
    finally:
        C._cuda_endAllocateToPool(device, pool)
        C._cuda_releasePool(device, pool)


class TorchGraphs:
    """The CUDA operations the runner needs (a test substitutes a CPU stand-in)."""

    is_tensor = staticmethod(is_cuda_tensor)

    @staticmethod
    def warm_up(fn: Callable[..., Any], args: Sequence[Any], pool: Any = None) -> Any:
        """``fn(*args)`` on the side stream, as torch.cuda.graphs recommends before capturing.
        ``pool``: a graph pool handle the run allocates from (:mod:`.cuda_graph_pool` says
        when), else the default pool."""
        torch = _torch()
        stream = side_stream(torch)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), allocating_to(torch, pool):
            out = fn(*args)
        torch.cuda.current_stream().wait_stream(stream)
        return out

    @staticmethod
    def pool_handle() -> Any:
        """A ``torch.cuda.MemPool``: it keeps the pool alive between the runs that allocate
        from it (a bare ``graph_pool_handle`` on torch without MemPool: captures only)."""
        cuda = _torch().cuda
        make = getattr(cuda, "MemPool", None)
        return make() if make is not None else cuda.graph_pool_handle()

    @staticmethod
    def capture(fn: Callable[..., Any], args: Sequence[Any], pool: Any = None) -> Tuple[Any, Any]:
        """A run of ``fn`` on the capture's own stream and arguments, then the capture: what
        is lazy on first use (a new kernel specialization: Triton's module load, a per-stream
        cuBLAS workspace) happens outside it. ``thread_local``: other threads' calls cannot
        invalidate it. ``pool``: a handle shared with other graphs (:mod:`.cuda_graph_pool`),
        else the graph's own private pool."""
        torch = _torch()
        device = next(a.device for a in args if is_cuda_tensor(a))
        with torch.cuda.device(device):  # the inputs' device, whichever is current
            stream = side_stream(torch)
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn(*args)
            graph = torch.cuda.CUDAGraph()
            before = torch.cuda.memory_reserved(device)
            with torch.cuda.graph(graph, pool=_pool_id(pool), stream=stream,
                                  capture_error_mode="thread_local"):
                out = fn(*args)
            #: about what the graph's pool took (new segments; a shared pool's reuse is free)
            graph.tpg_bytes = max(0, torch.cuda.memory_reserved(device) - before)
        graph.tpg_device = device.index if device.index is not None else \
            torch.cuda.current_device()
        return graph, out

    @staticmethod
    def room_for_another(graph: Any) -> bool:
        """Whether the device can hold a second recording of ``graph`` and still leave as
        much again to the caller (free device memory plus the allocator's unused cache)."""
        torch = _torch()
        device = graph.tpg_device
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return free + cached >= 2 * getattr(graph, "tpg_bytes", 0)

    @staticmethod
    def replay(graph: Any) -> None:
        torch = _torch()
        if torch.cuda.current_device() == graph.tpg_device:
            graph.replay()
        else:
            with torch.cuda.device(graph.tpg_device):
                graph.replay()

    @staticmethod
    def storage_uses(tensor: Any) -> int:
        """How many tensors (views included) share ``tensor``'s storage."""
        return _use_count()(tensor.untyped_storage()._cdata)

    @staticmethod
    def storage_counter(tensor: Any) -> Callable[[], int]:
        """A function giving :meth:`storage_uses` of ``tensor`` now, without making a storage
        object per call (a replay checks every output first: 2 us each this way, 0.5 us
        without; valid while ``tensor`` lives)."""
        return functools.partial(_use_count(), tensor.untyped_storage()._cdata)
