"""The timing loop: warm-up and repetition budgets in milliseconds, cold-L2 repetitions.

Split the way Kernel Tuner splits it: ``measure`` owns the *policy* (how many warm-up and
timed repetitions a budget buys, statistics), a ``TimerBackend`` owns the *mechanism*
(CUDA events around eager launches, or around a CUDA-graph replay), and observers watch
the timed phase (``observers.ClockObserver`` samples the SM clock through NVML).

Public API::

    opts = BenchOptions(warmup_ms=100, rep_ms=100, min_rep=10, max_rep=1000,
                        flush_l2=True, cuda_graph=False)
    m = measure(fn, opts)                    # fn() launches the kernel(s); returns Measurement
    m.stats.record()                         # TileGym keys: mean std rel_std median min max nrep peak_mem_mb
    m.samples_ms, m.n_warmup, m.estimate_ms, m.first_call_s, m.flush_bytes, m.observed

    plan_reps(estimate_ms, opts) -> (n_warmup, n_rep)     # the budget arithmetic, GPU-free
    CudaEventBackend / CudaGraphBackend                   # the mechanisms; tests pass a fake

Per repetition on the GPU: write a flush buffer of at least 2x L2 (default max(2·L2,
256 MiB)), spin ``torch.cuda._sleep`` long enough to cover the host's enqueue time of
``fn`` (so the start event is not followed by an idle gap while Python launches the
kernel), record the start event, run ``fn``, record the end event.  Event time therefore
covers the kernel(s) and nothing else on the stream; launch gaps inside ``fn`` (several
kernels) are included, as in TileGym's CUDA-event method.

Short kernels (``batch="auto"``: one call under ``batch_below_ms``) are timed in batches:
one sample is the replay of a CUDA graph holding ``k`` x (L2 flush, ``fn``), so one event
pair spans ``k`` launches (at least ``batch_sample_ms`` of GPU time) and the timer's own
resolution and overhead (a few µs per event pair) no longer dominate a 20 µs kernel.  The
flush stays honest: every launch in the batch starts from a cold L2, and a second graph of
``k`` flushes alone is timed next to it, so a sample is ``(T(batch) - median T(flushes)) / k``
— per-launch kernel time, flush accounted for.  A workload that cannot be captured in a graph
falls back to eager launches, said so in ``observed["timer"]``; so is the batch size, the
flush time per launch and the timer's overhead (an empty event pair, measured).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from .kernels import hold_replaced_kernels
from .stats import TimingStats, summarize
from ..output import prog
from ..errors import NoGPUError

MIB = 1 << 20
SPIN_CAP_MS = 5.0       # the longest GPU spin before a timed launch (covers a host enqueue of half that)


@dataclass
class BenchOptions:
    """How to time: warm-up and timed budgets (ms), repetition bounds, L2 flush and timer choice."""
    warmup_ms: float = 100.0          # TileGym's WARMUP default
    rep_ms: float = 100.0             # timed budget (kernel time, flush excluded)
    min_rep: int = 10
    max_rep: int = 1000
    initial_rep: int = 5              # calls used to estimate one call's time
    flush_l2: bool = True
    flush_bytes: int | None = None    # None -> max(2 x L2, 256 MiB)
    cuda_graph: bool = False          # replay a captured graph instead of eager launches
    batch: int | str | None = "auto"  # launches per sample: "auto" (short kernels), an int, or None (1)
    batch_below_ms: float = 0.5       # "auto" batches kernels faster than this
    batch_sample_ms: float = 1.0      # "auto": launches per sample to reach this much kernel time
    max_batch: int = 256
    sleep: bool = True                # hide host enqueue latency behind a GPU spin
    sample_clocks: bool = True        # NVML SM-clock sampling during the timed phase

    def to_json(self) -> dict:
        """The options as a dict."""
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: dict | None) -> "BenchOptions":
        """The options of a dict, unknown keys ignored (None: the defaults)."""
        d = dict(d or {})
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def plan_batch(estimate_ms: float, opts: BenchOptions, host_ms: float = 0.0) -> int:
    """Launches per sample: 1 unless batching is asked for or the kernel is short.  A call whose time is mostly its
    host's, past what the spin can cover (a wrapper that recompiles its kernel every call through
    ``replace_hints``: the GPU waits on Python for ~40 ms of a 0.03 ms kernel), is timed as a graph too: a graph's
    replay holds the GPU work alone, as the suite's CUDA-graph bench times it."""
    if opts.batch in (None, 0, 1, False):
        return 1
    if opts.batch != "auto":
        return max(1, min(int(opts.batch), opts.max_batch))
    est = max(float(estimate_ms), 1e-6)
    if est >= opts.batch_below_ms:
        if opts.sleep and host_ms > SPIN_CAP_MS / 2 and host_ms >= 0.5 * est:
            return 2
        return 1
    return max(1, min(opts.max_batch, int(math.ceil(opts.batch_sample_ms / est))))


