"""Records the differ hands to its renderers (and to later stages: diagnose, loop)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA = "cutile-diag.ir-diff/1"

# structural delta kinds
ATTRIBUTE, ADDED, REMOVED, MOVED, REWIRED = "attribute", "added", "removed", "moved", "rewired"


@dataclass
class Aspect:
    """One field of an attribute delta: ``hints.default.latency``: None -> 3."""
    field: str
    before: Any
    after: Any
    category: str = ""             # what the classifier made of it (hint, rounding, ...)
    explained_by: list[int] = field(default_factory=list)


@dataclass
class StructDelta:
    """A topology or attribute difference between matched graphs, in canonical names."""
    id: int
    kind: str                      # attribute | added | removed | moved | rewired
    entry: str
    op: str
    region_path: str
    a: int = -1                    # node in the before graph (-1: none)
    b: int = -1                    # node in the after graph
    line_before: int | None = None
    line_after: int | None = None
    source: str | None = None      # python file:line of the op (after side first)
    before: str | None = None      # canonical text
    after: str | None = None
    aspects: list[Aspect] = field(default_factory=list)
    dead: bool = False             # an unused pure op: no effect on the compiled kernel
    explained_by: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        """The delta as JSON; attribute aspects under ``fields``."""
        d = {"id": self.id, "kind": self.kind, "entry": self.entry, "op": self.op,
             "region_path": self.region_path, "line_before": self.line_before,
             "line_after": self.line_after, "source": self.source,
             "before": self.before, "after": self.after}
        if self.aspects:
            d["fields"] = {a.field: {"before": a.before, "after": a.after, "category": a.category}
                           for a in self.aspects}
        if self.dead:
            d["dead"] = True
        d["explained_by"] = sorted(set(self.explained_by))
        return d


@dataclass
class Change:
    """A difference in kernel-author terms (semantic), or a cubin-side fact delta."""
    id: int
    kind: str                      # entry_hint, op_hint, tile_shape, padding, ...
    level: str                     # semantic | structural | cubin
    detail: str                    # one line for people
    before: Any = None
    after: Any = None
    entry: str | None = None
    op: str | None = None
    region_path: str | None = None
    line_before: int | None = None
    line_after: int | None = None
    source: str | None = None
    knob: str | None = None        # the source-level knob (occupancy, latency, TM ...)
    arch: str | None = None        # cubin changes, arch-keyed hints
    explains: list[int] = field(default_factory=list)   # StructDelta ids
    impact: Any = None             # impact.Impact: the ops downstream of the change (IR changes)

    @property
    def where(self) -> str:
        """One line for people: ``kernels.py:46 in for %v50`` / ``line 12`` / ``sm_90 cubin``."""
        if self.level == "cubin":
            return f"{self.arch} cubin" if self.arch else "cubin"
        parts = []
        if self.source:
            path, _, line = self.source.rpartition(":")
            parts.append(f"{path.rsplit('/', 1)[-1]}:{line}")
        elif self.line_after is not None or self.line_before is not None:
            parts.append(f"line {self.line_after if self.line_after is not None else self.line_before}")
        parts.append(f"in {self.region_path}" if self.region_path else "in the entry body")
        if self.entry:
            parts.append(f"of {self.entry}")
        return " ".join(parts)

    def to_json(self) -> dict:
        """The change as JSON; knob, arch, the deltas it explains and its impact only when set."""
        d = {"id": self.id, "kind": self.kind, "level": self.level, "detail": self.detail,
             "where": self.where,
             "entry": self.entry, "region_path": self.region_path, "op": self.op,
             "line_before": self.line_before, "line_after": self.line_after,
             "source": self.source, "before": self.before, "after": self.after}
        if self.knob:
            d["knob"] = self.knob
        if self.arch:
            d["arch"] = self.arch
        if self.explains:
            d["explains"] = sorted(set(self.explains))
        if self.impact is not None:
            d["impact"] = self.impact.to_json()
        return d


@dataclass
class RegionDelta:
    """Op counts by name of one region, before and after."""
    entry: str
    region_path: str
    before: dict[str, int]
    after: dict[str, int]

    @property
    def delta(self) -> dict[str, int]:
        """Op name -> after minus before, only where they differ."""
        keys = sorted(set(self.before) | set(self.after))
        return {k: self.after.get(k, 0) - self.before.get(k, 0) for k in keys
                if self.after.get(k, 0) != self.before.get(k, 0)}

    def to_json(self) -> dict:
        """The region's totals and per-op delta as JSON."""
        return {"entry": self.entry, "region_path": self.region_path or "entry",
                "ops_before": sum(self.before.values()), "ops_after": sum(self.after.values()),
                "delta": self.delta}


