"""Measure one version of a kernel: check -> poison -> time -> post-check, written once.

Every path that times a kernel goes through here: ``measure_version`` for a one-shot
measurement (the workload mode, ``roofline``, ``diagnose``, the isolated child of
``measure.isolated``), and its two halves ``prepare`` + ``time_prepared`` for a process that keeps a
version loaded and times it many times (the loop's worker, ``loop calibrate`` through it, and a
backend that replays recorded launches).

Order of a measurement: (1) ``check``: fresh inputs from ``check_seed`` (None: a fresh seed,
recorded in ``MeasureResult.check.seed``), outputs poisoned, compared with the reference; a
failing check stops here, a wrong kernel's time means nothing; (2) ``prepare``: new inputs from
``seed`` and the reference for them computed up front; (3) ``time_prepared``: warm-up, then the
outputs poisoned and the timed repetitions; (4) the outputs the timed runs left are compared with
the reference (``Timed.post_check``), which catches kernels that skip work once warmed up.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..harness.correctness import (
    CheckResult,
    check_outputs,
    check_workload,
    poison_,
    reference_outputs,
    run_outputs,
)
from ..harness.observers import ClockObserver
from ..harness.stats import TimingStats
from ..harness.timing import BenchOptions, Kept, Measurement, Plan, measure
from ..errors import CutileDiagError
from ..workload import Workload, WorkloadConfig, WorkloadError

STATUSES = ("ok", "mismatch", "error", "timeout", "unavailable", "no_gpu")

#: the correctness check of step (1): ``check(wl, cfg, seed=None, device="cuda") -> CheckResult``
check = check_workload


@dataclass
class MeasureRequest:
    """How to measure one configuration: the timing budgets and which checks run."""
    options: BenchOptions = field(default_factory=BenchOptions)
    check: bool = True                  # step (1); off only where the caller checked already
    seed: int = 0                       # the timed runs' inputs
    check_seed: int | None = None       # the check's inputs; None: a fresh seed, recorded
    device: str = "cuda"
    post_check: bool = True             # step (4), for workloads whose outputs are repeatable


@dataclass
class MeasureResult:
    """What one measurement gives: a status from ``STATUSES``, the timing and both checks."""
    workload: str
    config: str
    status: str
    error: str | None = None
    stats: TimingStats | None = None
    check: CheckResult | None = None
    post_check: CheckResult | None = None
    measurement: dict[str, Any] = field(default_factory=dict)   # samples, budgets, clocks
    device: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        """The check passed and the timed runs' outputs were right."""
        return self.status == "ok"

    @property
    def median_ms(self) -> float | None:
        """The median timed repetition, or None when nothing was timed."""
        return self.stats.median if self.stats else None

    def to_json(self) -> dict:
        """The JSON form the isolated child writes and ``from_json`` reads back."""
        return {"workload": self.workload, "config": self.config, "status": self.status, "error": self.error,
                "stats": self.stats.record() if self.stats else None,
                "check": self.check.to_json() if self.check else None,
                "post_check": self.post_check.to_json() if self.post_check else None,
                "measurement": self.measurement, "device": self.device, "wall_s": self.wall_s}

    @classmethod
    def from_json(cls, d: dict) -> "MeasureResult":
        """The inverse of ``to_json`` (missing keys take their defaults)."""
        return cls(workload=d.get("workload", ""), config=d.get("config", ""), status=d.get("status", "error"),
                   error=d.get("error"), stats=TimingStats.from_record(d["stats"]) if d.get("stats") else None,
                   check=CheckResult.from_json(d.get("check")), post_check=CheckResult.from_json(d.get("post_check")),
                   measurement=d.get("measurement") or {}, device=d.get("device") or {},
                   wall_s=float(d.get("wall_s") or 0.0))


@dataclass
class Prepared:
    """One configuration ready to be timed, possibly many times.

    ``call`` launches the kernel(s) once (asynchronously); ``poison`` fills the outputs before
    the timed repetitions and ``verify`` compares what the last call left (it gets that call's
    return value) with the reference; both None when there is nothing to post-check.  ``keep``
    holds the timing set-up between ``time_prepared`` calls (None: set up and torn down each
    time).  A backend that does not run a ``Workload`` (e.g. one replaying recorded launches on
    recorded tensors) builds this record itself.
    """
    name: str
    call: Callable[[], Any]
    poison: Callable[[], None] | None = None
    verify: Callable[[Any], CheckResult] | None = None
    keep: Kept | None = None
    last: Any = None                    # what the last call returned (graphs replayed keep writing it)

    def run(self) -> None:
        """One call, its result kept for ``verify``: the function ``measure`` times."""
        self.last = self.call()


@dataclass
class Timed:
    """What ``time_prepared`` gives: the timing, and the post-check when one ran."""
    measurement: Measurement
    post_check: CheckResult | None = None


