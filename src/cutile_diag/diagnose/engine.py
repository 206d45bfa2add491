"""From evidence to a ranked list of playbook recommendations.

1. classify the bottleneck (``classes.classify``);
2. evaluate every playbook entry's ``applies_when`` clauses (three-valued): true -> a
   recommendation, unknown -> "possible, needs <facts>", an entry whose ``already_applied``
   holds -> listed as already applied and never recommended;
3. rank by the entry's priority for the bottleneck class (plus the clause's penalty for weak
   evidence), a ``root_cause`` clause (an f32 mma on CUDA cores) ahead of every class order,
   entries already tried in this kernel's history after the untried ones;
4. predicted effect = the entry's prior range, narrowed by its ``adjust`` rules and, with a
   GPU measurement, capped by the headroom left under the roof.

``scheduling`` replaces the class when a measured kernel is far from the roof and no entry
applies; it and ``unknown`` set ``escalate`` (a person decides, the loop stops).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .classes import CLASSES, Classification, classify
from .evidence import Evidence, Fact, NotChecked
from .playbook import Entry, Playbook, default_playbook
from ..output import prog
from ..ir_parsers.tileir import parse_tileir, parse_tileir_file
from .calibrate import expected_gain, prior_expected
from .collect_capture import collect_capture
from .collect_ir import collect_tileir

MAX_SITES_PER_FACT = 4
MIN_PROMOTED_GAIN = 0.05     # up to this expected gain, evidence can demote an entry but not promote it


@dataclass
class Recommendation:
    """One ranked playbook entry for a kernel: why, on what evidence, its predicted effect and risk."""
    id: str
    name: str
    reason: str
    evidence: list[str]                     # human-readable lines, IR/remark/SASS/measurement sources
    predicted_effect: dict                  # {low, high, notes}: speedup fraction t_before/t_after - 1
    risk: str                               # none | low | medium | high (correctness)
    automatic: bool
    transform: str
    rank: float
    tried: int = 0
    evidence_facts: list[dict] = field(default_factory=list)
    summary: str = ""
    changes: list[str] = field(default_factory=list)
    risks: list[str] = field(default_factory=list)
    verify: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)
    root_cause: bool = False
    expected_gain: float | None = None      # point estimate inside predicted_effect (see calibrate)
    ncu: list[dict] = field(default_factory=list)   # Nsight Compute findings that support this entry
    past: list[dict] = field(default_factory=list)  # this entry's measured steps on this machine


@dataclass
class Diagnosis:
    """A kernel's bottleneck class and its ranked recommendations, with what could not be checked."""
    kernel: str | None
    bottleneck: str
    confidence: str
    escalate: bool
    reasons: list[str]
    recommendations: list[Recommendation]
    alternatives: list[dict] = field(default_factory=list)
    possible: list[dict] = field(default_factory=list)          # {id, name, reason, missing}
    already_applied: list[dict] = field(default_factory=list)   # {id, name, evidence}
    evidence: list[Fact] = field(default_factory=list)
    not_checked: list[NotChecked] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)
    context: dict = field(default_factory=dict)
    ncu_findings: list[dict] = field(default_factory=list)   # every rule finding (mapped or not)
    past: list[dict] = field(default_factory=list)           # past steps: predicted vs measured

    @property
    def first(self) -> Recommendation | None:
        """The top recommendation, or None."""
        return self.recommendations[0] if self.recommendations else None

    def ids(self) -> list[str]:
        """The recommended entry ids, best first."""
        return [r.id for r in self.recommendations]

    def to_json(self) -> dict:
        """The ``--json`` form, with the class's title and every recommendation."""
        return {
            "kernel": self.kernel,
            "bottleneck": self.bottleneck,
            "bottleneck_title": CLASSES[self.bottleneck].title,
            "confidence": self.confidence,
            "escalate": self.escalate,
            "reasons": self.reasons,
            "alternatives": self.alternatives,
            "recommendations": [_rec_json(r) for r in self.recommendations],
            "possible": self.possible,
            "already_applied": self.already_applied,
            "not_checked": [vars(n) for n in self.not_checked],
            "notes": self.notes,
            "collected": self.collected,
            "context": self.context,
            "evidence": [f.to_json() for f in self.evidence],
            "ncu_findings": self.ncu_findings,
            "past": self.past,
        }


def _rec_json(r: Recommendation) -> dict:
    return {"id": r.id, "name": r.name, "reason": r.reason, "evidence": r.evidence,
            "predicted_effect": r.predicted_effect, "risk": r.risk, "automatic": r.automatic,
            "transform": r.transform, "alternatives": r.alternatives, "rank": r.rank, "tried": r.tried,
            "summary": r.summary, "changes": r.changes, "risks": r.risks, "verify": r.verify,
            "references": r.references, "root_cause": r.root_cause, "evidence_facts": r.evidence_facts,
            "expected_gain": r.expected_gain, "ncu": r.ncu, "past": r.past}