@dataclass
class EntryPairing:
    """How an entry of one side pairs with the other's, and how many of its ops matched."""
    before: str | None             # symbols
    after: str | None
    function_before: str | None = None
    function_after: str | None = None
    ops_before: int = 0
    ops_after: int = 0
    matched: int = 0
    match_stats: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        """added, removed, matched (same symbol) or renamed."""
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        return "matched" if self.before == self.after else "renamed"

    @property
    def name(self) -> str:
        """The Python function's name (after side first), else a symbol."""
        return self.function_after or self.function_before or self.after or self.before or "?"

    def to_json(self) -> dict:
        """The pairing as JSON, status and op counts included."""
        return {"before": self.before, "after": self.after, "status": self.status,
                "ops_before": self.ops_before, "ops_after": self.ops_after,
                "ops_matched": self.matched}


@dataclass
class InputInfo:
    """What one side was: path, kind, whether it has source locations, its entries and op count."""
    path: str
    kind: str                      # tileir | capture | bytecode
    has_locations: bool = False
    entries: list[str] = field(default_factory=list)
    ops: int = 0
    capture_name: str | None = None


@dataclass
class EntryDetail:
    """The graphs and matching behind one entry pair (for renderers; not serialised)."""
    name: str
    matching: Any
    names_a: Any
    names_b: Any
    deltas: list[StructDelta]


@dataclass
class DiffResult:
    """A whole diff: entry pairing, classified changes, structural and region deltas, cubin facts."""
    before: InputInfo
    after: InputInfo
    entries: list[EntryPairing]
    changes: list[Change]
    structural: list[StructDelta]
    regions: list[RegionDelta]
    cubin: dict | None = None          # arch -> {metric: {before, after}}; see cubin.py
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    details: list[EntryDetail] = field(default_factory=list, repr=False)

    @property
    def ir_equivalent(self) -> bool:
        """No structural delta and no entry added or removed."""
        return not self.structural and all(e.status in ("matched", "renamed") for e in self.entries)

    @property
    def equivalent(self) -> bool:
        """IR-equivalent and no cubin-level change either."""
        return self.ir_equivalent and not any(c.level == "cubin" for c in self.changes)

    def semantic(self) -> list[Change]:
        """The changes named in kernel-author terms (level ``semantic``)."""
        return [c for c in self.changes if c.level == "semantic"]

    def summary(self) -> dict:
        """Counts: entries and ops (matched, added, removed), structural deltas by kind, changes by
        level and kind, dead ops."""
        by_kind: dict[str, int] = {}
        for c in self.changes:
            by_kind[c.kind] = by_kind.get(c.kind, 0) + 1
        sd: dict[str, int] = {}
        for d in self.structural:
            sd[d.kind] = sd.get(d.kind, 0) + 1
        return {
            "equivalent": self.equivalent,
            "ir_equivalent": self.ir_equivalent,
            "entries": len(self.entries),
            "entries_added": sum(1 for e in self.entries if e.status == "added"),
            "entries_removed": sum(1 for e in self.entries if e.status == "removed"),
            "ops_before": self.before.ops, "ops_after": self.after.ops,
            "ops_matched": sum(e.matched for e in self.entries),
            "structural": sd,
            "semantic_changes": sum(1 for c in self.changes if c.level == "semantic"),
            "unclassified_changes": sum(1 for c in self.changes if c.level == "structural"),
            "cubin_changes": sum(1 for c in self.changes if c.level == "cubin"),
            "by_kind": dict(sorted(by_kind.items())),
            "dead_ops": sum(1 for d in self.structural if d.dead),
        }

    def to_json(self) -> dict:
        """The ``--json`` form under its schema."""
        return {
            "schema": SCHEMA,
            "equivalent": self.equivalent,
            "summary": self.summary(),
            "before": vars(self.before), "after": vars(self.after),
            "entries": [e.to_json() for e in self.entries],
            "changes": [c.to_json() for c in self.changes],
            "structural": [d.to_json() for d in self.structural],
            "regions": [r.to_json() for r in self.regions],
            "cubin": self.cubin,
            "warnings": self.warnings,
        }
