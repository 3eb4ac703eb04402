"""Which kernel runs a GEMM (+ epilogue): TileLang's, or cuBLAS with the epilogue in Triton.

Why cuBLAS is the default: on the H200 it won every GEMM shape measured (benchmarks/
profile_gpu.py, 2026-12-01: Llama's 29 GEMMs take 1.46 ms through cuBLAS and 1.885 ms as our
TileLang kernels; GPT-2's 25, 0.85 vs 1.03 ms), and each distinct TileLang GEMM costs ~3 s of
compile on the first call. A TileLang kernel is used where a measurement says it is faster.

Policies (``options={"gemm": ...}``, :data:`POLICIES`):

=========  ===================================================================================
auto       cuBLAS, unless a measurement cached for this GEMM says TileLang wins: a choice an
           earlier race stored, or a TileLang timing the autotuner stored (cuBLAS is then timed
           now; it needs no compile). Nothing TileLang is compiled for a GEMM cuBLAS takes.
           Planning gives a GEMM its epilogue only where TileLang won a race for it before;
           otherwise the epilogue is planned with the ops around it (Triton fuses e.g. a
           residual add with the norm after it), as Inductor plans around cuBLAS.
measure    race both on the device (CUDA events, median of a few calls on random inputs of
           the GEMM's shapes / dtypes), once per GEMM key; the result is cached on disk
cublas     always the framework's matmul (cuBLAS); epilogues are planned apart as under auto
tilelang   always the TileLang GEMM + epilogue kernel
=========  ===================================================================================

A choice is keyed by the GEMM's canonical description (shapes, dtypes, layout, epilogue), the
framework op, the operand strides, the device name and the torch / TileLang versions, and kept
in ``<cache>/gemm_choice.json`` (``TPG_CACHE_DIR``): a warm process neither measures again nor
compiles the losing TileLang kernel. Timing is injectable (``timer``) so the policy is tested
on the CPU.

>>> choice = choose("k", "GEMM 128x128x64", "cublas", cublas, tilelang)   # doctest: +SKIP
>>> choice.describe()                                                      # doctest: +SKIP
"GEMM 128x128x64: cublas (not measured: options['gemm'] is 'cublas')"
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

from ..frameworks import adapter_for
from . import source_files

__all__ = ["POLICIES", "DEFAULT_POLICY", "CUBLAS", "TILELANG", "GemmChoice", "Candidate",
           "CudaEventTimer", "choose", "lookup", "tilelang_won", "check_policy", "cache_path", "forget_in_process",
           "module_choices"]

log = logging.getLogger("tensorplay_graph.compile")

CUBLAS, TILELANG = "cublas", "tilelang"
#: policy -> what it does (the option's documentation; options.py points here)
POLICIES: Dict[str, str] = {
    "auto": "cuBLAS unless a cached measurement says TileLang is faster for this GEMM",
    "measure": "time both on the device once per GEMM shape/dtype/epilogue; cached on disk",
    "cublas": "always the framework's matmul (cuBLAS) + the epilogue as one Triton kernel",
    "tilelang": "always the TileLang GEMM + epilogue kernel",
}
#: the policy of backend="auto" (named backends compile what they name: "tilelang")
DEFAULT_POLICY = "auto"
_FILE = "gemm_choice.json"
_MEMO: Dict[str, "GemmChoice"] = {}   # key -> choice, this process
_LOCK = threading.Lock()


def check_policy(policy: Any) -> str:
    """``policy`` if it is one of :data:`POLICIES`, else ValueError naming the valid ones."""
    if policy not in POLICIES:
        raise ValueError(f"options['gemm'] must be one of {', '.join(map(repr, POLICIES))}, "
                         f"got {policy!r}")
    return policy


@dataclass(frozen=True)
class GemmChoice:
    """The kernel chosen for one GEMM, with the timings behind the choice (ms, medians)."""

    winner: str
    label: str
    ms: Tuple[Tuple[str, float], ...] = ()
    how: str = ""   # "measured now" / "cached measurement" / "not measured: why"

    def describe(self) -> str:
        times = ", ".join(f"{name} {ms:.4f} ms" for name, ms in self.ms)
        return f"{self.label}: {self.winner} ({times + '; ' if times else ''}{self.how})"


@dataclass
class Candidate:
    """One way to run the GEMM. ``build()`` compiles it (called at most once, lazily) and
    returns ``fn(*args)``; ``make_args()`` gives inputs of the GEMM's shapes and dtypes."""

    name: str
    build: Callable[[], Callable[..., Any]]
    make_args: Callable[[], tuple]
    unavailable: Optional[str] = None   # why it cannot run here
    built: Any = field(default=None, repr=False)   # the kernel, once built

    def kernel(self) -> Callable[..., Any]:
        if self.built is None:
            self.built = self.build()
        return self.built