def plan_reps(estimate_ms: float, opts: BenchOptions) -> tuple[int, int]:
    """Warm-up and timed repetition counts bought by the ms budgets."""
    est = max(float(estimate_ms), 1e-6)
    n_warmup = max(1, int(math.ceil(opts.warmup_ms / est))) if opts.warmup_ms > 0 else 0
    n_warmup = min(n_warmup, max(opts.max_rep, 1) * 10)
    n_rep = int(math.ceil(opts.rep_ms / est)) if opts.rep_ms > 0 else opts.min_rep
    n_rep = max(opts.min_rep, min(opts.max_rep, n_rep))
    return n_warmup, max(1, n_rep)


class TimerBackend(Protocol):
    """What ``measure`` needs of a timer (CUDA events, CUDA graphs)."""
    name: str

    def setup(self, fn: Callable[[], Any], opts: BenchOptions) -> None: ...
    def run(self, n: int) -> None: ...                    # n untimed calls, then synchronize
    def estimate(self, n: int) -> tuple[float, float]: ...  # (device ms per call, host enqueue ms per call)
    def time_reps(self, n: int) -> list[float]: ...       # n cold-cache timed repetitions (ms per launch)
    def reset_peak_memory(self) -> None: ...
    def peak_memory_mb(self) -> int: ...
    def teardown(self) -> None: ...


