"""Timing statistics with exactly the record keys TileGym's perf tests produce.

Public API::

    RECORD_KEYS = ("mean", "std", "rel_std", "median", "min", "max", "nrep", "peak_mem_mb")
    summarize(times_ms, peak_mem_mb) -> TimingStats      # .record() -> dict with RECORD_KEYS only
    TimingStats.from_record(d)
    noise_study(list_of_TimingStats) -> NoiseStudy      # run-to-run spread of repeated measurements

Conventions (TileGym's): times in milliseconds; ``std`` is the sample standard deviation
(n - 1); ``rel_std`` is ``std / mean`` in **percent**; ``peak_mem_mb`` an integer MiB.
One deliberate difference: ``median`` is the true median (mean of the two middle samples
for an even count), where ``torch.median`` returns the lower one.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

RECORD_KEYS = ("mean", "std", "rel_std", "median", "min", "max", "nrep", "peak_mem_mb")


@dataclass(frozen=True)
class TimingStats:
    """The summary of one measurement's samples (ms; rel_std in percent)."""
    mean: float
    std: float
    rel_std: float          # percent
    median: float
    min: float
    max: float
    nrep: int
    peak_mem_mb: int

    def record(self) -> dict:
        """The TileGym-compatible record: exactly RECORD_KEYS, in that order."""
        return {k: getattr(self, k) for k in RECORD_KEYS}

    to_json = record

    @classmethod
    def from_record(cls, d: dict) -> "TimingStats":
        """The stats of a timing record; ValueError naming the keys it lacks."""
        missing = [k for k in RECORD_KEYS if k not in d]
        if missing:
            raise ValueError(f"timing record lacks {', '.join(missing)}")
        return cls(float(d["mean"]), float(d["std"]), float(d["rel_std"]), float(d["median"]),
                   float(d["min"]), float(d["max"]), int(d["nrep"]), int(d["peak_mem_mb"]))


def summarize(times_ms: Sequence[float], peak_mem_mb: int | float = 0) -> TimingStats:
    """The stats of the samples; ValueError on none or on a negative or non-finite sample."""
    xs = [float(t) for t in times_ms]
    if not xs:
        raise ValueError("no timing samples")
    bad = [t for t in xs if not math.isfinite(t) or t < 0]
    if bad:
        raise ValueError(f"invalid timing sample {bad[0]!r} (negative or not finite)")
    mean = statistics.fmean(xs)
    std = statistics.stdev(xs) if len(xs) > 1 else 0.0
    rel = (std / mean * 100.0) if mean > 0 else 0.0
    return TimingStats(mean=mean, std=std, rel_std=rel, median=statistics.median(xs), min=min(xs),
                       max=max(xs), nrep=len(xs), peak_mem_mb=int(peak_mem_mb))


@dataclass(frozen=True)
class NoiseStudy:
    """The same kernel measured ``runs`` times: how much do the measurements disagree?"""
    runs: int
    medians_ms: tuple[float, ...]
    median_of_medians_ms: float
    spread_pct: float                 # (max median - min median) / median of medians, percent
    median_rel_std_pct: float         # the typical within-run rel_std
    max_rel_std_pct: float
    min_rel_std_pct: float
    runs_over_1pct: int               # runs whose own rel_std exceeds 1 %

    def to_json(self) -> dict:
        """The study's fields as JSON (tuples as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def noise_study(runs: Sequence[TimingStats]) -> NoiseStudy:
    """How far repeated measurements of one kernel disagree: the spread of their medians and
    their own rel_std."""
    if not runs:
        raise ValueError("no runs")
    meds = tuple(r.median for r in runs)
    mm = statistics.median(meds)
    spread = (max(meds) - min(meds)) / mm * 100.0 if mm > 0 else 0.0
    rels = [r.rel_std for r in runs]
    return NoiseStudy(runs=len(runs), medians_ms=meds, median_of_medians_ms=mm, spread_pct=spread,
                      median_rel_std_pct=statistics.median(rels), max_rel_std_pct=max(rels),
                      min_rel_std_pct=min(rels), runs_over_1pct=sum(1 for r in rels if r > 1.0))