class CudaEventTimer:
    """Median milliseconds of ``fn(*args)`` over ``reps`` CUDA-event timings (after warm-up).

    The timed calls are queued behind a ~1 ms ``torch.cuda._sleep``, so the host enqueues them
    all before the GPU reaches them: the events then measure device time only, not the Python
    launch cost, which CUDA-graph replay (the default) does not pay either.
    """

    SLEEP_CYCLES = 2_000_000   # ~1 ms at the H200's ~1.9 GHz: more than 10 calls' launch cost

    def __init__(self, reps: int = 10, warmup: int = 3) -> None:
        self.reps, self.warmup = reps, warmup

    def unavailable(self) -> Optional[str]:
        torch = adapter_for("torch")
        if not torch.loaded() or not torch.cuda_available():
            return "no CUDA device in this process"
        return None

    def device_name(self) -> str:
        return adapter_for("torch").device_name()

    def __call__(self, candidate: Candidate) -> float:
        torch = adapter_for("torch")
        fn, args = candidate.kernel(), candidate.make_args()
        for _ in range(self.warmup):
            fn(*args)
        events = [torch.timing_events() for _ in range(self.reps)]
        sleep = getattr(torch.module.cuda, "_sleep", None)
        if sleep is not None:
            sleep(self.SLEEP_CYCLES)
        for start, end in events:
            start.record()
            fn(*args)
            end.record()
        events[-1][1].synchronize()
        times = sorted(start.elapsed_time(end) for start, end in events)
        return times[len(times) // 2]


def cache_path():
    return source_files.cache_root() / _FILE


def _load() -> Dict[str, dict]:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _cached(key: str) -> Optional[GemmChoice]:
    with _LOCK:
        if key in _MEMO:
            return _MEMO[key]
    entry = _load().get(key)
    if not isinstance(entry, dict) or entry.get("winner") not in (CUBLAS, TILELANG):
        return None
    choice = GemmChoice(entry["winner"], entry.get("label", ""),
                        tuple((n, float(t)) for n, t in entry.get("ms", [])), "cached measurement")
    with _LOCK:
        _MEMO[key] = choice
    return choice


def _store(key: str, choice: GemmChoice, device: str, bare: str) -> None:
    with _LOCK:
        _MEMO[key] = choice
        table = _load()
        table[key] = {"winner": choice.winner, "label": choice.label, "device": device,
                      "ms": [list(item) for item in choice.ms]}
        if choice.winner == TILELANG:  # planning may give this GEMM its epilogue again
            table[bare] = {"tilelang_won": True, "label": choice.label, "device": device}
            _MEMO.pop(bare, None)
        try:
            source_files.write_atomic(cache_path(), json.dumps(table, indent=1, sort_keys=True))
        except OSError as exc:  # a read-only cache: the choice still holds for this process
            log.warning("gemm choice: cannot write %s (%s); it is kept for this process only",
                        cache_path(), exc)


def module_choices(module: Any) -> list:
    """The GEMM choices of a lowered program's kernels, one line each, in program order."""
    graph = getattr(module, "graph", None)
    lines = []
    for node in getattr(graph, "nodes", ()):
        launch = getattr(node.meta.get("kernel"), "launch", None)
        if isinstance(launch, dict):
            where = f"region {node.meta['region']}" if "region" in node.meta else node.name
            lines += [f"{where}: {line}" for line in launch.get("gemm", ())]
    return lines


def forget_in_process() -> None:
    """Drop this process's memo of choices (the disk cache stays): a fresh process, for tests."""
    with _LOCK:
        _MEMO.clear()


def _time(timer: Any, candidate: Candidate) -> Tuple[Optional[float], Optional[str]]:
    try:
        return float(timer(candidate)), None
    except Exception as exc:  # a kernel that does not build or run here loses the race
        log.warning("gemm choice: timing %s failed: %s: %s", candidate.name, type(exc).__name__, exc)
        return None, f"{candidate.name} failed: {type(exc).__name__}: {exc}"


def _race(key: str, bare: str, label: str, device: str, timer: Any, cublas: Candidate,
          tilelang: Candidate, tilelang_ms: Optional[float] = None) -> GemmChoice:
    """Time cuBLAS, and TileLang unless its time is given; the faster wins; store it."""
    cublas_ms, why = _time(timer, cublas)
    if cublas_ms is None:
        return GemmChoice(TILELANG, label, (), f"not measured: {why}")
    how = "measured now"
    if tilelang_ms is None:
        tilelang_ms, why = _time(timer, tilelang)
        if tilelang_ms is None:
            return GemmChoice(CUBLAS, label, ((CUBLAS, cublas_ms),), f"measured now; {why}")
    else:
        how = "cuBLAS measured now, TileLang's time from the autotuning cache"
    winner = TILELANG if tilelang_ms < cublas_ms else CUBLAS
    choice = GemmChoice(winner, label, ((CUBLAS, cublas_ms), (TILELANG, tilelang_ms)), how)
    _store(key, choice, device, bare)
    log.info("gemm choice: %s", choice.describe())
    return choice


def _key(key_parts: Tuple[Any, ...], timer: Any) -> Tuple[str, str]:
    device = "none" if timer.unavailable() else timer.device_name()
    return source_files.digest(*map(repr, key_parts), device)[:32], device


def lookup(key_parts: Tuple[Any, ...], timer: Any = None) -> Optional[GemmChoice]:
    """The stored choice for a GEMM, if any (no measuring, no building)."""
    return _cached(_key(key_parts, timer or CudaEventTimer())[0])


def tilelang_won(bare: Any, timer: Any = None) -> bool:
    """Whether a race stored for this GEMM (``bare``: the matmul alone, the first item of
    :func:`choose`'s ``key_parts``; any epilogue) was won by TileLang. Planning under ``"auto"`` gives a GEMM its epilogue only then:
    otherwise cuBLAS runs it and its epilogue is planned with the ops around it."""
    key = "bare:" + _key((bare,), timer or CudaEventTimer())[0]
    with _LOCK:
        if key in _MEMO:
            return _MEMO[key] is not None
    entry = _load().get(key)
    won = isinstance(entry, dict) and entry.get("tilelang_won") is True
    with _LOCK:
        _MEMO[key] = GemmChoice(TILELANG, entry.get("label", "")) if won else None
    return won


def choose(key_parts: Tuple[Any, ...], label: str, policy: str, cublas: Candidate,
           tilelang: Candidate, timer: Any = None,
           cached_tilelang_ms: Callable[[], Optional[float]] = lambda: None) -> GemmChoice:
    """The :class:`GemmChoice` for one GEMM under ``policy`` (see the module docstring).

    ``key_parts`` identify the GEMM (the device name is added from ``timer``): its first item
    the matmul alone (see :func:`tilelang_won`), the rest its epilogue and layout;
    ``cached_tilelang_ms()`` is a TileLang timing stored earlier (the autotuner's), or None.
    """
    check_policy(policy)
    if policy == TILELANG:
        return GemmChoice(policy, label, (), f"not measured: options['gemm'] is {policy!r}")
    if cublas.unavailable:
        return GemmChoice(TILELANG, label, (), f"not measured: cuBLAS candidate unavailable: "
                                               f"{cublas.unavailable}")
    if policy == CUBLAS:
        return GemmChoice(policy, label, (), f"not measured: options['gemm'] is {policy!r}")
    timer = timer or CudaEventTimer()
    no_device = timer.unavailable()
    key, device = _key(key_parts, timer)
    bare = "bare:" + _key(key_parts[:1], timer)[0]
    found = _cached(key)
    if found is not None:
        return found
    if no_device:
        return GemmChoice(CUBLAS, label, (), f"not measured: {no_device}")
    if policy == "measure":
        return _race(key, bare, label, device, timer, cublas, tilelang)
    tilelang_ms = cached_tilelang_ms()
    if tilelang_ms is None:
        return GemmChoice(CUBLAS, label, (), "not measured: no TileLang timing cached for this "
                                             "GEMM (options={'gemm': 'measure'} races both)")
    return _race(key, bare, label, device, timer, cublas, tilelang, tilelang_ms)
