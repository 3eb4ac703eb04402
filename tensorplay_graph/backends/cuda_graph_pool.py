"""One CUDA-graph memory pool shared by the graphs of one training program.

A compiled training step replays two graphs: the forward, then the backward. In separate
private pools each keeps its own intermediates for the program's life, so the process holds
both at once (GPT-2 at 8x512: 4.7 GB reserved where Inductor, without graphs, reserves 3.0).
Captured into one pool, as cudagraph trees do, the backward's intermediates and gradients
take the blocks the forward freed (its intermediates); only what the forward hands to the
backward -- the saved activations, held by the forward runner -- stays apart. (Measured on
GPT-2, with the unused logits' gradient gone too: 4.69 -> 4.31 GB; the backward's 394 MB
blocks mostly do not fit where the forward's smaller intermediates were.)

The price is a rule, checked before every replay: a graph may only replay while no graph
captured after it in the pool has a result still held by the caller, since a later graph's
buffers lie where this one writes its intermediates (the gradients of the last step in
``.grad`` when the next forward runs). When the rule fails -- gradients accumulated over
steps, ``zero_grad`` called after the forward -- the graph about to replay leaves the pool
and is captured again in a private one: the result stays correct, the memory is as it was
without sharing. A runner captured again (an input moved, an output is kept) stays in the
pool only while no graph was captured after it; otherwise the new capture is private too.
Graphs are replayed in the order they were captured in (forward, then backward), which is
the order torch requires of a shared pool.

Warm-up runs (the eager first calls before a capture) allocate from the pool too, as long as
no graph has been captured in it: their intermediates then take blocks the captures reuse,
instead of default-pool segments the process keeps. (Measured on GPT-2: blocks allocated
during the warm-ups -- cuBLAS's per-stream workspaces -- pinned 724 MB of freed warm-up
segments in the default pool.) Once a graph is captured, a later warm-up (the backward's
second, after the forward's capture moved its inputs) runs in the default pool: what it
allocates and keeps could lie in blocks that graph writes on every replay.
"""

from __future__ import annotations

from typing import Any, List, Optional


class SharedPool:
    """The pool handle and its member runners, in capture order."""

    def __init__(self, name: str = "program") -> None:
        self.name = name
        self._handle: Any = None
        self.members: List[Any] = []

    def handle(self, ops: Any) -> Any:
        if self._handle is None:
            self._handle = ops.pool_handle()
        return self._handle

    def warm_up_handle(self, ops: Any) -> Any:
        """The handle a warm-up run allocates from: the pool's until a graph is captured in
        it, then None (the default pool)."""
        return None if self.members else self.handle(ops)

    def join(self, runner: Any) -> None:
        if runner not in self.members:
            self.members.append(runner)

    def leave(self, runner: Any) -> None:
        if runner in self.members:
            self.members.remove(runner)

    def is_last(self, runner: Any) -> bool:
        return bool(self.members) and self.members[-1] is runner

    def holder(self, runner: Any) -> Optional[Any]:
        """A member captured after ``runner`` whose last results are still held, if any:
        ``runner``'s replay would overwrite them."""
        if runner not in self.members:
            return None
        later = self.members[self.members.index(runner) + 1:]
        return next((m for m in later if not m.outputs_free()), None)