@dataclass
class Measurement:
    """One timed measurement: stats, samples, the plan that made them and what was observed."""
    stats: TimingStats
    samples_ms: list[float]
    n_warmup: int
    estimate_ms: float
    host_enqueue_ms: float
    first_call_s: float
    backend: str
    flush_bytes: int
    options: BenchOptions
    observed: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The measurement as JSON (stats as a timing record)."""
        return {"stats": self.stats.record(), "samples_ms": self.samples_ms, "n_warmup": self.n_warmup,
                "estimate_ms": self.estimate_ms, "host_enqueue_ms": self.host_enqueue_ms,
                "first_call_s": self.first_call_s, "backend": self.backend,
                "flush_bytes": self.flush_bytes, "options": self.options.to_json(),
                "observed": self.observed}


@dataclass(frozen=True)
class Plan:
    """How a measurement samples: warm-up launches, timed samples, launches per sample and the GPU spin
    before each sample (ms).  ``measure`` makes one from its first calls' estimate; a comparison hands
    the baseline's to every version (``measure(plan=...)``), so that both run the same duty cycle: under
    a power cap the idle share between launches moves the SM clock, and a spin sized from each
    process's own noisy host-enqueue estimate gave each worker its own (A/A on an H100 GEMM: one
    version about 1 % apart from its copy for a whole sitting, the sign changing between sittings)."""
    n_warmup: int
    n_rep: int
    batch: int = 1
    sleep_ms: float = 0.0

    def to_json(self) -> dict:
        """The plan as a dict."""
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: Any) -> "Plan | None":
        """The plan of a dict (None for None, or for a dict that is not one)."""
        try:
            return cls(int(d["n_warmup"]), int(d["n_rep"]), int(d.get("batch", 1)), float(d.get("sleep_ms", 0.0)))
        except (TypeError, KeyError, ValueError):
            return None

    def samples_like(self, other: "Plan") -> bool:
        """The same warm-up, samples and batch (the spin may differ: ``measure`` takes the longer)."""
        return (self.n_warmup, self.n_rep, self.batch) == (other.n_warmup, other.n_rep, other.batch)


def sleep_ms_for(host_ms: float, opts: BenchOptions) -> float:
    """The GPU spin before a timed launch: twice the host's enqueue time (50 µs to 5 ms), so the start
    event is not followed by an idle gap while Python launches the kernel; 0 when ``opts.sleep`` is off."""
    return min(SPIN_CAP_MS, max(0.05, 2.0 * host_ms)) if opts.sleep else 0.0


@dataclass
class Kept:
    """``measure``'s set-up for one ``fn`` on fixed inputs, kept between calls (a loop worker
    measures the same version a dozen times in a step): the first call's estimate, repetition
    plan, flush buffer and batch graphs are reused, so a later call is warm-up and samples only,
    and every measurement of a comparison uses the same batch size.  ``close()`` frees them."""
    backend: Any = None
    opts: BenchOptions | None = None
    estimate_ms: float = 0.0
    host_ms: float = 0.0
    plan: Plan | None = None            # the plan it samples by
    asked: Plan | None = None           # the plan it was set up for (a batch that fell back differs from it)
    timer: dict = field(default_factory=dict)

    def holds(self, opts: BenchOptions, plan: Plan | None = None) -> bool:
        """Whether a set-up is kept, made with these options and (when one is given) sampling as ``plan``."""
        return self.backend is not None and self.opts == opts and \
            (plan is None or any(p is not None and p.samples_like(plan) for p in (self.plan, self.asked)))

    def close(self) -> None:
        """Tear the kept backend down (frees the flush buffer and graphs)."""
        if self.backend is not None:
            self.backend.teardown()
        self.backend = None


def measure(fn: Callable[[], Any], opts: BenchOptions | None = None, *, backend: TimerBackend | None = None,
            observers: Sequence[Any] = (), before_timed: Callable[[], Any] | None = None,
            keep: Kept | None = None, plan: Plan | None = None) -> Measurement:
    """Time ``fn`` (which launches GPU work asynchronously) under ``opts``.

    ``before_timed`` runs after the warm-up, just before the timed repetitions (the harness
    poisons the outputs there, so the outputs checked afterwards come from timed runs).
    ``keep``: reuse (and fill on the first call) the set-up of earlier calls on the same ``fn``
    and inputs (``Kept``); ``first_call_s`` is then 0.  ``plan``: sample as it says instead of as
    this call's estimate would (``Plan``; the spin is the longer of the plan's and what this ``fn``'s
    enqueue needs); the plan used is in ``observed["plan"]``.
    """
    opts = opts or BenchOptions()
    hold_replaced_kernels()          # a wrapper's per-call replace_hints: one kernel, kept (no unload in a capture)
    reuse = keep is not None and keep.holds(opts, plan)
    if reuse:
        backend, first_call_s = keep.backend, 0.0
        est, host, used = keep.estimate_ms, keep.host_ms, keep.plan
        timer: dict[str, Any] = dict(keep.timer)
    else:
        if keep is not None:
            keep.close()
        if backend is None:
            backend = CudaGraphBackend() if opts.cuda_graph else CudaEventBackend()
        # the first call compiles (cuTile JIT) and autotunes (TileGym): timed apart, never sampled
        t0 = time.perf_counter()
        backend.setup(fn, opts)
        first_call_s = time.perf_counter() - t0
    done = False
    try:
        if not reuse:
            est, host = backend.estimate(max(1, opts.initial_rep))
            used, timer = _set_up(backend, est, host, opts, plan)
            if keep is not None:
                keep.backend, keep.opts, keep.estimate_ms, keep.host_ms = backend, opts, est, host
                keep.plan, keep.asked, keep.timer = used, plan, dict(timer)
        # the spin: the longer of the plan's and this fn's own need (a comparison's may rise with a later version's)
        sleep_ms = max(plan.sleep_ms if plan else 0.0, sleep_ms_for(host, opts))
        if hasattr(backend, "set_sleep"):
            backend.set_sleep(sleep_ms)
        used = Plan(used.n_warmup, used.n_rep, used.batch, round(sleep_ms, 4))
        if used.n_warmup:
            getattr(backend, "warm", backend.run)(used.n_warmup)
        if before_timed is not None:
            before_timed()
        backend.reset_peak_memory()
        for o in observers:
            o.start()
        try:
            samples = backend.time_reps(used.n_rep)
        finally:
            observed: dict[str, Any] = {}
            for o in observers:
                observed.update(o.stop())
        timer.update(getattr(backend, "timer_info", lambda: {})())
        observed["timer"] = timer
        observed["plan"] = used.to_json()
        stats = summarize(samples, backend.peak_memory_mb())
        done = True
        return Measurement(stats=stats, samples_ms=list(samples), n_warmup=used.n_warmup, estimate_ms=est,
                           host_enqueue_ms=host, first_call_s=first_call_s, backend=backend.name,
                           flush_bytes=getattr(backend, "flush_bytes", 0), options=opts, observed=observed)
    finally:
        if keep is None:
            backend.teardown()
        elif not done:           # a failed call leaves nothing half set up for the next
            keep.close()


def _set_up(backend: Any, est: float, host: float, opts: BenchOptions, plan: Plan | None) -> tuple[Plan, dict]:
    """The plan a measurement samples by (``plan``, else the one the estimate buys) and the timer's record; captures
    the batch graphs when the plan batches."""
    n_warmup, n_rep = plan_reps(est, opts)
    timer: dict[str, Any] = {"batch": 1}
    k = plan.batch if plan else plan_batch(est, opts, host)
    if k > 1 and hasattr(backend, "batch"):
        why_not = backend.batch(k)
        if why_not:
            timer["batch_fallback"] = why_not       # not graph-capturable: eager launches, said so
        else:
            timer["batch"] = k
            # the same budgets, now spent k launches per sample: rep_ms of kernel time, at most
            # max_rep launches (each launch also costs a flush, twice: in the batch and alone)
            n_rep = max(opts.min_rep, min(int(math.ceil(opts.max_rep / k)),
                                          int(math.ceil(opts.rep_ms / (k * max(est, 1e-6))))))
    if hasattr(backend, "timer_overhead_ms"):
        timer["overhead_ms"] = backend.timer_overhead_ms()
    if plan is not None:
        n_warmup, n_rep = plan.n_warmup, plan.n_rep
    return Plan(n_warmup, n_rep, timer["batch"], sleep_ms_for(host, opts)), timer


# ---------------------------------------------------------------------------------------
# CUDA mechanisms

def default_flush_bytes(device=None) -> int:
    """Twice the device's L2, at least 256 MiB: what one zeroing must write to flush L2."""
    import torch
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    return max(2 * l2, 256 * MIB)


