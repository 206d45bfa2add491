"""Replay: a recorded ``ct.launch`` becomes a workload that runs in milliseconds.

One job per module:

* ``store``  — the folder format (``replay.json`` + ``.pt`` byte buffers), versioned schema;
* ``record`` — in the observed process: the first launch of each signature is written to a folder
  (argument contents before, written arguments after, grid, scalars, the wrapper's call);
* ``load``   — ``load(folder) -> Replay`` (``.args``, ``.grid``, ``.kernel``, ``.wrapper``, ``.outputs``);
* ``workload`` — ``ReplayWorkload``: a ``Workload`` over one or more recordings, so the timing harness
  and the loop's long-lived workers time and check a replay like any other workload;
* timing a replay and checking it against the recorded outputs is ``measure.replay.replay_folder``
  (``cutile-diag replay FOLDER``): it runs the workload, so it sits above ``workloads``.
"""
from .load import Replay, load
from .store import ReplayError

__all__ = ["Replay", "ReplayError", "load"]
