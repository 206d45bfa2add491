"""Is the candidate faster than the baseline?  Paired, interleaved rounds, per configuration.

Both versions are measured in the same sitting, in rounds, in the order the backend chooses
(``A B`` then ``B A`` for runs of a command, which cancels a linear drift; ``A B B A`` within
every round for worker processes, where following the other process also costs the next
measurement a fixed amount: ``backends.base.round_order``, ``WorkloadBackend.measure``).  Each round ``r`` yields one
median per version; the estimate for a configuration is the geometric mean of the paired
ratios ``B_r / A_r`` and its uncertainty on the log scale is the largest of

* the between-round standard error ``sd(log ratios) / sqrt(R)`` (needs R >= 2),
* the within-run standard error of the medians (``1.2533 * cv / sqrt(n)`` per run, from the
  run's samples or its ``rel_std``/``nrep``), combined over rounds (a Welch-style term),
* a floor of ``noise_floor`` relative noise per measurement (clock jitter the runs do not
  show; 0.5 % by default), so that two equal latencies are never "significantly" different.

The 95 % interval uses Student's t with R - 1 degrees of freedom when the between-round
term dominates and R >= 3, else the normal 1.96.

Clocks (``RunStat.clock_mhz``, ``clock_events``: NVML, read over each run's timed phase): a round
with a run taken under a thermal or hardware slowdown is dropped (the clock read beside it does not
describe the run); when every kept run has a clock and the clocks differ by more than
``CLOCK_VARIES`` (a power cap moving the SM clock), the ratio is estimated in cycles (median x clock)
as well, and decided in cycles — ``basis: "cycles"`` — where that interval is the narrower (3+ rounds:
the clock explains the noise); the other basis's ratio and interval are recorded beside it.  On an
H100 the NVML clock does not follow a GEMM's 15-20 ms power-cap steps and its cycles are the noisier
(``ratio_cycles`` beside a decision in ms).  The configurations combine into a
geometric-mean ratio (the headline), but the decision rules also look at every
configuration on its own: a win on average never hides a regression on one shape.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ..nvml import slowdown

_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}
MEDIAN_SE_FACTOR = 1.2533      # SE(median) / SE(mean) for normal samples: sqrt(pi / 2)
DEFAULT_NOISE_FLOOR = 0.005
CLOCK_VARIES = 0.01            # clocks further apart than this: compare in cycles (NVML steps ~15 MHz, 0.8 %) ...
CYCLES_MIN_ROUNDS = 3          # ... from this many rounds, where the cycles' interval is the narrower
POOL_MIN_DF = 8                # a pooled noise floor needs this many degrees of freedom (pooled_floor)


def t975(df: int) -> float:
    """Student's t 97.5 % quantile at ``df`` degrees of freedom (table, the nearest lower entry between rows, 1.96 for
    none)."""
    if df <= 0:
        return 1.96
    if df in _T975:
        return _T975[df]
    keys = sorted(_T975)
    if df > keys[-1]:
        return 1.96 + 2.4 / df
    lower = max(k for k in keys if k < df)
    return _T975[lower]


@dataclass
class RunStat:
    """One measurement run of one version on one configuration."""
    median: float
    rel_std: float | None = None        # percent (TileGym's convention)
    nrep: int | None = None
    samples: list[float] | None = None
    record: dict | None = None          # the full record as the backend returned it
    clock_mhz: float | None = None      # median SM clock over the timed phase (None: not read)
    clock_events: int | None = None     # NVML clock-event reasons seen during it (a mask)

    @property
    def slowed(self) -> list[str]:
        """The thermal/hardware slowdowns it ran under (its round is not compared)."""
        return slowdown(self.clock_events)

    @classmethod
    def from_samples(cls, samples: Sequence[float], record: dict | None = None) -> "RunStat":
        """A run from its raw samples: their median and relative standard deviation (percent)."""
        xs = [float(x) for x in samples]
        med = statistics.median(xs)
        mean = statistics.fmean(xs)
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        return cls(med, 100.0 * sd / mean if mean > 0 else 0.0, len(xs), xs, record)

    @classmethod
    def from_record(cls, rec: dict) -> "RunStat":
        """A run from a benchmark record (median, rel_std, nrep), without samples."""
        return cls(float(rec["median"]), rec.get("rel_std"), rec.get("nrep"), None, dict(rec))

    def log_var(self) -> float | None:
        """Variance of log(median) from within-run scatter, or None when unknown."""
        if self.samples and len(self.samples) > 1:
            mean = statistics.fmean(self.samples)
            cv = statistics.stdev(self.samples) / mean if mean > 0 else 0.0
            n = len(self.samples)
        elif self.rel_std is not None and self.nrep:
            cv, n = float(self.rel_std) / 100.0, int(self.nrep)
        else:
            return None
        return (MEDIAN_SE_FACTOR * cv) ** 2 / max(n, 1)

    def to_json(self) -> dict:
        """The run's summary, record and samples (rounded to 1e-6 ms) for the ledger."""
        d = {"median": self.median, "rel_std": self.rel_std, "nrep": self.nrep}
        if self.record:
            d["record"] = self.record
        if self.samples is not None:
            d["samples"] = [round(x, 6) for x in self.samples]
        if self.clock_mhz is not None:
            d["clock_mhz"] = self.clock_mhz
        if self.clock_events is not None:
            d["clock_events"] = self.clock_events
        return d

    def in_cycles(self) -> "RunStat":
        """The same run in SM cycles (ms x MHz: a constant factor away from cycles)."""
        k = float(self.clock_mhz)
        return RunStat(self.median * k, self.rel_std, self.nrep,
                       None if self.samples is None else [x * k for x in self.samples], None, self.clock_mhz,
                       self.clock_events)