def _sm_clock_mhz(device=None) -> float:
    """Max SM clock for converting a sleep duration into cycles (NVML, else 2 GHz)."""
    try:
        from ..nvml import nvml_handle_for_torch_device
        import pynvml
        h = nvml_handle_for_torch_device(device)
        return float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception:
        return 2000.0


class CudaEventBackend:
    """Times each repetition with two CUDA events around one call, L2 flushed (and the GPU spun
    past the host's enqueue) before it; short kernels are batched in graphs."""
    name = "cuda-events"

    def __init__(self, device=None):
        self.device = device
        self.fn: Callable[[], Any] | None = None
        self.flush_buf = None
        self.flush_bytes = 0
        self.sleep_cycles = 0
        self._mem_base = 0

    # -- hooks for the graph backend --------------------------------------------------
    def _launch(self) -> None:
        self.fn()

    def setup(self, fn, opts):
        """Call ``fn`` once (compile, autotune, allocate) and allocate the flush buffer; NoGPUError
        without a CUDA GPU."""
        import torch
        if not torch.cuda.is_available():
            raise NoGPUError("no CUDA GPU visible to torch: timing needs a GPU",
                             hint=f"use the offline mode: {prog()} roofline <kernel> --device h200 --latency-ms X")
        self.fn = fn
        self.opts = opts
        fn()                                  # compile / autotune / allocate
        torch.cuda.synchronize(self.device)
        if opts.flush_l2:
            self.flush_bytes = int(opts.flush_bytes or default_flush_bytes(self.device))
            self.flush_buf = torch.empty(self.flush_bytes // 4, dtype=torch.int32, device=self.device or "cuda")
        self._clock_mhz = _sm_clock_mhz(self.device)

    def run(self, n):
        """``n`` untimed calls, then synchronize."""
        import torch
        for _ in range(n):
            self._launch()
        torch.cuda.synchronize(self.device)

    def estimate(self, n):
        """(device ms, host enqueue ms) per call over ``n`` back-to-back calls (the host's sizes the spin,
        ``set_sleep``)."""
        import torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(self.device)
        start.record()
        t0 = time.perf_counter()
        for _ in range(n):
            self._launch()
        host_ms = (time.perf_counter() - t0) * 1e3 / n
        end.record()
        torch.cuda.synchronize(self.device)
        dev_ms = start.elapsed_time(end) / n
        return dev_ms, host_ms

    def set_sleep(self, ms: float) -> None:
        """The GPU spin before each timed launch (``measure`` sizes it to outlast the host's enqueue of fn)."""
        import torch
        ok = ms > 0 and hasattr(torch.cuda, "_sleep")
        self.sleep_cycles = int(ms * 1e-3 * self._clock_mhz * 1e6) if ok else 0

    def timer_overhead_ms(self, n: int = 50) -> float:
        """Median elapsed time of an event pair around nothing: what the timer itself adds to a sample."""
        import torch
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        torch.cuda.synchronize(self.device)
        for s, e in pairs:
            s.record()
            e.record()
        torch.cuda.synchronize(self.device)
        xs = sorted(s.elapsed_time(e) for s, e in pairs)
        return xs[len(xs) // 2]

    def batch(self, k: int) -> str | None:
        """Capture ``k`` x (flush, fn) and ``k`` x flush into two CUDA graphs; ``time_reps`` then
        returns per-launch times.  The reason when ``fn`` cannot be captured (None on success)."""
        import torch
        try:
            s = torch.cuda.Stream(self.device)
            s.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(s):          # lazy state and the allocator, warmed off the graph
                self.fn()
            torch.cuda.current_stream(self.device).wait_stream(s)
            work, flush = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            with torch.cuda.graph(work):
                for _ in range(k):
                    if self.flush_buf is not None:
                        self.flush_buf.zero_()
                    self.fn()
            with torch.cuda.graph(flush):
                for _ in range(k):
                    if self.flush_buf is not None:
                        self.flush_buf.zero_()
            work.replay()                        # the first replay uploads the graph: not a sample
            flush.replay()
            torch.cuda.synchronize(self.device)
        except Exception as e:
            torch.cuda.synchronize(self.device)
            return f"CUDA-graph capture failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
        self._batch = (k, work, flush)
        return None

    def timer_info(self) -> dict:
        """The batched timer's flush-only time per launch (empty unbatched), for ``observed["timer"]``."""
        return dict(getattr(self, "_batch_info", {}))

    def warm(self, n: int) -> None:
        """``n`` warm-up launches: replays of the batch graph when there is one (the timed
        samples' own conditions, and an output the post-check then reads is a replay's), else eager."""
        import torch
        if not getattr(self, "_batch", None):
            return self.run(n)
        k, work, _ = self._batch
        for _ in range(max(1, math.ceil(n / k))):
            work.replay()
        torch.cuda.synchronize(self.device)

    def _time_batched(self, n):
        import torch
        k, work, flush = self._batch
        ev = lambda: torch.cuda.Event(enable_timing=True)
        pairs = [(ev(), ev(), ev(), ev()) for _ in range(n)]
        torch.cuda.synchronize(self.device)
        for s1, e1, s2, e2 in pairs:
            s1.record()
            work.replay()
            e1.record()
            s2.record()
            flush.replay()
            e2.record()
        torch.cuda.synchronize(self.device)
        flushes = sorted(s2.elapsed_time(e2) for _, _, s2, e2 in pairs)
        f = flushes[len(flushes) // 2]
        self._batch_info = {"flush_ms_per_launch": f / k}
        return [max(0.0, s1.elapsed_time(e1) - f) / k for s1, e1, _, _ in pairs]

    def time_reps(self, n):
        """``n`` timed calls (ms each), each after an L2 flush; batched when the kernel is short."""
        import torch
        if getattr(self, "_batch", None):
            return self._time_batched(n)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        torch.cuda.synchronize(self.device)
        for i in range(n):
            if self.flush_buf is not None:
                self.flush_buf.zero_()
            if self.sleep_cycles:
                torch.cuda._sleep(self.sleep_cycles)
            starts[i].record()
            self._launch()
            ends[i].record()
        torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def reset_peak_memory(self):
        """Reset torch's peak-memory counter of the device."""
        import torch
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_mb(self):
        """The peak memory torch allocated, less the flush buffer, in MiB."""
        import torch
        peak = torch.cuda.max_memory_allocated(self.device)
        # the flush buffer is the harness's, not the workload's
        return max(0, int((peak - self.flush_bytes) // MIB))

    def teardown(self):
        """Drop the flush buffer and batch graphs."""
        self.flush_buf = None
        self._batch = None


class CudaGraphBackend(CudaEventBackend):
    """Each repetition replays a CUDA graph holding one call of ``fn`` (no host launch cost)."""
    name = "cuda-graph"

    def setup(self, fn, opts):
        """The events backend's set-up, then capture one call of ``fn`` in a graph (warmed on a side stream)."""
        import torch
        super().setup(fn, opts)
        # warm the allocator and any lazy state on a side stream, as torch.cuda.graphs advises
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream(self.device).wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                fn()
        except Exception as e:
            from ..errors import CutileDiagError
            raise CutileDiagError(f"CUDA-graph capture of the workload failed: {type(e).__name__}: {e}",
                                  hint="run without --cuda-graph") from None
        torch.cuda.synchronize(self.device)

    def _launch(self):
        self.graph.replay()

    def teardown(self):
        """Drop the graph as well."""
        super().teardown()
        self.graph = None