# --- helpers ------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)(?::([^}]*))?\}")


def render_reason(template: str, facts: Mapping[str, Any]) -> str:
    """Fill ``{fact.key}`` / ``{fact.key:.2f}`` placeholders; unknown facts print as '?'."""
    def sub(m: re.Match) -> str:
        key, spec = m.group(1), m.group(2)
        if key not in facts or facts[key] is None:
            return "?"
        val = facts[key]
        if isinstance(val, (list, tuple)):
            return "; ".join(str(v) for v in val) if val else "none"
        if spec:
            try:
                return format(val, spec)
            except (ValueError, TypeError):
                return str(val)
        if isinstance(val, float):
            return f"{val:.3g}"
        return str(val)
    return _PLACEHOLDER.sub(sub, template)


def _short(text: str, n: int = 110) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"


def fact_lines(fact: Fact) -> list[str]:
    """Evidence lines for one fact: one per site (IR line, remark ...), else the fact itself."""
    if not fact.sites:
        return [fact.line()]
    val = fact.value
    head = f"{fact.key} = {val:.3g}" if isinstance(val, float) else f"{fact.key} = {val}"
    lines = []
    for s in fact.sites[:MAX_SITES_PER_FACT]:
        where = s.source + (f" ({s.python})" if s.python and s.python not in s.source else "")
        lines.append(f"{where}: {_short(s.detail)}" if s.detail else where)
    more = len(fact.sites) - MAX_SITES_PER_FACT
    if more > 0:
        lines.append(f"… and {more} more")
    return [f"{head}"] + ["  " + ln for ln in lines]


def changes_for(changes: list[str], cls: str) -> list[str]:
    """Change lines prefixed '<class>:' apply to that class: the kernel's own first, then the
    general ones; other classes' lines are kept (last) only when none is the kernel's."""
    def owner(line: str) -> str | None:
        head = line.split(":", 1)[0].strip()
        return head if head in CLASSES else None
    own = [c for c in changes if owner(c) == cls]
    general = [c for c in changes if owner(c) is None]
    return own + general if own else general + [c for c in changes if owner(c) not in (None, cls)]


def _tried_counts(tried: Iterable[str] | Mapping[str, int] | None) -> Counter:
    if tried is None:
        return Counter()
    if isinstance(tried, Mapping):
        return Counter({str(k): int(v) for k, v in tried.items() if int(v) > 0})
    return Counter(str(t) for t in tried)


def _predicted(entry: Entry, facts: Mapping[str, Any]) -> dict:
    low, high = entry.effect_low, entry.effect_high
    notes: list[str] = []
    for adj in entry.adjust:
        if adj.predicate.evaluate(facts).true:
            notes.append(render_reason(adj.note, facts))
            if adj.effect_high is not None:
                high = min(high, adj.effect_high)
            if adj.effect_low is not None:
                low = min(low, adj.effect_low)
    # headroom against the time attainable at the kernel's size when known, else the measured ceiling
    # when there is one (what this GPU can really do)
    key = next((k for k in ("gpu.pct_attainable", "gpu.pct_of_ceiling") if _is_num(facts.get(k))), "gpu.pct_of_roof")
    pct = facts.get(key)
    if entry.bounded_by_roof and _is_num(pct) and pct > 0:
        headroom = max(0.0, 100.0 / min(float(pct), 100.0) - 1.0)
        if headroom < high:
            high = headroom
            what = {"gpu.pct_attainable": "attainable time at its size",
                    "gpu.pct_of_ceiling": "measured ceiling"}.get(key, "roof")
            notes.append(f"the kernel is at {pct:.0f}% of its {what}: at most +{headroom:.0%} is left")
    low = min(low, high)
    return {"low": round(low, 4), "high": round(high, 4), "notes": notes}


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ncu_gain(found: list[dict]) -> float | None:
    """The largest whole-kernel ('global') runtime reduction Nsight Compute estimated, as a
    speedup fraction (a 20 % shorter runtime is +25 %)."""
    pcts = [f["speedup_pct"] for f in found if _is_num(f.get("speedup_pct")) and f.get("speedup_type") != "local"]
    if not pcts:
        return None
    p = min(max(pcts), 95.0)
    return 1.0 / (1.0 - p / 100.0) - 1.0


