"""Where a step's wall time goes (issue 21, item 3): diagnose, compile, capture, check, time, confirm.

``StepClock`` collects the intervals of one iteration (wall-clock timestamps, so intervals of
concurrent compiles compare across processes); ``to_json`` is what the ledger keeps under
``step_costs``: per phase the busy seconds (overlapping intervals counted once), the first
start and the last end, how many intervals (``n``) and how many runs they held (``runs``: the
checks, compiles and captures; for ``time`` the measurements, one version in one round each —
in command mode one run of --bench-cmd apiece); each compile's own interval (``compiles``);
and the whole step (``wall_s``: from the clock's start — before the diagnosis for a loop
step — to its record) with what no phase covers (``other_s``: git, IR diffs, the decision).
``confirm`` is the user's test command a replayed step runs before it is kept (issue 29): kept
apart so a step's screening cost reads apart from what only keeps pay.
``loop status`` shows it per iteration (``split_line``).
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterable, Mapping

from .compile_pool import stamp

PHASES = ("diagnose", "compile", "capture", "check", "time", "confirm")


def _busy(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by the union of the intervals."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


class StepClock:
    """Where one step's wall time goes: busy intervals per phase (diagnose, compile, capture, check, time), run counts
    and compiles."""
    def __init__(self):
        self.started = time.time()
        self.intervals: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASES}
        self.runs: dict[str, int] = {}
        self.compiles: list[dict] = []
        self.counts: dict[str, dict[str, float]] = {}

    def count(self, phase: str, **amounts: float) -> None:
        """Add to a phase's tallies (e.g. ``time``: measure requests, seconds inside the worker)."""
        tally = self.counts.setdefault(phase, {})
        for k, v in amounts.items():
            tally[k] = tally.get(k, 0) + v

    def add(self, phase: str, start: float, end: float, runs: int = 1) -> None:
        """Record a busy interval of ``phase`` and the runs it made."""
        self.intervals.setdefault(phase, []).append((start, end))
        self.runs[phase] = self.runs.get(phase, 0) + runs

    @contextlib.contextmanager
    def phase(self, name: str, runs: int = 1):
        """Time the block as a busy interval of phase ``name``."""
        t0 = time.time()
        try:
            yield
        finally:
            self.add(name, t0, time.time(), runs)

    def to_json(self) -> dict:
        """Per phase its busy seconds (overlaps counted once), span and counts; the compiles, the wall time and what
        no phase covers."""
        out: dict[str, Any] = {}
        for p, iv in self.intervals.items():
            if iv:
                out[p] = {"s": round(_busy(iv), 3), "start": stamp(min(s for s, _ in iv)),
                          "end": stamp(max(e for _, e in iv)), "n": len(iv), "runs": self.runs.get(p, len(iv)),
                          **{k: round(v, 3) for k, v in self.counts.get(p, {}).items()}}
        if self.compiles:
            out["compiles"] = list(self.compiles)
        wall = time.time() - self.started
        out["wall_s"] = round(wall, 3)
        out["other_s"] = round(max(0.0, wall - _busy(x for iv in self.intervals.values() for x in iv)), 3)
        return out


def overlapping(compiles: Iterable[Mapping]) -> bool:
    """Did any two compiles run at the same time (their ISO intervals intersect)?"""
    iv = sorted((c["start"], c["end"]) for c in compiles if c.get("start") and c.get("end"))
    return any(b[0] < a[1] for a, b in zip(iv, iv[1:]))


def split_line(step_costs: Mapping | None) -> str:
    """``diagnose 1.2 s · compile 4.1 s (4 in parallel) · check 2.0 s (1 run) · time 1.2 s (4 runs)
    · other 0.3 s`` for one iteration."""
    sc = dict(step_costs or {})
    parts = []
    for p in PHASES:
        d = sc.get(p)
        if not d:
            continue
        extra = ""
        if p == "compile" and sc.get("compiles"):
            n = len(sc["compiles"])
            extra = f" ({n} {'in parallel' if n > 1 and overlapping(sc['compiles']) else 'compile' + ('s' if n > 1 else '')})"
        elif p == "time" and d.get("requests"):     # a worker's measure requests, and their share timing
            extra = f" ({int(d['requests'])} runs, {d.get('worker_s', 0):.1f} s of them timing)"
        elif p == "confirm":
            extra = " (the test command)"
        elif p in ("check", "time", "capture") and d.get("runs"):
            extra = f" ({d['runs']} run{'s' if d['runs'] != 1 else ''})"
        parts.append(f"{p} {d['s']:.1f} s{extra}")
    if parts and isinstance(sc.get("other_s"), (int, float)):
        parts.append(f"other {sc['other_s']:.1f} s")
    return " · ".join(parts)
