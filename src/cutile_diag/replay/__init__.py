"""Replay: a recorded ``ct.launch`` becomes a workload that runs in milliseconds.

One job per module:

* ``store``  — the folder format (``replay.json`` + ``.pt`` byte buffers), versioned schema;
* ``record`` — in the observed process: the first launch of each signature is written to a folder
  (argument contents before, written arguments after, grid, scalars, the wrapper's call);
* ``load``   — ``load(folder) -> Replay`` (``.args``, ``.grid``, ``.kernel``, ``.wrapper``, ``.outputs``);
* ``workload`` — ``ReplayWorkload``: a ``Workload`` over one or more recordings, so the bench harness
  and the loop's long-lived workers time and check a replay like any other workload;
* ``run``    — ``replay_folder(folder)``: time it and check it against the recorded outputs
  (``cutile-diag replay FOLDER``).
"""
from .load import Replay, load
from .store import ReplayError

__all__ = ["Replay", "ReplayError", "load"]
