"""Stage 3's one way to measure: a version's time (checked) and the device's ceilings; and
everything else that runs a workload or a command (it sits above ``workloads``).

Public API::

    from cutile_diag.measure import MeasureRequest, measure_version, prepare, time_prepared

    r = measure_version(wl, cfg, MeasureRequest(options=BenchOptions(), check_seed=None))
    r.status, r.median_ms, r.check, r.post_check          # MeasureResult

    p = prepare(wl, cfg, seed=0, device="cuda:0", keep=True)   # a long-lived process (the loop's worker)
    t = time_prepared(p, options)                          # Timed(measurement, post_check); many times

    device_ceilings(dev, measure=False) -> Ceilings | None       # in a process that may touch the GPU
    ceilings_in_child(measure=..., timeout=...) -> CeilingAnswer # from one that must not (the loop)

* ``version``  — ``MeasureRequest``, ``MeasureResult``, ``Prepared``, ``Timed``, ``check``,
  ``prepare``, ``time_prepared``, ``measure_version``, ``device_info``
* ``isolated`` — ``measure_isolated`` (``measure_version`` in a killable child: ``child.py``),
  ``run_isolated`` (any ``pkg.mod:function`` there, its JSON-able return value back)
* ``ceilings`` — ``device_ceilings``, ``live_ceilings`` (a child's entry point),
  ``ceilings_in_child``, ``CeilingAnswer``
* ``roofline`` — ``roofline_workload`` and the ``roofline`` command's runs: a workload measured and
  placed on the device roofline
* ``capture``  — the kernel a workload (or a command) launches, captured with its observed launch
* ``observe``  — ``observe_command``: a command run with every ``ct.launch`` seen and timed
  (``_observer_site`` is the child's ``sitecustomize``); optionally recorded for replay
* ``replay``   — ``replay_folder``: a recorded launch timed and checked against its outputs
"""
from .ceilings import CeilingAnswer, ceilings_in_child, device_ceilings
from .isolated import IsolatedError, IsolatedTimeout, measure_isolated, run_isolated
from .version import (STATUSES, MeasureRequest, MeasureResult, Prepared, Timed, check, device_info,
                      measure_config, measure_version, prepare, time_prepared)

__all__ = ["CeilingAnswer", "ceilings_in_child", "device_ceilings", "STATUSES", "MeasureRequest",
           "MeasureResult", "Prepared", "Timed", "check", "device_info", "measure_config", "measure_version",
           "prepare", "time_prepared", "IsolatedError", "IsolatedTimeout", "measure_isolated", "run_isolated"]
