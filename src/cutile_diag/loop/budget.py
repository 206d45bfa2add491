"""The iteration budget planner: what one iteration can afford, from what the baseline cost.

The baseline times the user's own commands (or the workload's worker): one correctness check,
one measurement run of one version (all configurations), and the AOT capture.  A sweep
iteration then costs, per screened point, a capture + a check + ``screen_rounds`` x 2 runs
(the point and the kept version, interleaved), and the confirmation ``rounds`` x 2 runs; in
command mode (``screen_shared``) a capture and ``screen_rounds`` runs per point, one run of the
kept version per screening round, and one check (the point confirmed).  Without --rounds and
--max-sweep both are fitted to --budget from the measured run time (``fitted_rounds``,
``fitted_sweep``).
When that does not fit the iteration budget the plan screens fewer points (the transform's
first ones: its preferred order) and, if need be, confirms with fewer rounds (never under
``MIN_CONFIRM_ROUNDS`` while there is a choice); the points left out are named and recorded as
``skipped (budget)`` — a budget the commands cannot meet is a plan, not a crash.

``plan`` is pure arithmetic (seconds in, counts out): the runner feeds it ``Costs`` and the
time left, and re-checks the remaining time before each confirmation it adds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

MARGIN = 0.85                 # plan to use at most this share of the budget (cost estimates are rough)
MIN_CONFIRM_ROUNDS = 2        # a between-round spread needs two rounds
DEFAULT_ROUNDS = 3            # rounds per comparison when --rounds is not given and runs are cheap
DEFAULT_SWEEP = 4             # settings screened per sweep step when --max-sweep is not given and ...
MIN_SWEEP = 2                 # ... fitted to the budget, a sweep still compares two settings
RUNS_SHARE = 1 / 8            # cheap: a comparison's 2 x 3 runs (a sweep's screening runs) take at most
                              # this share of --budget
SKIPPED = "skipped (budget)"


KEEP_PRIOR_S = 20.0     # a TileGym test file's correctness tests in a fresh pytest process (start-up, imports, JIT)


@dataclass
class Costs:
    """Seconds measured at the baseline (0 where unknown: the plan then cannot cut anything)."""
    verify_s: float = 0.0          # one correctness check of one version
    run_s: float = 0.0             # one measurement run of one version over every configuration
    capture_s: float = 0.0         # one AOT capture (0 with --no-capture)
    compile_s: float = 0.0         # one candidate's compile (loop.compile_pool); 0: none yet
    keep_s: float = 0.0            # the user's test command that confirms a keep (replay loops); 0: none

    @property
    def candidate_capture_s(self) -> float:
        """What capturing one candidate costs: its compile once one was timed (the launch recorded,
        no second run), else the baseline's capture."""
        return self.compile_s or self.capture_s

    @property
    def known(self) -> bool:
        """The baseline measured a check or a run (else the plan cuts nothing)."""
        return self.verify_s > 0 or self.run_s > 0

    def confirm_s(self, rounds: int) -> float:
        """The full interleaved comparison of one checked candidate with the kept version."""
        return 2 * rounds * self.run_s

    def iteration_s(self, points: int, rounds: int, screen_rounds: int = 1, *, compile_workers: int = 1,
                    check_workers: int = 1, screen_shared: bool = False) -> float:
        """Check ``points`` candidates, screen them against the kept version when there is more
        than one, then confirm the best.  Captures run ``compile_workers`` at a time
        (``loop.compile_pool``), checks ``check_workers`` at a time (a backend that loads a sweep's
        workers at once).  ``screen_shared`` (command mode): the points are screened unchecked,
        against one run of the kept version per round, and only the confirmed one is checked."""
        if screen_shared:
            screen = (points + 1) * screen_rounds * self.run_s if points > 1 else 0.0
            checks = self.verify_s
        else:
            screen = 2 * screen_rounds * self.run_s * points if points > 1 else 0.0
            checks = math.ceil(points / max(1, check_workers)) * self.verify_s
        compiles = math.ceil(points / max(1, compile_workers)) * self.candidate_capture_s
        # a step that gains is kept only after the test command: a step that cannot fit it cannot keep
        return compiles + checks + screen + self.confirm_s(rounds) + self.keep_s

    def to_json(self) -> dict:
        """The costs in seconds, as the ledger's baseline record stores them."""
        return {"verify_s": round(self.verify_s, 3), "run_s": round(self.run_s, 3),
                "capture_s": round(self.capture_s, 3), "compile_s": round(self.compile_s, 3),
                "keep_s": round(self.keep_s, 3)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> "Costs":
        """Costs from their stored JSON (missing ones 0)."""
        d = dict(d or {})
        return cls(float(d.get("verify_s") or 0.0), float(d.get("run_s") or 0.0), float(d.get("capture_s") or 0.0),
                   float(d.get("compile_s") or 0.0), float(d.get("keep_s") or 0.0))

    def merge(self, other: "Costs") -> "Costs":
        """The larger of each cost (a later, slower version must not be planned with the baseline's speed)."""
        return Costs(max(self.verify_s, other.verify_s), max(self.run_s, other.run_s),
                     max(self.capture_s, other.capture_s), max(self.compile_s, other.compile_s),
                     max(self.keep_s, other.keep_s))


@dataclass
class Plan:
    """What one iteration can afford: the candidates to screen and those left out for time, the rounds of screening
    and confirmation, and the estimate against the budget."""
    screen: list[int]                       # indices of the candidates to screen (in order)
    skipped: list[int]                      # left out for time
    screen_rounds: int
    confirm_rounds: int
    estimate_s: float
    budget_s: float | None
    fits: bool = True                       # False: not even one candidate fits
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The plan as the iteration's record stores it."""
        return {"screen": self.screen, "skipped": self.skipped, "screen_rounds": self.screen_rounds,
                "confirm_rounds": self.confirm_rounds, "estimate_s": round(self.estimate_s, 1),
                "budget_s": self.budget_s, "fits": self.fits, "notes": self.notes}


def plan(n_points: int, costs: Costs, budget_s: float | None, *, rounds: int, screen_rounds: int = 1,
         margin: float = MARGIN, compile_workers: int = 1, check_workers: int = 1, screen_shared: bool = False) -> Plan:
    """How many of ``n_points`` candidates to screen and how many rounds to confirm with.
    Fewer confirmation rounds first (down to ``MIN_CONFIRM_ROUNDS``), then fewer points."""
    est = lambda k, r: costs.iteration_s(k, r, screen_rounds, compile_workers=compile_workers,
                                         check_workers=check_workers, screen_shared=screen_shared)
    if budget_s is None or not costs.known:
        return Plan(list(range(n_points)), [], screen_rounds, rounds, est(n_points, rounds), budget_s)
    avail = budget_s * margin
    r = rounds
    while r > MIN_CONFIRM_ROUNDS and est(n_points, r) > avail:
        r -= 1
    k = n_points
    while k > 1 and est(k, r) > avail:
        k -= 1
    while r > 1 and est(k, r) > avail and k == 1:
        r -= 1                                 # a single candidate: one round beats no answer
    notes: list[str] = []
    if k < n_points:
        notes.append(f"screening {k} of {n_points} settings: one check takes {costs.verify_s:.1f} s and one run "
                     f"{costs.run_s:.1f} s; the iteration budget is {budget_s:g} s (raise it with --budget)")
    if r < rounds:
        notes.append(f"confirming with {r} round(s) instead of {rounds} (one run takes {costs.run_s:.1f} s)")
    return Plan(list(range(k)), list(range(k, n_points)), screen_rounds, r, est(k, r), budget_s,
                est(1, 1) <= budget_s, notes)


def fitted_rounds(costs: Costs, budget_s: float) -> tuple[int, str]:
    """The rounds of a comparison when --rounds is not given, fitted to --budget from the
    measured run time, and why: ``DEFAULT_ROUNDS`` (3) while a comparison's timed runs (2 x 3, the
    kept version and the candidate) take at most ``RUNS_SHARE`` of --budget, else
    ``MIN_CONFIRM_ROUNDS`` (2: the fewest with a between-round spread).  A worker's run (a
    workload, well under a second) always gets 3; a run of a TileGym pytest --bench-cmd (17-22 s:
    process start, imports, JIT) gets 2 at the default --budget 600.  Each such run's record is a
    median of its own repetitions with their spread (``stats``' within-run term), and the noise
    floor bounds every comparison: the third round narrows the interval from about +-0.98 % to
    +-0.80 % at the default floor, for another 2 runs (~40 s) per decision."""
    if costs.run_s <= 0 or costs.confirm_s(DEFAULT_ROUNDS) <= RUNS_SHARE * budget_s:
        return DEFAULT_ROUNDS, ""
    need = math.ceil(costs.confirm_s(DEFAULT_ROUNDS) / RUNS_SHARE)
    return MIN_CONFIRM_ROUNDS, (f"{MIN_CONFIRM_ROUNDS} rounds per comparison: one run takes {costs.run_s:.1f} s, so "
                                f"{DEFAULT_ROUNDS} rounds ({2 * DEFAULT_ROUNDS} runs, {costs.confirm_s(DEFAULT_ROUNDS):.0f} s) "
                                f"would take more than 1/{round(1 / RUNS_SHARE)} of --budget {budget_s:g} s "
                                f"(--rounds {DEFAULT_ROUNDS}, or --budget {need}, for {DEFAULT_ROUNDS})")


def comparison_rounds(given: int | None, costs: Costs, budget_s: float) -> int:
    """The rounds of a comparison: ``given`` (--rounds), else ``fitted_rounds``."""
    return int(given) if given else fitted_rounds(costs, budget_s)[0]


def fitted_sweep(costs: Costs, budget_s: float, *, shared: bool = False) -> tuple[int, str]:
    """The settings a sweep step screens when --max-sweep is not given, fitted to --budget from the
    measured run time the same way, and why: ``DEFAULT_SWEEP`` (4) while the screening's runs take
    at most ``RUNS_SHARE`` of --budget, else fewer, down to ``MIN_SWEEP`` (2).  ``shared``: the
    points are screened against one run of the kept version (command mode: k + 1 runs), else each
    beside its own (2k).  A TileGym pytest --bench-cmd (17-22 s a run) screens 2 or 3 settings at the
    default --budget 600, a workload 4; the settings left out are the transform's later ones, for a
    later step to try."""
    runs = (lambda k: k + 1) if shared else (lambda k: 2 * k)
    k = DEFAULT_SWEEP
    while k > MIN_SWEEP and costs.run_s > 0 and runs(k) * costs.run_s > RUNS_SHARE * budget_s:
        k -= 1
    if k == DEFAULT_SWEEP:
        return k, ""
    need = math.ceil(runs(DEFAULT_SWEEP) * costs.run_s / RUNS_SHARE)
    return k, (f"{k} settings per sweep: one run takes {costs.run_s:.1f} s, so screening {DEFAULT_SWEEP} "
               f"({runs(DEFAULT_SWEEP)} runs, {runs(DEFAULT_SWEEP) * costs.run_s:.0f} s) would take more than "
               f"1/{round(1 / RUNS_SHARE)} of --budget {budget_s:g} s (--max-sweep {DEFAULT_SWEEP}, or --budget "
               f"{need}, for {DEFAULT_SWEEP})")


def min_budget_s(costs: Costs, margin: float = MARGIN) -> int | None:
    """The smallest --budget (whole seconds) whose plan holds one candidate checked and compared
    in one round (None: nothing measured yet)."""
    if not costs.known:
        return None
    return max(1, math.ceil(costs.iteration_s(1, 1) / margin))


def costs_from_ledger(iterations: list[dict], keep_prior_s: float = 0.0) -> Costs:
    """The baseline's costs, raised by any slower run a later iteration measured.  A check and a
    compile cost what the latest step measured: the baseline's check pays once for starting the
    measuring process and compiling cold, a step's checks run in processes started ahead
    (``loop.spares``) — planning every step with the baseline's would screen too few points.
    ``keep_prior_s``: what the test command that confirms a keep is taken to cost until one has run (a replay
    loop defers it to its first keep); the longest one measured since (a run the clock cut counts as at least as
    long as it ran)."""
    c = Costs()
    keep = 0.0
    for rec in iterations:
        new = Costs.from_json(rec.get("costs"))
        c = c.merge(Costs(run_s=new.run_s, capture_s=new.capture_s))
        c.verify_s = new.verify_s or c.verify_s
        c.compile_s = new.compile_s or c.compile_s
        keep = max(keep, float(((rec.get("step_costs") or {}).get("confirm") or {}).get("s") or 0.0))
    if c.known:
        c.keep_s = max(keep, keep_prior_s)
    return c
