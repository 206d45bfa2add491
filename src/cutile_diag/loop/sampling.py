"""Sampling a comparison to its confidence target: more rounds of ``A`` against ``B`` until the
95 % CI of the paired ratio is within ``decide.CI_TARGET_PCT``, or a cap (``decide.MAX_ROUNDS``
rounds, ``decide.MAX_SAMPLING_S`` seconds, the deadline).  The loop's confirmations and
``calibrate``'s A/A decisions sample the same way, so a calibration measures the decisions the
loop takes."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping

from . import budget as budget_mod
from . import decide as decide_mod
from . import proc, stats
from .backends import Version
from .errors import MeasurementTimeout

Runs = Mapping[str, Mapping[str, list[stats.RunStat]]]      # version label -> configuration -> rounds


def joined(runs: Runs, more: Runs) -> dict:
    """Two measurements' runs as one: each version's rounds, in order."""
    return {v: {c: rs + more[v][c] for c, rs in runs[v].items()} for v in runs}


def comparison(runs: Runs, a: Version, b: Version, noise_floor: float) -> stats.Comparison:
    """``b`` against ``a`` over every configuration of ``runs``."""
    return stats.compare({c: (runs[a.label][c], runs[b.label][c]) for c in runs[a.label]}, noise_floor=noise_floor)


def sample_to_ci(measure: Callable[[list[Version], int], Runs], a: Version, b: Version, deadline: proc.Deadline,
                 runs: Runs, done: int, per_round: float, *, alternates: bool, noise_floor: float,
                 known_df: int | None = None, keep_min_rounds: int | None = None) -> tuple[Runs, int, dict]:
    """More rounds (``measure(order, n)``) until the CI is tight or a cap: the runs, their rounds, and
    how sampling ended (the ledger's ``sampling``; ``capped``: the CI is still too wide).  Rounds come
    in pairs where the backend alternates A B / B A (``alternates``), so they stay ABBA-balanced;
    ``per_round``: seconds one round took so far (no round starts that the deadline cannot fit).

    A tight CI ends sampling only when the noise behind it is known: ``known_df`` degrees of freedom
    (pooled over earlier comparisons, ``floor_with_pool``; None: the floor is calibrated, known) and
    this comparison's rounds together reach ``stats.POOL_MIN_DF``.  Three rounds alone have two: one
    comparison in ten sees a spread a third of the truth and would stop with too narrow a CI.  A tight CI that
    would keep the step needs ``keep_min_rounds`` rounds (default ``decide.KEEP_MIN_ROUNDS``; 0 where a round
    is a run of the user's command)."""
    keep_min = decide_mod.KEEP_MIN_ROUNDS if keep_min_rounds is None else keep_min_rounds
    step = 2 if alternates else 1
    t0 = last = time.monotonic()
    while True:
        cmp = comparison(runs, a, b, noise_floor)
        info = {"rounds": done, "half_width_pct": round(cmp.half_width_pct, 4),
                "target_pct": decide_mod.CI_TARGET_PCT, "capped": False}
        left = deadline.remaining()
        known = known_df is None or known_df + len(cmp.configs) * (done - 1) >= stats.POOL_MIN_DF
        # a tight CI that would keep the step is trusted from KEEP_MIN_ROUNDS rounds on (a revert may stop sooner)
        keeps = cmp.hi < 1.0 - decide_mod.MIN_KEEP_PCT / 100 and done < keep_min
        if cmp.half_width_pct <= decide_mod.CI_TARGET_PCT and known and not keeps:
            return runs, done, {**info, "stopped": "ci"}
        why = "rounds" if done + step > decide_mod.MAX_ROUNDS else \
            "seconds" if time.monotonic() - t0 >= decide_mod.MAX_SAMPLING_S else \
            "budget" if left is not None and step * per_round > left * budget_mod.MARGIN \
            else None
        if why is not None:
            return runs, done, {**info, "stopped": why, "capped": True}
        try:
            more = measure([a, b] if done % 2 == 0 or step == 1 else [b, a], step)
        except MeasurementTimeout:
            return runs, done, {**info, "stopped": "budget", "capped": True}
        runs, done = joined(runs, more), done + step
        per_round, last = (time.monotonic() - last) / step, time.monotonic()


def spreads(comparisons: Iterable[Mapping[str, Any] | None]) -> list[tuple[float, int]]:
    """Every configuration's ``(ss_log, df)`` in recorded comparisons (``Comparison.to_json``; None skipped)."""
    return [(float(c["ss_log"]), int(c["df"])) for cmp in comparisons if cmp
            for c in cmp.get("configs") or [] if "ss_log" in c and "df" in c]


def floor_with_pool(floor: float, comparisons: Iterable[Mapping[str, Any] | None]) -> tuple[float, int]:
    """``floor`` raised to the per-measurement noise pooled over ``comparisons`` once they hold
    ``stats.POOL_MIN_DF`` degrees of freedom (``stats.pooled_floor``), and those degrees of freedom:
    a machine noisier than its floor says no longer stops sampling on one lucky 3-round spread."""
    pooled, df = stats.pooled_floor(spreads(comparisons))
    return max(floor, pooled or 0.0), df
