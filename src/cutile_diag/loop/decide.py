"""The keep/revert rules of the perf recipe, applied to a measured comparison.

Per iteration (the candidate against the last kept version, measured interleaved):

=====================================================  ======================================
a configuration is significantly slower by > 2 %        revert
cumulatively > 2 % slower than iteration 0 on a config  revert (no creeping loss through many
                                                        small "neutral" keeps)
improvement >= 5 % (significant)                        keep: the new baseline
2 % <= improvement < 5 % (significant)                  keep, lower the entry's priority
improvement < 2 %, or not significant                   keep, then stop unless asked to go on
going on (--continue): the 95 % CI includes a gain     revert: noise-level edits do not pile up
below 0.5 % (the step is not clearly worth keeping)     (a CI that only excludes 1 kept 2 in 12
                                                        A/A decisions on an H100 GEMM whose copy
                                                        read 0.4 % faster)
sampled to the cap and the 95 % CI still wider than    inconclusive: not kept, not a flat step
+-1 % (none of the rules above is clear)                for the stop rules; the set may be measured again
correctness FAIL / forbidden files / above the roof     revert
the candidate crashed or hung                           crash (reverted)
=====================================================  ======================================

Sampling: a comparison runs its rounds (``--rounds``, or fitted to the budget), then more rounds
until the 95 % CI's half-width is at most ``CI_TARGET_PCT`` (1 %: half the 2 % line, so a step at
that line is told from no change) or a per-step cap (``MAX_ROUNDS`` rounds, ``MAX_SAMPLING_S``
seconds, the iteration's budget; ``loop.sampling``).  A tight kernel stops at its first rounds once
the noise is known (8 degrees of freedom pooled over the loop's comparisons, or a calibrated floor;
the pooled noise raises the floor).  Units: when the SM clocks were read and differed between runs
by more than 1 % (a power cap), the ratio is also taken in cycles (median ms x SM MHz) and decided
in the basis with the narrower interval, the other recorded beside it; rounds with a run under a
thermal or hardware slowdown are dropped (``stats``).

Loop-level stops: two iterations in a row without improvement; more than 25 iterations;
the diagnosis says ``scheduling`` or ``unknown`` (a person takes over).  "Improvement" is
the geometric mean over configurations of the latency reduction; "significant" means the
95 % interval of the ratio lies below 1 (``stats``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from .stats import Comparison

KEEP_BASELINE_PCT = 5.0
KEEP_DEMOTE_PCT = 2.0
REGRESSION_PCT = 2.0
MIN_KEEP_PCT = 0.5            # going on (--continue), a kept step must gain at least this much
MAX_ITERATIONS = 25
CI_TARGET_PCT = KEEP_DEMOTE_PCT / 2   # sample until the 95 % CI half-width is this small ...
MAX_ROUNDS = 32                       # ... or this many rounds were measured (a GEMM under a power cap needs ~25) ...
MAX_SAMPLING_S = 60.0                 # ... or sampling took this long: then a step that is not clear is inconclusive
NON_IMPROVING_LIMIT = 2
# a keep is decided on this many rounds at least: three rounds' spread has two degrees of freedom, and a GEMM's A/A
# sitting on an H100 kept a copy at 0.980x after three rounds whose ratios happened to agree (bench/results s20)
KEEP_MIN_ROUNDS = 5


@dataclass
class Thresholds:
    """The keep and regression thresholds of the decision rules, in percent."""
    keep_baseline_pct: float = KEEP_BASELINE_PCT
    keep_demote_pct: float = KEEP_DEMOTE_PCT
    regression_pct: float = REGRESSION_PCT


@dataclass
class Decision:
    """A keep / revert / crash decision: which rule fired, why, and what it means for the stop rules and the entry's
    priority."""
    status: str                   # keep | revert | crash | inconclusive
    rule: str                     # which rule fired (see RULES)
    reason: str
    improved: bool = False        # counts as an improvement for the two-in-a-row stop rule
    demote: bool = False          # lower this playbook entry's priority next time
    stop: bool = False            # stop after this iteration unless asked to go on
    improvement_pct: float | None = None
    regressions: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        """Every field."""
        return dict(self.__dict__)


RULES = {
    "baseline": "iteration 0: the unchanged kernel",
    "keep-baseline": f"improvement >= {KEEP_BASELINE_PCT:g} %: keep as the new baseline",
    "keep-demote": f"{KEEP_DEMOTE_PCT:g}-{KEEP_BASELINE_PCT:g} % improvement: keep, lower the entry's priority",
    "keep-stop": f"improvement < {KEEP_DEMOTE_PCT:g} % (or not significant): keep, stop unless asked to go on",
    "insignificant": f"going on past a small step (--continue): the 95 % CI includes a gain below "
                     f"{MIN_KEEP_PCT:g} % (no change among them): revert",
    "inconclusive": f"sampled to the cap and the 95 % CI is still wider than +-{CI_TARGET_PCT:g} %, with no clear "
                    "keep or regression: not kept, not counted as a flat step, may be measured again",
    "budget": "the time budget cannot fit one comparison, or ran out before a decision: revert",
    "regression": f"a configuration regressed by more than {REGRESSION_PCT:g} %: revert",
    "cumulative-regression": f"a configuration is more than {REGRESSION_PCT:g} % slower than iteration 0: revert",
    "correctness": "correctness failed: revert immediately",
    "forbidden-files": "files other than the kernel and its launch wrapper changed: revert",
    "above-roof": "a measurement lies above the roofline (invalid): revert",
    "compile": "the candidate does not compile: revert",
    "crash": "the candidate crashed or ran past the time budget: revert",
    "interrupted": "the loop process died during the iteration: reverted on resume",
    "no-op": "the candidate's IR and cubin, or its machine code, equal the kept version's: not measured (a "
             "measured gain would not be credited), revert",
}


def decide(cmp: Comparison, *, cumulative: Mapping[str, float] | None = None,
           thresholds: Thresholds | None = None, keep_going: bool = False, capped: bool = False) -> Decision:
    """Keep or revert a measured, correct candidate.

    ``cumulative``: per configuration, the kept versions' product of ratios against
    iteration 0 (1.0 at the start), to catch slow creep through neutral keeps.
    ``keep_going``: the loop goes on past a small step (``--continue``); a step that is not
    distinguishable from no change is then reverted instead of kept — otherwise edits that
    gain nothing (``num_ctas=2`` on a memory-bound kernel at -0.0 %) accumulate in the kernel.
    ``capped``: sampling stopped at its cap; a step the clear rules (a regression, a significant
    gain of 2 % or more) do not decide is then inconclusive while the CI is wider than the target.
    """
    th = thresholds or Thresholds()
    regressions = []
    for c in cmp.configs:
        if c.significantly_slower and c.change_pct > th.regression_pct:
            regressions.append({"config": c.config, "change_pct": round(c.change_pct, 3),
                                "ci95": [c.lo, c.hi]})
    imp = cmp.improvement_pct
    if regressions:
        worst = max(regressions, key=lambda r: r["change_pct"])
        others = f" (and {len(regressions) - 1} more)" if len(regressions) > 1 else ""
        return Decision("revert", "regression",
                        f"{worst['config']} is {worst['change_pct']:.1f}% slower (95% CI "
                        f"{_pct(worst['ci95'][0])}..{_pct(worst['ci95'][1])}){others}",
                        improvement_pct=imp, regressions=regressions)
    if cumulative:
        creep = []
        for c in cmp.configs:
            total = cumulative.get(c.config, 1.0) * c.ratio
            if c.ratio > 1.0 and (total - 1.0) * 100.0 > th.regression_pct:
                creep.append({"config": c.config, "vs_iteration0_pct": round((total - 1) * 100, 3)})
        if creep:
            w = max(creep, key=lambda r: r["vs_iteration0_pct"])
            return Decision("revert", "cumulative-regression",
                            f"{w['config']} would be {w['vs_iteration0_pct']:.1f}% slower than iteration 0",
                            improvement_pct=imp, regressions=creep)
    sig = cmp.significantly_faster
    ci = f"95% CI {_imp(cmp.hi)}..{_imp(cmp.lo)}"
    if sig and imp >= th.keep_baseline_pct:
        return Decision("keep", "keep-baseline", f"{imp:.1f}% faster ({ci}): new baseline", improved=True,
                        improvement_pct=imp)
    if sig and imp >= th.keep_demote_pct:
        return Decision("keep", "keep-demote", f"{imp:.1f}% faster ({ci}): kept, entry demoted", improved=True,
                        demote=True, improvement_pct=imp)
    if capped and cmp.half_width_pct > CI_TARGET_PCT:
        return Decision("inconclusive", "inconclusive", f"{imp:+.2f}% ({ci}): the 95% CI is wider than "
                        f"+-{CI_TARGET_PCT:g}% after sampling to the cap; not kept, may be measured again",
                        improvement_pct=imp)
    # the whole interval must clear the minimum gain, not only 1: a GEMM's A/A offset of ~0.4 % (a copy that reads
    # faster for reasons no one found) plus a ~1 % CI would otherwise keep one no-change edit in six
    if keep_going and cmp.hi > 1.0 - MIN_KEEP_PCT / 100.0:
        why = "includes no change" if not sig else f"includes a gain below {MIN_KEEP_PCT:g}%"
        return Decision("revert", "insignificant", f"{imp:+.2f}% ({ci}) {why}: reverted, so noise-level edits "
                        "do not pile up while the loop goes on", improvement_pct=imp, demote=True)
    why = f"{imp:+.1f}% ({ci})" + ("" if sig or imp < th.keep_demote_pct else ", not significant")
    return Decision("keep", "keep-stop", f"{why}: below {th.keep_demote_pct:g}%, kept; the loop stops unless "
                    "asked to go on", stop=True, improvement_pct=imp, demote=True)


def reject(rule: str, reason: str, *, status: str = "revert") -> Decision:
    """A decision without a measured improvement: ``rule`` and ``reason`` (a revert unless ``status`` says otherwise).
    A decision without a measured improvement: ``rule`` and ``reason`` (a revert unless ``status`` says otherwise)."""
    return Decision(status, rule, reason)


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def _imp(ratio: float) -> str:
    return f"{(1 - ratio) * 100:.1f}%"


AT_ROOF = "at-roof"        # the stop rule of a kept version at or above --until-roof


@dataclass
class StopCheck:
    """Whether a stop rule fires, which, and why."""
    stop: bool
    rule: str = ""
    reason: str = ""


def stop_rules(decisions: Sequence[Mapping], *, max_iterations: int = MAX_ITERATIONS,
               keep_going: bool = False, roof_pct: float | None = None,
               until_roof: float | None = None, roof_basis: str = "measured ceiling") -> StopCheck:
    """Should the loop stop before the next iteration?  ``decisions``: the ledger's decision
    dicts of iterations 1..n in order (iteration 0 excluded).  ``roof_pct``: the kept
    version's % of the measured ceiling; with ``until_roof`` (a fraction) the small-step
    and no-improvement rules give way while the kernel is below it (the check says so), and a
    kept version at or above it ends the loop, before its first step too: a campaign's time then goes
    to kernels with headroom (an H100 campaign spent 58 s on a dropout at 97.5 % of its attainable time)."""
    n = len(decisions)
    if n >= max_iterations:
        return StopCheck(True, "max-iterations", f"{n} iterations done (the cap is {max_iterations})")
    if until_roof is not None and roof_pct is not None and roof_pct >= 100.0 * until_roof:
        return StopCheck(True, AT_ROOF, f"the kept version is at {roof_pct:.1f}% of the {roof_basis}, "
                         f"at or above --until-roof {until_roof:g}")
    # an inconclusive step is no evidence of a flat kernel: the other rules skip it
    decisions = [d for d in decisions if d.get("rule") != "inconclusive"]
    rule = reason = None
    if len(decisions) >= NON_IMPROVING_LIMIT and not any(d.get("improved") for d in decisions[-NON_IMPROVING_LIMIT:]):
        rule, reason = "no-improvement", f"the last {NON_IMPROVING_LIMIT} iterations brought no improvement"
    elif decisions and decisions[-1].get("stop") and not keep_going:
        rule, reason = "below-threshold", f"the last step gained less than {KEEP_DEMOTE_PCT:g}%"
    if rule is None:
        return StopCheck(False)
    # --- headroom-aware continuation (--until-roof) ---
    if until_roof is not None:
        if roof_pct is not None and roof_pct < 100.0 * until_roof:
            return StopCheck(False, "until-roof", f"{reason}, but the kernel is at {roof_pct:.1f}% of the "
                             f"{roof_basis}, below --until-roof {until_roof:g}: going on")
        where = f"{roof_pct:.1f}% of the {roof_basis}" if roof_pct is not None else \
            "no roofline percentage for the kept version"
        return StopCheck(True, rule, f"{reason} ({where}; --until-roof {until_roof:g} does not hold it back)")
    return StopCheck(True, rule, reason + _headroom_hint(roof_pct, roof_basis,
                                                         continue_hint=rule == "below-threshold"))


HEADROOM_HINT_BELOW_PCT = 75.0


def _headroom_hint(roof_pct: float | None, basis: str, *, continue_hint: bool) -> str:
    """The default stop message: % of roof, and the option when the headroom is large."""
    more = " (go on with --continue)" if continue_hint else ""
    if roof_pct is None:
        return more
    if roof_pct < HEADROOM_HINT_BELOW_PCT:
        return (f"; the kernel is at {roof_pct:.0f}% of the {basis} — large headroom: "
                f"`--until-roof 0.9` keeps going while it is below 90%")
    return f"; the kernel is at {roof_pct:.0f}% of the {basis}" + more


def roof_pct_of(points: Mapping[str, Mapping] | None, *, simulated: bool = False) -> tuple[float | None, str]:
    """(% of roof, its basis) of a version: the worst valid configuration's (the one with the
    most headroom decides whether to go on), against the time attainable at its size when the
    device has a measured size curve (``roofline.curve``: launch floor, bandwidth by bytes), else
    the measured ceiling — or the datasheet roof when no configuration has a measured ceiling
    (offline presets).  The one "% of ceiling" of a loop: its stop reasons, ``loop status`` and
    the campaign's report and chart all use it.  ``simulated``: the ceiling is the simulation
    spec's, and named so."""
    pts = [p for p in (points or {}).values() if isinstance(p, Mapping) and p.get("valid", True)]
    measured = "simulated ceiling" if simulated else "measured ceiling"
    sized = [p for p in pts if p.get("floor_ms") is not None]        # the curve's attainable time, not the flat roof
    for key, basis, among in (("pct_attainable", "attainable time at its size", sized),
                              ("pct_measured", measured, pts), ("pct_datasheet", "datasheet roof", pts)):
        pcts = [float(p[key]) for p in among if p.get(key) is not None]
        if pcts and (among is pts or len(pcts) == len(pts)):
            return min(pcts), basis
    return None, measured


def cumulative_ratios(comparisons: Iterable[tuple[str, Mapping]]) -> dict[str, float]:
    """Product of kept per-config ratios: ``(status, comparison json)`` pairs in order."""
    out: dict[str, float] = {}
    for status, cmp in comparisons:
        if status != "keep" or not cmp:
            continue
        for c in cmp.get("configs", []):
            out[c["config"]] = out.get(c["config"], 1.0) * float(c["ratio"])
    return out
