"""What to try next: the diagnosis as the loop consumes it.

``EngineDiagnoser`` runs ``cutile_diag.diagnose`` on the last kept version's capture (IR,
remarks, SASS, resources) plus the GPU measurements of that version, passing the ledger's
tried entries so they rank after untried ones.  Without a capture (a kernel with no
``CAPTURE_SPECS``, capture disabled) there is no IR evidence to diagnose, so
``ApplicabilityDiagnoser`` ranks the transforms that apply to the source by the playbook's
priority for the kernel's class (from its arithmetic intensity) and the playbook clauses the
source's own facts make true (``source_facts``), and says so in the notes.
Both return a ``LoopDiagnosis``; tests script one with ``ScriptedDiagnoser``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence


@dataclass
class Rec:
    """One recommended playbook entry: the transform that applies it (empty for a manual entry), why, its evidence,
    predicted effect, risks and rank."""
    id: str
    name: str
    transform: str = ""                   # "" = a manual entry
    alternatives: list[str] = field(default_factory=list)
    reason: str = ""
    evidence: list[str] = field(default_factory=list)
    predicted_effect: dict = field(default_factory=dict)
    risk: str = "low"
    summary: str = ""
    changes: list[str] = field(default_factory=list)
    verify: list[str] = field(default_factory=list)
    risks: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    rank: float = 100.0
    tried: int = 0

    @property
    def automatic(self) -> bool:
        """A transform can apply it (not a manual entry)."""
        return bool(self.transform)

    def to_json(self) -> dict:
        """Every field, and ``automatic``."""
        d = dict(self.__dict__)
        d["automatic"] = self.automatic
        return d


@dataclass
class LoopDiagnosis:
    """The diagnosis the loop acts on: the bottleneck, whether to hand over to a person, and the ranked
    recommendations."""
    bottleneck: str
    confidence: str = "low"
    escalate: bool = False
    reasons: list[str] = field(default_factory=list)
    recommendations: list[Rec] = field(default_factory=list)
    source: str = "engine"                # engine | applicability | scripted
    notes: list[str] = field(default_factory=list)
    possible: list[dict] = field(default_factory=list)
    already_applied: list[dict] = field(default_factory=list)
    evidence: list[dict] = field(default_factory=list)

    def to_json(self, *, evidence: bool = False) -> dict:
        """The diagnosis as the ledger records it (``evidence=True``: with the evidence facts)."""
        d = {"bottleneck": self.bottleneck, "confidence": self.confidence, "escalate": self.escalate,
             "reasons": self.reasons, "source": self.source, "notes": self.notes,
             "recommendations": [r.to_json() for r in self.recommendations],
             "possible": self.possible, "already_applied": self.already_applied}
        if evidence:
            d["evidence"] = self.evidence
        return d


@dataclass
class DiagnoseContext:
    """What a diagnoser is given about one version: its source, capture, roofline points, workload counts, and what
    was tried already."""
    path: Path                             # the kernel file
    kernel: str
    source: str
    capture: Path | None = None            # capture folder of this version
    arch: str = "sm_90"
    tried: Mapping[str, int] = field(default_factory=dict)
    points: Sequence[dict] = ()            # roofline points of this version (GPU)
    primary: str | None = None
    workload_info: Mapping[str, dict] = field(default_factory=dict)
    iteration: int = 0
    calibration: Any = None                # diagnose.calibrate.Calibration: measured steps (loop_calibration)


class Diagnoser(Protocol):
    """What the loop asks of a diagnoser: one diagnosis per version."""

    def diagnose(self, ctx: DiagnoseContext) -> LoopDiagnosis:
        """The diagnosis of the version ``ctx`` describes."""


def _from_engine(d) -> LoopDiagnosis:
    recs = [Rec(id=r.id, name=r.name, transform=r.transform or "", alternatives=list(r.alternatives or []),
                reason=r.reason, evidence=list(r.evidence), predicted_effect=dict(r.predicted_effect),
                risk=r.risk, summary=r.summary, changes=list(r.changes), verify=list(r.verify),
                risks=list(r.risks), references=list(r.references), rank=float(r.rank), tried=int(r.tried))
            for r in d.recommendations]
    return LoopDiagnosis(bottleneck=d.bottleneck, confidence=d.confidence, escalate=bool(d.escalate),
                         reasons=list(d.reasons), recommendations=recs, source="engine", notes=list(d.notes),
                         possible=list(d.possible), already_applied=list(d.already_applied),
                         evidence=[f.to_json() for f in d.evidence])


class EngineDiagnoser:
    """``cutile_diag.diagnose`` over the capture and the measurements; falls back to
    ``ApplicabilityDiagnoser`` when there is no capture or the engine is unavailable."""

    def __init__(self, fallback: "ApplicabilityDiagnoser | None" = None):
        self.fallback = fallback or ApplicabilityDiagnoser()

    def diagnose(self, ctx: DiagnoseContext) -> LoopDiagnosis:
        """The engine's diagnosis of the capture and measurements; without a capture, or when the engine fails, the
        applicability ranking (with a note why)."""
        if ctx.capture is None:
            d = self.fallback.diagnose(ctx)
            d.notes.insert(0, "no capture of this version: ranked the transforms that apply to the source "
                              "(capture needs the kernel's arguments: a --workload that launches it, a "
                              "--test-cmd run on a GPU, CAPTURE_SPECS, --capture-arg, or --capture-workload REF "
                              "whose launch is intercepted on CPU inputs: no GPU needed, works with --simulate)")
            return d
        from ..diagnose.engine import diagnose
        from ..diagnose import Evidence, collect_capture, collect_gpu
        ev = Evidence(kernel=ctx.kernel)
        collect_capture(ctx.capture, ev, arch=ctx.arch)
        notes = []
        if ctx.points:
            try:
                collect_gpu(ev, points=list(ctx.points), primary=ctx.primary)
            except Exception as e:    # measurements are an extra; the static diagnosis stands without them
                notes.append(f"GPU evidence not used: {type(e).__name__}: {e}")
        out = _from_engine(diagnose(ev, tried=dict(ctx.tried), calibration=ctx.calibration))
        out.notes = notes + out.notes
        return out


def committed_ledgers(root: Path) -> list[Path]:
    """Loop ledgers committed in the repository at ``root`` (bench results, earlier runs): what
    git tracks, so nothing is searched outside the checkout and nothing in it is written."""
    import subprocess
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "*ledger.jsonl", "*ledger.jsonl.gz"], cwd=root,
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [root / p for p in out.split("\0") if p and (root / p).is_file()]


def loop_calibration(led, committed: Sequence[Path] = ()):
    """What the loop measured per playbook entry — this loop's own ledger and the committed
    ``committed`` ledgers — as the ``Calibration`` the diagnosis ranks with (an unreadable
    committed ledger is left out: it must not stop the loop)."""
    from ..diagnose.calibrate import Calibration, steps_of
    cal = Calibration(steps_of(led, str(led.path)), [str(led.path)])
    for f in committed:
        try:
            other = Calibration.from_paths([f])
        except Exception:
            continue
        cal.steps.extend(other.steps)
        cal.sources.extend(other.sources)
    return cal


# memory- / compute-bound priority orders of the perf recipe (tilegym-facts §7), for when the
# playbook files cannot be loaded
_ORDER = {"memory-bound": ["A", "B", "C", "F", "G", "E", "H", "Q", "R"],
          "compute-bound": ["D", "G", "C", "I", "B", "E", "H", "Q", "R", "F", "A"]}


class ApplicabilityDiagnoser:
    """Rank the source transforms that apply, by the playbook priority of the kernel's class."""

    def diagnose(self, ctx: DiagnoseContext) -> LoopDiagnosis:
        """The transforms that apply to the source, ranked by the playbook priority of the kernel's class, one
        recommendation per playbook entry."""
        from ..diagnose.engine import render_reason
        from ..transforms import applicability
        facts = source_facts(ctx.source, ctx.kernel)
        cls, reasons = _class_of(ctx, facts.get("ir.mma_ops"))
        notes: list[str] = []
        try:
            from ..diagnose.playbook import default_playbook
            pb = default_playbook()
        except Exception as e:
            pb = None
            notes.append(f"playbook not loaded ({e}); using the recipe's priority order")
        recs = []
        for t, ok, why in applicability(ctx.source, ctx.kernel):
            if not ok or getattr(t, "kind", "source") != "source":
                continue
            pid = t.playbook_id
            entry = None
            if pb is not None:
                try:
                    entry = pb.by_id(pid)
                except KeyError:
                    entry = None
            order = _ORDER.get(cls, _ORDER["memory-bound"])
            rank = entry.rank(cls) if entry is not None else float(order.index(pid) if pid in order else 50)
            evidence = [f"{t.name}: {why}"]
            clause = _source_clause(entry, facts) if entry is not None else None
            if clause is not None:
                rank += clause.penalty
                evidence.append(f"source: {render_reason(clause.reason, facts)}")
            recs.append(Rec(id=pid, name=entry.name if entry else t.summary, transform=t.name,
                            reason=why, evidence=evidence,
                            predicted_effect={"low": entry.effect_low, "high": entry.effect_high, "notes": []}
                            if entry else {}, risk=entry.risk if entry else "low",
                            summary=entry.summary if entry else t.summary,
                            changes=list(entry.changes) if entry else [], verify=list(entry.verify) if entry else [],
                            risks=list(entry.risks) if entry else [], references=list(entry.references) if entry else [],
                            rank=rank, tried=int(ctx.tried.get(pid, 0))))
        # one recommendation per playbook entry: its transforms become alternatives
        merged: dict[str, Rec] = {}
        for r in recs:
            if r.id in merged:
                merged[r.id].alternatives.append(r.transform)
            else:
                merged[r.id] = r
        ordered = sorted(merged.values(), key=lambda r: (r.tried > 0, r.tried, r.rank))
        if pb is not None:
            for e in pb.entries:
                if e.last_resort:
                    ordered.append(Rec(id=e.id, name=e.name, transform="", summary=e.summary,
                                       changes=list(e.changes), verify=list(e.verify), risks=list(e.risks),
                                       reason="offered when the automatic entries are exhausted", rank=e.rank(cls),
                                       tried=int(ctx.tried.get(e.id, 0))))
        return LoopDiagnosis(bottleneck=cls, confidence="low", escalate=False, reasons=reasons,
                             recommendations=ordered, source="applicability", notes=notes)