def _calibrate(rec: "Recommendation", calibration, found: list[dict], cls: str | None = None) -> float:
    """Set ``rec.expected_gain`` (and its basis) from what was measured for the entry on kernels
    of the same evidence class ``cls``; return the rank multiplier: an entry expected to give
    more than its prior moves up, one that measured little (or a slowdown) here moves down."""
    pe = rec.predicted_effect
    measured = calibration.measured(rec.id, cls) if calibration else []
    rec.past = [s.to_json() for s in calibration.similar(rec.id, cls)] if calibration else []
    rec.ncu = found
    exp, how = expected_gain(pe["low"], pe["high"], measured, _ncu_gain(found))
    rec.expected_gain = exp
    pe["expected"], pe["basis"] = exp, how
    prior = prior_expected(pe["low"], pe["high"])
    if not measured and not found:
        return 1.0
    if exp <= 0.005:
        return 4.0
    scale = min(max(prior / exp, 0.25), 4.0) if prior > 0 else 1.0
    # evidence moves an entry up only when the gain it expects is worth an iteration
    return max(scale, 1.0) if exp <= MIN_PROMOTED_GAIN else scale


def _evidence_for(keys: Iterable[str], ev: Evidence) -> tuple[list[str], list[dict]]:
    lines: list[str] = []
    structured: list[dict] = []
    for k in dict.fromkeys(keys):
        f = ev.get(k)
        if f is None:
            continue
        if f.value in (False, 0, None, [], "") and not f.detail and not f.sites:
            continue   # a negative fact with nothing to show adds no evidence line
        lines.extend(fact_lines(f))
        structured.append(f.to_json())
    return lines, structured


# --- the engine -----------------------------------------------------------------------------------

def diagnose(ev: Evidence, *, tried: Iterable[str] | Mapping[str, int] | None = None,
             playbook: Playbook | None = None, classification: Classification | None = None,
             calibration=None) -> Diagnosis:
    """``calibration``: a ``calibrate.Calibration`` (the loop's measured steps on this machine)."""
    pb = playbook or default_playbook()
    ncu_findings = list(ev.context.get("ncu_findings") or [])
    facts = ev.values()
    cls = classification or classify(ev)
    counts = _tried_counts(tried)
    bottleneck = cls.bottleneck

    recs: list[tuple[tuple, Recommendation]] = []
    possible: list[dict] = []
    applied: list[dict] = []
    last_resort: list[Entry] = []
    # a kernel that moves no memory and has no mma gives the playbook nothing to act on
    empty = all(facts.get(k) == 0 for k in ("ir.loads", "ir.stores", "ir.atomics", "ir.mma_ops"))
    for order, entry in enumerate(pb.entries if not empty else []):
        if entry.already_applied is not None:
            r = entry.already_applied.evaluate(facts)
            if r.true:
                lines, _ = _evidence_for(r.used, ev)
                applied.append({"id": entry.id, "name": entry.name, "evidence": lines})
                continue
        if entry.last_resort:
            last_resort.append(entry)
            continue
        hit = None
        missing: list[str] = []
        unknown_reasons: list[str] = []
        for clause in entry.clauses:
            res = clause.predicate.evaluate(facts)
            if res.true:
                hit = (clause, res)
                break
            if res.unknown:
                missing.extend(m for m in res.missing if m not in missing)
                unknown_reasons.append(render_reason(clause.reason, facts))
        if hit is None:
            if missing:
                possible.append({"id": entry.id, "name": entry.name, "reason": unknown_reasons[0],
                                 "missing": missing})
            continue
        clause, res = hit
        lines, structured = _evidence_for([*res.used, *clause.cite], ev)
        rank = entry.rank(bottleneck) + clause.penalty
        rec = Recommendation(
            id=entry.id, name=entry.name, reason=render_reason(clause.reason, facts),
            evidence=lines, evidence_facts=structured, predicted_effect=_predicted(entry, facts),
            risk=entry.risk, automatic=entry.automatic, transform=entry.transform, rank=rank,
            tried=counts.get(entry.id, 0), summary=entry.summary, changes=changes_for(entry.changes, bottleneck),
            risks=entry.risks, verify=entry.verify, references=entry.references,
            alternatives=entry.alternatives, root_cause=clause.root_cause)
        scale = _calibrate(rec, calibration, [f for f in ncu_findings if entry.id in (f.get("entries") or [])],
                           cls.bottleneck)
        rec.rank = round(rank * scale, 3)
        recs.append(((rec.tried > 0, rec.tried, not rec.root_cause, rec.rank, order), rec))

    recs.sort(key=lambda t: t[0])
    ordered = [r for _, r in recs]
    notes = list(ev.notes)
    measured = "gpu.roofline_class" in facts or "gpu.pct_of_roof" in facts
    pct = facts.get("gpu.pct_of_roof")
    reasons = list(cls.reasons)
    confidence = cls.confidence
    untried = [r for r in ordered if r.tried == 0]

    if not untried and measured and isinstance(pct, (int, float)) and pct < 60.0 \
            and not CLASSES[bottleneck].escalate:
        reasons.insert(0, f"at {pct:.0f}% of the roof with no untried playbook entry left: the compiler's "
                          "schedule (pipelining, warp specialisation) is the likely limiter")
        notes.append(f"classified {bottleneck} before escalation")
        bottleneck, confidence = "scheduling", "medium"
    elif empty:
        notes.append("the kernel has no global loads, stores, atomics or mma: no playbook entry can apply")
    elif not ordered and not measured and bottleneck != "unknown":
        notes.append("no playbook entry applies on static evidence; measure it on a GPU for a fuller diagnosis")
    elif not untried and measured and isinstance(pct, (int, float)) and pct >= 80.0:
        notes.append(f"at {pct:.0f}% of the roof: only a change in the bytes or FLOPs moved can help")

    pointed: dict[str, list[str]] = {}
    for f in ncu_findings:
        if f.get("cls"):
            pointed.setdefault(f["cls"], []).append(f["rule"])
    if pointed:     # Nsight Compute's view of the limiter, beside ours (it never overrides the roofline)
        notes.append("Nsight Compute's findings point at: " + "; ".join(
            f"{c} ({', '.join(rs)})" + (" — agrees" if c == bottleneck else "") for c, rs in pointed.items()))

    if not untried and last_resort and bottleneck != "unknown":
        for order, entry in enumerate(last_resort):
            clause = entry.clauses[0]
            ordered.append(Recommendation(
                id=entry.id, name=entry.name, reason=render_reason(clause.reason, facts), evidence=[],
                predicted_effect=_predicted(entry, facts), risk=entry.risk, automatic=entry.automatic,
                transform=entry.transform, rank=entry.rank(bottleneck), tried=counts.get(entry.id, 0),
                summary=entry.summary, changes=changes_for(entry.changes, bottleneck), risks=entry.risks,
                verify=entry.verify, references=entry.references))

    return Diagnosis(
        kernel=ev.kernel, bottleneck=bottleneck, confidence=confidence,
        escalate=CLASSES[bottleneck].escalate, reasons=reasons, recommendations=ordered,
        alternatives=cls.alternatives, possible=possible, already_applied=applied,
        evidence=list(ev.facts.values()), not_checked=list(ev.not_checked), notes=notes,
        collected=list(ev.collected), context={k: v for k, v in ev.context.items() if k != "ncu_findings"},
        ncu_findings=ncu_findings, past=[s.to_json() for s in calibration.steps] if calibration else [])


