"""Measurement backends: how the loop checks a version and times it against another.

One protocol, three implementations:

* ``WorkloadBackend`` — a ``cutile_diag.workload`` (configurations, inputs, reference) run
  by long-lived workers (``backends/worker.py``), one per version, so the last kept version and
  the candidate are measured in the same sitting, alternating request by request;
* ``CommandBackend`` — the user's own commands, TileGym style: ``--test-cmd`` decides
  correctness by its exit status, ``--bench-cmd`` prints ``--print-record`` records whose
  medians are the latencies (one configuration per test id); FLOP/byte counts given per
  configuration (``--flops``/``--bytes``) give it the roofline guard, without them it says
  the guard could not run;
* ``ReplayBackend`` — command mode at workload speed: the baseline's test command records each
  launch signature of the kernel, versions are checked and timed on the recordings by workload
  mode's workers, the user's test command confirms a step before it is kept and the bench command
  gives start and final in the suite's own numbers (``--no-replay``: the command backend);
* ``SimulatedBackend`` — deterministic fake latencies for CI: per version, from the
  transforms applied and markers in the source, with configurable noise and planted
  behaviours (a wrong transform, a regression on one configuration, a crash, a hang, an
  impossible speedup above the roof).

A ``Version`` is the content of the loop-controlled files (kernel file, launch wrapper).
The work tree is the loop's own worktree; every child runs there with the worktree's copy
of the user's code first on ``PYTHONPATH``, and checks that nothing was imported from the
user's checkout instead (``loop.imports``).
Backends that run the code put a version's files into the work tree while they need it
(``Workspace.materialize``) and give every version its own bytecode cache
(``PYTHONPYCACHEPREFIX``), since two versions of a file may share a size and an mtime
second — Python's pyc check would otherwise hand one the other's bytecode.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..errors import BackendError
from .base import (Backend, CorrectnessFailure, Runs, Verification, Version, Workspace, check_deadline, closing,
                   round_order)
from .command import CommandBackend
from .replay import ReplayBackend
from .simulated import SimSpec, SimulatedBackend
from .workload import WorkloadBackend

__all__ = ["Backend", "CorrectnessFailure", "Runs", "Verification", "Version", "Workspace", "check_deadline",
           "closing", "round_order", "CommandBackend", "ReplayBackend", "SimSpec", "SimulatedBackend", "WorkloadBackend",
           "backend_from_json"]


def backend_from_json(d: Mapping[str, Any], *, log_dir: Path | None = None) -> Backend:
    """Rebuild a backend from the setup record (``loop record`` / ``--resume`` need no flags)."""
    kind = d.get("backend")
    if kind == "workload":
        return WorkloadBackend(d["workload"], kwargs=d.get("kwargs"), configs=d.get("configs"),
                               bench_options=d.get("bench_options"), device=d.get("device"), log_dir=log_dir)
    if kind in ("command", "replay"):
        cmd = CommandBackend(d["test_cmd"], d["bench_cmd"], framework=d.get("framework", "cutile"),
                             direction=d.get("direction", "forward"), env=d.get("env"), log_dir=log_dir,
                             counts=d.get("counts"))
        if kind == "command":
            return cmd
        # the recordings live in the loop's state folder (next to logs/), unless given (a campaign's survey)
        where = d.get("replay_dir") or (Path(log_dir).parent / "replay" if log_dir else None)
        if where is None:
            return cmd                # described only (noise floor lookup): nothing is recorded or measured
        return ReplayBackend(cmd, where, kernel=d.get("kernel"), kernel_file=d.get("kernel_file"),
                             bench_options=d.get("bench_options"), device=d.get("device"), log_dir=log_dir)
    if kind == "simulated":
        return SimulatedBackend(d["spec"])
    raise BackendError(f"unknown backend {kind!r} in the ledger")