def source_facts(source: str, kernel: str) -> dict[str, Any]:
    """The playbook facts the kernel's source alone fixes, under the names the IR collector gives them (the tile
    sizes the host passes, the hints the decorator or the wrapper pins, the MMAs), so the playbook's clauses rank
    transforms the same way with and without a capture.  A fact the source cannot fix is left out (unknown)."""
    from ..source.analysis import hint_overrides, matrix_products
    from ..source.model import TransformError, load
    from ..transforms.kernel_hints import decorator_hints
    from ..transforms.tile_size_sweep import largest_tile
    try:
        k = load(source, kernel)
    except TransformError:
        return {}
    facts: dict[str, Any] = {"ir.kernel_hints_set": bool(decorator_hints(k) or hint_overrides(k)),
                             "ir.mma_ops": matrix_products(k)}
    tile = largest_tile(source, kernel)
    if tile is not None:
        facts["ir.max_tile_elems"] = tile
    return facts


def _source_clause(entry, facts: Mapping[str, Any]):
    """The entry's first clause the source facts make true (its penalty and reason apply), or None."""
    for c in entry.clauses:
        if c.predicate.evaluate(facts).true:
            return c
    return None


def _class_of(ctx: DiagnoseContext, mma_ops: int | None) -> tuple[str, list[str]]:
    """The recipe's class: by arithmetic intensity, where balanced or unknown by whether this kernel computes a matrix
    product (``mma_ops``, the source's count; None where the kernel could not be read: a text search then)."""
    ais = []
    for c, info in ctx.workload_info.items():
        f, b = info.get("flops"), info.get("bytes")
        if f and b:
            ais.append((c, float(f) / float(b)))
    mma = mma_ops > 0 if mma_ops is not None else "mma(" in ctx.source
    if ais:
        c, ai = ais[0]
        if ai < 10:
            return "memory-bound", [f"arithmetic intensity {ai:.2f} FLOP/B ({c}) < 10"]
        if ai > 50:
            return "compute-bound", [f"arithmetic intensity {ai:.1f} FLOP/B ({c}) > 50"]
        return ("compute-bound" if mma else "memory-bound"), [
            f"arithmetic intensity {ai:.1f} FLOP/B ({c}) is balanced; " + ("mma present" if mma else "no mma")]
    if mma:
        return "compute-bound", ["the kernel computes matrix products (no FLOP/byte counts)"]
    return "memory-bound", ["no matrix product in the kernel (no FLOP/byte counts)"]


class ScriptedDiagnoser:
    """Tests: a fixed diagnosis, a list consumed one per call (the last repeats), or a function."""

    def __init__(self, script: LoopDiagnosis | Sequence[LoopDiagnosis] | Callable[[DiagnoseContext], LoopDiagnosis]):
        self.script = script
        self.calls: list[DiagnoseContext] = []

    def diagnose(self, ctx: DiagnoseContext) -> LoopDiagnosis:
        """The scripted diagnosis for this call (recorded in ``calls``)."""
        self.calls.append(ctx)
        s = self.script
        if callable(s):
            return s(ctx)
        if isinstance(s, LoopDiagnosis):
            return s
        i = min(len(self.calls) - 1, len(s) - 1)
        return s[i]
