"""Stage 3 — the benchmark harness: timing (cold L2, CUDA events or graphs) + correctness.

Public API::

    from cutile_diag.bench import (BenchOptions, measure, measure_config, measure_isolated,
                                   run_isolated, check_workload, compare, summarize, noise_study)

    r = measure_isolated("examples:matmul", "4096-f16", timeout_s=300)   # what the loop uses
    r.status, r.stats.record(), r.check.summary

* ``timing``      — ``BenchOptions``, ``measure(fn, opts)``, ``plan_reps``, CUDA backends
* ``stats``       — ``summarize`` -> ``TimingStats`` (TileGym's record keys), ``noise_study``
* ``correctness`` — ``compare``, ``check_workload``, ``poison_``
* ``runner``      — ``measure_config`` (in-process), ``measure_isolated`` / ``run_isolated``
                    (subprocess killed on timeout), ``MeasureResult``
* ``observers``   — ``ClockObserver`` (NVML SM clock during the timed phase)
* ``worker``      — the subprocess entry point
"""
from .correctness import CheckResult, Comparison, check_outputs, check_workload, compare, poison_
from .runner import (IsolatedError, IsolatedTimeout, MeasureResult, measure_config, measure_isolated,
                     run_isolated)
from .stats import RECORD_KEYS, NoiseStudy, TimingStats, noise_study, summarize
from .timing import BenchOptions, Measurement, measure, plan_reps

__all__ = ["BenchOptions", "Measurement", "measure", "plan_reps", "RECORD_KEYS", "TimingStats", "summarize",
           "NoiseStudy", "noise_study", "Comparison", "CheckResult", "compare", "check_workload",
           "check_outputs", "poison_", "MeasureResult", "measure_config", "measure_isolated", "run_isolated",
           "IsolatedError", "IsolatedTimeout"]