@dataclass
class ConfigComparison:
    """Candidate against baseline on one configuration: the median latencies, the ratio of the paired rounds with its
    95 % interval, and the standard error term that set it."""
    config: str
    baseline_ms: float                  # median over rounds of the baseline's medians
    candidate_ms: float
    ratio: float                        # candidate / baseline (< 1: faster)
    lo: float                           # 95 % interval of the ratio
    hi: float
    rounds: int
    se_log: float
    method: str                         # which term set the uncertainty
    baseline_runs: list[RunStat] = field(default_factory=list)
    candidate_runs: list[RunStat] = field(default_factory=list)
    basis: str = "ms"                   # "cycles": clocks varied, and the ratio of median x clock was the tighter
    other: tuple[float, float, float] | None = None  # clocks varied: (ratio, lo, hi) in the basis not decided in
    dropped: int = 0                    # rounds not compared: a run under a thermal/hardware slowdown
    ss_log: float = 0.0                 # the rounds' squared deviations of the log ratio (decided basis) ...
    df: int = 0                         # ... and their degrees of freedom: pooled into a noise floor (pooled_floor)

    @property
    def half_width_pct(self) -> float:
        """Half the 95 % interval's width, in percent of the ratio (what sampling narrows)."""
        return 100.0 * (self.hi - self.lo) / 2.0

    @property
    def other_basis(self) -> str:
        """The basis of ``other``: the one not decided in."""
        return "ms" if self.basis == "cycles" else "cycles"

    @property
    def change_pct(self) -> float:
        """Latency change in percent (negative: faster)."""
        return (self.ratio - 1.0) * 100.0

    @property
    def improvement_pct(self) -> float:
        """Latency reduction in percent (positive: faster)."""
        return (1.0 - self.ratio) * 100.0

    @property
    def significantly_faster(self) -> bool:
        """The whole 95 % interval of the ratio is below 1."""
        return self.hi < 1.0

    @property
    def significantly_slower(self) -> bool:
        """The whole 95 % interval of the ratio is above 1."""
        return self.lo > 1.0

    def to_json(self) -> dict:
        """The comparison and both versions' runs, for the ledger."""
        return {"config": self.config, "baseline_ms": self.baseline_ms, "candidate_ms": self.candidate_ms,
                "ratio": self.ratio, "ci95": [self.lo, self.hi], "change_pct": self.change_pct,
                "rounds": self.rounds, "se_log": self.se_log, "method": self.method,
                **({"basis": self.basis, f"ratio_{self.other_basis}": self.other[0],
                    f"ci95_{self.other_basis}": list(self.other[1:])} if self.other else {}),
                **({"dropped_rounds": self.dropped} if self.dropped else {}), "ss_log": self.ss_log, "df": self.df,
                "baseline_runs": [r.to_json() for r in self.baseline_runs],
                "candidate_runs": [r.to_json() for r in self.candidate_runs]}