def prepare(wl: Workload, cfg: WorkloadConfig, *, seed: int = 0, device: str = "cuda", post_check: bool = True,
            keep: bool = False) -> Prepared:
    """Step (2): inputs from ``seed`` on ``device`` and, when ``post_check`` and the workload's
    outputs are repeatable, the reference for them; ``keep``: the timing set-up is kept between
    ``time_prepared`` calls.  Raises what ``make_inputs`` or the reference raise."""
    inputs = wl.make_inputs(cfg, seed, device)
    expected = reference_outputs(wl, inputs) if (post_check and wl.repeatable) else None
    p = Prepared(name=cfg.name, call=lambda: wl.run(inputs), keep=Kept() if keep else None)
    if expected is not None:
        def poison() -> None:
            wl.reset(inputs)             # inputs a kernel writes in place back to theirs (a replay's recording)
            for n in wl.outputs:
                if n in inputs:
                    poison_(inputs[n])

        def verify(result: Any) -> CheckResult:
            return check_outputs(wl, cfg, run_outputs(wl, inputs, result), expected, seed)
        p.poison, p.verify = poison, verify
    return p


def time_prepared(p: Prepared, options: BenchOptions | None = None, *, post_check: bool = True,
                  observers: Sequence[Any] = (), backend: Any = None, plan: Plan | None = None) -> Timed:
    """Steps (3) and (4): warm-up, outputs poisoned, the timed repetitions (``harness.timing.measure``
    under ``options`` and, in a comparison, the baseline's ``plan``, with ``observers`` and, for tests, a fake timer
    ``backend``), then the
    outputs the timed runs left verified (``post_check`` and ``p.verify``).  Raises what the
    run raises; the caller turns that into its own error."""
    import torch
    checked = post_check and p.verify is not None
    with torch.no_grad():
        m = measure(p.run, options or BenchOptions(), backend=backend, observers=observers,
                    before_timed=p.poison if checked else None, keep=p.keep, plan=plan)
        return Timed(m, p.verify(p.last) if checked else None)


def device_info(device: str) -> dict:
    """Name, SM count and compute capability of ``device`` ({} when torch cannot tell)."""
    import torch
    try:
        idx = torch.device(device).index
        idx = torch.cuda.current_device() if idx is None else idx
        p = torch.cuda.get_device_properties(idx)
        return {"index": idx, "name": p.name, "sm_count": p.multi_processor_count,
                "capability": f"{p.major}.{p.minor}"}
    except Exception:
        return {}


def measure_version(wl: Workload, cfg: WorkloadConfig, req: MeasureRequest | None = None, *,
                    backend: Any = None) -> MeasureResult:
    """Check, then time one configuration of the loaded version in this process.

    Never raises for the kernel's failure: a failed check is ``mismatch`` (or ``error`` when
    the run raised), a failed post-check ``mismatch``, a run that raises ``error``; a workload
    that cannot run here ``unavailable``, no GPU ``no_gpu``.  ``WorkloadError`` and other
    ``CutileDiagError`` (the user's workload is broken) propagate.  ``backend``: a fake timer
    for tests."""
    import torch
    req = req or MeasureRequest()
    t0 = time.perf_counter()
    res = MeasureResult(workload=wl.ref or wl.name, config=cfg.name, status="ok")

    def done(status: str, error: str | None = None) -> MeasureResult:
        res.status, res.error, res.wall_s = status, error, time.perf_counter() - t0
        return res

    why = wl.available()
    if why:
        return done("unavailable", why)
    if str(req.device).startswith("cuda") and not torch.cuda.is_available():
        return done("no_gpu", "no CUDA GPU visible to torch; use --device <preset> --latency-ms X offline")
    res.device = device_info(req.device)
    with torch.no_grad():
        if req.check:
            res.check = check(wl, cfg, seed=req.check_seed, device=req.device)
            if res.check.error:
                return done("error", res.check.error)
            if not res.check.passed:
                return done("mismatch", res.check.summary)
        try:
            p = prepare(wl, cfg, seed=req.seed, device=req.device, post_check=req.post_check)
        except WorkloadError:
            raise
        except Exception as e:
            return done("error", f"preparing inputs raised {type(e).__name__}: {e}")
        observers = [ClockObserver(req.device)] if req.options.sample_clocks else []
        try:
            t = time_prepared(p, req.options, observers=observers, backend=backend)
        except CutileDiagError:
            raise
        except Exception as e:
            return done("error", f"run raised {type(e).__name__}: {' '.join(str(e).split())[:300]}")
        res.stats, res.measurement, res.post_check = t.measurement.stats, t.measurement.to_json(), t.post_check
        if t.post_check is not None and not t.post_check.passed:
            return done("mismatch", "outputs of the timed runs are wrong: " + t.post_check.summary)
    return done("ok")


def measure_config(wl: Workload, cfg: WorkloadConfig, options: BenchOptions | None = None, *,
                   check: bool = True, seed: int = 0, check_seed: int | None = None,
                   device: str = "cuda", post_check: bool = True) -> MeasureResult:
    """``measure_version`` with the request's fields as keywords (scripts under bench/gpu use it)."""
    return measure_version(wl, cfg, MeasureRequest(options or BenchOptions(), check, seed, check_seed, device,
                                                   post_check))