# --- convenience entry points (the CLI, the demo and the loop use these) -----------------------

def diagnose_capture(folder, *, arch: str | None = None, entry: str | None = None,
                     tried: Iterable[str] | Mapping[str, int] | None = None,
                     playbook: Playbook | None = None, calibration=None) -> Diagnosis:
    """Static diagnosis of a capture folder (path or ``CaptureFolder``)."""
    ev = collect_capture(folder, arch=arch, entry=entry)
    _static_only(ev)
    return diagnose(ev, tried=tried, playbook=playbook, calibration=calibration)


def diagnose_tileir(path_or_text, *, entry: str | None = None,
                    tried: Iterable[str] | Mapping[str, int] | None = None,
                    playbook: Playbook | None = None, calibration=None) -> Diagnosis:
    """Static diagnosis of a bare TileIR file (or text): says what a capture would add."""
    from pathlib import Path

    if isinstance(path_or_text, Path) or (isinstance(path_or_text, str) and "\n" not in path_or_text):
        module = parse_tileir_file(path_or_text)
    else:
        module = parse_tileir(path_or_text)
    ev = collect_tileir(module, entry=entry)
    for what in ("remarks (TMA selection, FMA fallback)", "register spills", "SASS instruction mix",
                 "threads per CTA / cluster"):
        ev.missing(what, "a bare TileIR file has no cubin",
                   f"capture the kernel ({prog()} capture FILE.py::KERNEL) and diagnose the capture folder")
    ev.missing("grid size vs SMs", "a bare TileIR file has no argument shapes or target arch",
               "diagnose a capture folder")
    if not module.has_locations:
        ev.missing("Python source lines of IR ops", "the TileIR text has no loc() annotations",
                   "use tileirdisasm -g output")
    _static_only(ev)
    return diagnose(ev, tried=tried, playbook=playbook, calibration=calibration)


def _static_only(ev: Evidence) -> None:
    ev.missing("roofline class and % of roof", "no GPU measurement",
               f"diagnose a workload on a GPU ({prog()} diagnose examples:<kernel>), or pass --roofline FILE")
    ev.missing("host / launch overhead", "no GPU measurement")