@dataclass
class Comparison:
    """The configurations' comparisons combined: the geometric-mean ratio with its 95 % interval."""
    configs: list[ConfigComparison]
    ratio: float                        # geometric mean over configurations
    lo: float
    hi: float
    baseline_ms: float                  # geometric mean of the configurations' baseline medians
    candidate_ms: float

    @property
    def improvement_pct(self) -> float:
        """Percent of latency saved (negative: slower)."""
        return (1.0 - self.ratio) * 100.0

    @property
    def significantly_faster(self) -> bool:
        """The whole 95 % interval of the combined ratio is below 1."""
        return self.hi < 1.0

    @property
    def half_width_pct(self) -> float:
        """Half the 95 % interval's width, in percent of the ratio (the sampling target is compared with it)."""
        return 100.0 * (self.hi - self.lo) / 2.0

    def config(self, name: str) -> ConfigComparison:
        """The comparison of configuration ``name`` (StopIteration when there is none)."""
        return next(c for c in self.configs if c.config == name)

    def to_json(self) -> dict:
        """The combined ratio and interval, and every configuration's comparison."""
        return {"ratio": self.ratio, "ci95": [self.lo, self.hi], "improvement_pct": self.improvement_pct,
                "baseline_ms": self.baseline_ms, "candidate_ms": self.candidate_ms,
                "configs": [c.to_json() for c in self.configs]}


def geomean(xs: Iterable[float]) -> float:
    """The geometric mean; ValueError for no values or a non-positive one."""
    xs = [float(x) for x in xs]
    if not xs or any(x <= 0 for x in xs):
        raise ValueError("geometric mean of non-positive or no values")
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def cycles(runs: Sequence[RunStat]) -> bool:
    """Estimate these runs in cycles too: each has its SM clock and the clocks differ by more than CLOCK_VARIES."""
    clocks = [r.clock_mhz for r in runs]
    return bool(clocks) and all(clocks) and max(clocks) > (1.0 + CLOCK_VARIES) * min(clocks)


def _estimate(baseline: Sequence[RunStat], candidate: Sequence[RunStat],
              noise_floor: float) -> tuple[float, float, float, str]:
    """(mean log ratio, its standard error, the interval's critical value, the term that set it)."""
    R = len(baseline)
    logs = _logs(baseline, candidate)
    terms: dict[str, float] = {}
    if R >= 2:
        terms["between-round"] = statistics.stdev(logs) / math.sqrt(R)
    var_w = []
    for a, b in zip(baseline, candidate):
        va, vb = a.log_var(), b.log_var()
        if va is not None and vb is not None:
            var_w.append(va + vb)
    if len(var_w) == R:
        terms["within-run"] = math.sqrt(sum(var_w)) / R
    terms["noise-floor"] = math.sqrt(2.0) * noise_floor / math.sqrt(R)
    method, se = max(terms.items(), key=lambda kv: kv[1])
    crit = t975(R - 1) if (method == "between-round" and R >= 3) else 1.96
    return statistics.fmean(logs), se, crit, method


def _logs(baseline: Sequence[RunStat], candidate: Sequence[RunStat]) -> list[float]:
    return [math.log(b.median / a.median) for a, b in zip(baseline, candidate)]


def _spread(logs: Sequence[float]) -> float:
    """The sum of squared deviations of the rounds' log ratios from their mean."""
    m = statistics.fmean(logs)
    return sum((x - m) ** 2 for x in logs)


def pooled_floor(spreads: Iterable[tuple[float, int]]) -> tuple[float | None, int]:
    """The per-measurement noise pooled over comparisons' ``(ss_log, df)``: ``sqrt(sum ss / sum df) / sqrt 2``
    (a round's log ratio holds two measurements), and its degrees of freedom; None below ``POOL_MIN_DF``.
    Each comparison's rounds deviate around its own mean, so a real change between versions adds nothing;
    with many comparisons this is the noise a 3-round spread cannot tell (2 degrees of freedom: one
    decision in ten sees a spread under a third of the truth and stops sampling with too narrow a CI)."""
    ss = df = 0
    for s, d in spreads:
        if d > 0 and s >= 0:
            ss, df = ss + s, df + d
    if df < POOL_MIN_DF:
        return None, df
    return math.sqrt(ss / df) / math.sqrt(2.0), df


