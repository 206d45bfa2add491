"""Where a step's wall time goes (issue 21, item 3): compile, check, time, capture.

``StepClock`` collects the intervals of one iteration (wall-clock timestamps, so intervals of
concurrent compiles compare across processes); ``to_json`` is what the ledger keeps under
``step_costs``: per phase the busy seconds (overlapping intervals counted once), the first
start and the last end; and each compile's own interval (``compiles``).  ``loop status`` shows
it per iteration (``rows``).
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterable, Mapping

from .compile_pool import stamp

PHASES = ("compile", "capture", "check", "time")


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
    def __init__(self):
        self.intervals: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASES}
        self.compiles: list[dict] = []
        self.counts: dict[str, dict[str, float]] = {}

    def count(self, phase: str, **amounts: float) -> None:
        """Add to a phase's tallies (e.g. ``time``: measure requests, seconds inside the worker)."""
        tally = self.counts.setdefault(phase, {})
        for k, v in amounts.items():
            tally[k] = tally.get(k, 0) + v

    def add(self, phase: str, start: float, end: float) -> None:
        self.intervals.setdefault(phase, []).append((start, end))

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.time()
        try:
            yield
        finally:
            self.add(name, t0, time.time())

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        for p, iv in self.intervals.items():
            if iv:
                out[p] = {"s": round(_busy(iv), 3), "start": stamp(min(s for s, _ in iv)),
                          "end": stamp(max(e for _, e in iv)), "n": len(iv),
                          **{k: round(v, 3) for k, v in self.counts.get(p, {}).items()}}
        if self.compiles:
            out["compiles"] = list(self.compiles)
        return out


def overlapping(compiles: Iterable[Mapping]) -> bool:
    """Did any two compiles run at the same time (their ISO intervals intersect)?"""
    iv = sorted((c["start"], c["end"]) for c in compiles if c.get("start") and c.get("end"))
    return any(b[0] < a[1] for a, b in zip(iv, iv[1:]))


def split_line(step_costs: Mapping | None) -> str:
    """``compile 4.1 s (4 in parallel) · check 2.0 s · time 1.2 s · capture 0 s`` for one iteration."""
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
        if p == "time" and d.get("requests"):
            extra = f" ({int(d['requests'])} runs, {d.get('worker_s', 0):.1f} s of them timing)"
        parts.append(f"{p} {d['s']:.1f} s{extra}")
    return " · ".join(parts)
