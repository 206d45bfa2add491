"""Time a recording and check it against its recorded outputs (``cutile-diag replay FOLDER``).

``replay_folder(folder)`` loads the recording as a ``ReplayWorkload`` and runs the bench harness's
check -> poison -> time -> post-check on each of its configurations (``measure.version``:
L2 flushed, CUDA graphs for short kernels), in this process.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..harness.timing import BenchOptions
from .version import MeasureResult, measure_config
from ..workloads import load_workload
from ..replay.store import ReplayError
from ..replay.workload import REF_PREFIX, ReplayWorkload


@dataclass
class ReplayRun:
    """One replay of a recording: the measured result of each of its configurations."""
    folder: str
    kernel: str
    results: list[MeasureResult] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every configuration checked and timed."""
        return all(r.ok for r in self.results)

    def to_json(self) -> dict:
        """The ``replay --json`` document."""
        return {"folder": self.folder, "kernel": self.kernel, "ok": self.ok, "notes": self.notes,
                "results": [r.to_json() for r in self.results]}


def replay_folder(folder: str | Path, *, options: BenchOptions | None = None, file: str | None = None,
                  device: str = "cuda") -> ReplayRun:
    """Check and time every recording in ``folder``; bad recordings raise ``ReplayError`` (exit 2)."""
    kw = {"file": file} if file else {}
    wl: ReplayWorkload = load_workload(REF_PREFIX + str(folder), **kw)
    why = wl.available()
    if why:
        raise ReplayError(why)
    out = ReplayRun(str(folder), wl.kernel_name)
    for cfg in wl.configs:
        out.results.append(measure_config(wl, cfg, options or BenchOptions(), device=device))
    out.notes = dict(wl.notes)
    return out