def compare_config(config: str, baseline: Sequence[RunStat], candidate: Sequence[RunStat], *,
                   noise_floor: float = DEFAULT_NOISE_FLOOR) -> ConfigComparison:
    """Paired comparison over rounds of the log ratio: its standard error is the largest of the between-round spread,
    the runs' own spread and the noise floor (t quantile only for the between-round term with 3 rounds or more).
    Rounds slowed by a clock event are dropped; when the SM clocks differ by more than ``CLOCK_VARIES`` the
    decision is made in cycles where their interval is the narrower, and the other basis kept beside it."""
    if not baseline or len(baseline) != len(candidate):
        raise ValueError(f"{config}: need the same number (>= 1) of baseline and candidate runs")
    if any(r.median <= 0 for r in [*baseline, *candidate]):
        raise ValueError(f"{config}: a non-positive latency")
    pairs = [(a, b) for a, b in zip(baseline, candidate) if not (a.slowed or b.slowed)]
    dropped = len(baseline) - len(pairs)
    if not pairs:                       # every round slowed: compared as measured, and said so
        pairs, dropped = list(zip(baseline, candidate)), 0
    base, cand = [a for a, _ in pairs], [b for _, b in pairs]
    est = _estimate(base, cand, noise_floor)
    basis, other = "ms", None
    if cycles(base + cand):
        cyc = _estimate([r.in_cycles() for r in base], [r.in_cycles() for r in cand], noise_floor)
        # cycles only where the clock explains the noise: with 3+ rounds, a narrower interval than the
        # milliseconds'.  On an H100 a GEMM's time steps with the power cap every 15-20 ms, faster than
        # NVML's clock reading follows: there ms x clock spread 2-3x wider than ms (bench/results s11)
        if len(base) >= CYCLES_MIN_ROUNDS and cyc[1] * cyc[2] < est[1] * est[2]:
            basis, est, other = "cycles", cyc, est
        else:
            other = cyc
    lbar, se, crit, method = est
    dec = [r.in_cycles() for r in base] if basis == "cycles" else base, \
        [r.in_cycles() for r in cand] if basis == "cycles" else cand
    return ConfigComparison(
        config=config, baseline_ms=statistics.median(r.median for r in base),
        candidate_ms=statistics.median(r.median for r in cand), ratio=math.exp(lbar),
        lo=math.exp(lbar - crit * se), hi=math.exp(lbar + crit * se), rounds=len(base), se_log=se, method=method,
        baseline_runs=list(baseline), candidate_runs=list(candidate), basis=basis,
        other=None if other is None else _interval(other), dropped=dropped, ss_log=_spread(_logs(*dec)),
        df=len(base) - 1)


def _interval(est: tuple[float, float, float, str]) -> tuple[float, float, float]:
    """(ratio, lo, hi) of an ``_estimate``."""
    lbar, se, crit, _ = est
    return math.exp(lbar), math.exp(lbar - crit * se), math.exp(lbar + crit * se)


def combine(configs: Sequence[ConfigComparison]) -> Comparison:
    """The configurations' log ratios averaged (equal weights), their standard errors combined in quadrature."""
    if not configs:
        raise ValueError("no configurations to compare")
    C = len(configs)
    L = statistics.fmean(math.log(c.ratio) for c in configs)
    se = math.sqrt(sum(c.se_log ** 2 for c in configs)) / C
    return Comparison(list(configs), math.exp(L), math.exp(L - 1.96 * se), math.exp(L + 1.96 * se),
                      geomean(c.baseline_ms for c in configs), geomean(c.candidate_ms for c in configs))


def compare(runs: dict[str, tuple[Sequence[RunStat], Sequence[RunStat]]], *,
            noise_floor: float = DEFAULT_NOISE_FLOOR) -> Comparison:
    """``{config: (baseline runs, candidate runs)}`` -> the comparison."""
    return combine([compare_config(c, a, b, noise_floor=noise_floor) for c, (a, b) in runs.items()])


def headline_ms(medians: Iterable[float]) -> float:
    """The one latency the results table shows: the geometric mean of the configurations'
    medians (the median itself with one configuration)."""
    return geomean(medians)
