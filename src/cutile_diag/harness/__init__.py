"""Stage 3 — the benchmark harness: timing (cold L2, CUDA events or graphs) + correctness.

Public API::

    from cutile_diag.harness import BenchOptions, measure, check_workload, compare, summarize, noise_study

    m = measure(fn, BenchOptions())          # fn launches the kernel(s); m.stats.record()
    check_workload(wl, cfg).summary

A version's measurement (check -> poison -> time -> post-check, in this process or a killable
child) is ``cutile_diag.measure``'s, built on these pieces.

* ``timing``      — ``BenchOptions``, ``measure(fn, opts)``, ``plan_reps``, CUDA backends
* ``stats``       — ``summarize`` -> ``TimingStats`` (TileGym's record keys), ``noise_study``
* ``correctness`` — ``compare``, ``check_workload``, ``poison_``
* ``observers``   — ``ClockObserver`` (NVML SM clock during the timed phase)
"""
from .correctness import CheckResult, Comparison, check_outputs, check_workload, compare, poison_
from .stats import RECORD_KEYS, NoiseStudy, TimingStats, noise_study, summarize
from .timing import BenchOptions, Measurement, measure, plan_reps

__all__ = ["BenchOptions", "Measurement", "measure", "plan_reps", "RECORD_KEYS", "TimingStats", "summarize",
           "NoiseStudy", "noise_study", "Comparison", "CheckResult", "compare", "check_workload",
           "check_outputs", "poison_"]
