"""Calibrated predictions: what the loop measured on this machine, per playbook entry.

The loop's ledgers (read with the loop's own ``Ledger.load``) record, for every iteration,
the entry it applied, the diagnosis that predicted its effect and the side-by-side
comparison that measured it.  ``Calibration`` gathers those as ``PastStep`` records;
``expected_gain`` blends an entry's prior (its playbook range, bounded by the kernel's
headroom) with the measured effects — a step that measured +2 % three times is not
expected to give +40 % the fourth time.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..errors import UsageError
from ..ledger import LEDGER_FILE, Ledger, LedgerError, find_ledgers


@dataclass
class PastStep:
    """One step of a past loop: its playbook entry, outcome and measured vs predicted gain."""
    entry: str
    kernel: str
    iteration: int
    status: str                          # keep | revert | crash
    measured: float | None               # t_before / t_after - 1 (None: never timed)
    predicted_low: float | None = None
    predicted_high: float | None = None
    predicted_expected: float | None = None
    ledger: str = ""
    cls: str | None = None               # the kernel's evidence class when it was diagnosed (None: not recorded)

    def to_json(self) -> dict:
        """The step's fields as a dict."""
        return dict(vars(self))


@dataclass
class Calibration:
    """The past steps read from ledgers, which temper the predicted effect of an entry."""
    steps: list[PastStep] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def similar(self, entry: str, cls: str | None = None) -> list[PastStep]:
        """The entry's steps on similar kernels: the same evidence class (``cls``; a step whose
        class was not recorded counts for every class)."""
        return [s for s in self.steps if s.entry == entry and (cls is None or s.cls in (None, cls))]

    def measured(self, entry: str, cls: str | None = None) -> list[float]:
        """The measured gains of the entry's timed similar steps."""
        return [s.measured for s in self.similar(entry, cls) if s.measured is not None]

    def __bool__(self) -> bool:
        return bool(self.steps)

    @classmethod
    def from_paths(cls, paths: Iterable[str | Path]) -> "Calibration":
        """Ledger files, loop state folders, or folders searched for ``ledger.jsonl`` (or its ``.gz``)."""
        cal = cls()
        for p in map(Path, paths):
            if p.is_file():
                files = [p]
            elif p.is_dir():
                files = find_ledgers(p)
                if not files:
                    raise UsageError(f"{p}: no {LEDGER_FILE} under this folder")
            else:
                raise UsageError(f"{p}: no such ledger or folder")
            for f in files:
                try:
                    led = Ledger.load(f.parent, file=f)
                except LedgerError as e:
                    raise UsageError(e.one_line()) from None
                cal.sources.append(str(f))
                cal.steps.extend(steps_of(led, str(f)))
        return cal


def steps_of(led: Ledger, source: str = "") -> list[PastStep]:
    """Every applied step of one ledger with its prediction (from the diagnosis that chose it)."""
    kernel = str(led.setup.get("kernel") or led.setup.get("function") or "?")
    return [PastStep(entry=r.entry, kernel=kernel, iteration=r.iteration, status=str(r.status), measured=r.gain,
                     predicted_low=r.predicted.get("low"), predicted_high=r.predicted.get("high"),
                     predicted_expected=r.predicted.get("expected"), ledger=source,
                     cls=r.bottleneck)
            for r in led.iteration_records() if r.entry and r.iteration != 0]


def prior_expected(low: float, high: float) -> float:
    """A point estimate inside the playbook range: the geometric mean of the bounds (the
    ranges span orders of magnitude, so the arithmetic mean would sit near the hopeful end)."""
    if high <= 0:
        return max(high, 0.0)
    return math.sqrt(max(low, 0.01) * high) if high > 0.01 else high


def expected_gain(low: float, high: float, measured: list[float], ncu_gain: float | None = None) -> tuple[float, str]:
    """(expected gain, how it was reached).  The prior counts as half an observation, so one
    measurement on this machine already weighs 2/3 and three weigh 6/7; an Nsight Compute
    estimate bounds the range from above (it is a best case: on the H200 its estimates of +15 %,
    +20 % and +50 % for three TileGym ops measured +0.0 %, +0.8 % and +6.1 %); never above
    ``high`` (the headroom bound)."""
    base, how = prior_expected(low, high), "prior (playbook range)"
    if ncu_gain is not None:
        top = min(max(ncu_gain, 0.0), high)
        base, how = prior_expected(min(low, top), top), "playbook range bounded by Nsight Compute's estimate"
    if measured:
        n = len(measured)
        med = statistics.median(measured)
        w = n / (n + 0.5)
        base = w * med + (1 - w) * base
        how = f"{n} measured step(s) on this machine (median {med:+.1%}) blended with the {how}"
    return round(min(base, high), 4), how
