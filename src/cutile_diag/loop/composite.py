"""Composite steps: several transforms screened and kept as one candidate.

A greedy walk never measures a step whose precondition another step provides when that
step alone is not a win: ``read_once`` (W) needs the tile loads ``gather_to_load`` (A)
writes, and A alone may be slower.  When an entry's transform refuses the kept version,
``enabled_candidates`` applies each transform that declares it can meet the precondition
(``Transform.ENABLED_BY``) first and the refused one on its output — whether or not the
enabling step was tried (and reverted) alone.  ``on_top`` builds the same kind of
candidate on a frontier version (``loop.frontier``): its steps, then the next one.

A composite is one candidate: one row ("A+W: ..."), one commit, ``applied`` naming every
step; ``part_records`` gives the ledger each part's diff (and IR diff when captures run).
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .backends import Version
from .candidate import Candidate, transform_key


@dataclass(frozen=True)
class CompositeResult:
    """What a composite did, in the shape of a ``TransformResult`` plus its ``parts``
    (``transform``, ``params``, ``description``, ``entry`` and the kernel file's text after it)."""
    parts: tuple[dict, ...]
    new_source: str
    changed_lines: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    frontier: int | None = None          # the iteration whose reverted step this builds on

    @property
    def transform(self) -> str:
        """The parts' transforms, joined by ``+``."""
        return "+".join(p["transform"] for p in self.parts)

    @property
    def ids(self) -> str:
        """The parts' playbook entries, joined by ``+``."""
        return "+".join(p.get("entry") or "?" for p in self.parts)

    @property
    def params(self) -> dict:
        """Each part's parameters, keyed by position and transform."""
        # keyed by position: the same transform may appear twice (a step on top of itself)
        return {f"{i + 1}:{p['transform']}": dict(p.get("params") or {}) for i, p in enumerate(self.parts)}

    @property
    def description(self) -> str:
        """The parts' descriptions, in the order they were applied."""
        return f"{self.ids}: " + "; then ".join(p.get("description") or p["transform"] for p in self.parts)


def part(entry: str, transform: str, result: Any, params: Mapping[str, Any]) -> dict:
    """One part of a composite: its entry, transform, parameters, description and the source it produced."""
    return {"entry": entry, "transform": transform, "params": dict(getattr(result, "params", None) or params),
            "description": getattr(result, "description", transform), "source": result.new_source}


def compose(a: Version, kernel_file: str, parts: Sequence[dict], *, frontier: int | None = None) -> Candidate:
    """The candidate that applies ``parts`` (in order, each with the source after it) to ``a``."""
    from ..source.model import changed_lines
    new = parts[-1]["source"]
    res = CompositeResult(tuple(parts), new, changed_lines(a.files[kernel_file], new), frontier=frontier)
    applied = a.applied + tuple(transform_key(p["transform"], p.get("params") or {}) for p in parts)
    v = Version("", {**a.files, kernel_file: res.new_source}, None, applied)
    return Candidate(v, res, res.params, transform=res.transform)


def enabled_candidates(rec, blocked, a: Version, *, kernel_file: str, kernel: str, transforms: Mapping[str, Any],
                       facts: Mapping[str, Any], attempted: set, limit: int, skipped: list[str],
                       enablers: Sequence[str] | None = None) -> list[Candidate]:
    """Composites (enabler, ``blocked``) for entry ``rec`` with transform ``blocked``: each
    enabling transform's settings (of ``enablers`` only, when given), then ``blocked``'s first
    setting that applies on its output."""
    source = a.files[kernel_file]
    out: list[Candidate] = []
    for ename in getattr(blocked, "ENABLED_BY", ()):
        if enablers is not None and ename not in enablers:
            continue
        e = transforms.get(ename)
        if e is None or getattr(e, "kind", "source") != "source":
            continue
        try:
            eparams = e.candidates_for(source, kernel, facts)
        except Exception as err:
            skipped.append(f"{rec.id}/{ename}+{blocked.name}: {type(err).__name__}: {err}")
            continue
        for p in eparams:
            try:
                r1 = e.apply(source, kernel, **p)
                bparams = blocked.candidates_for(r1.new_source, kernel, facts)
            except Exception as err:
                skipped.append(f"{rec.id}/{ename}{p or ''}+{blocked.name}: {getattr(err, 'reason', None) or err}")
                continue
            for q in bparams[:1]:
                try:
                    r2 = blocked.apply(r1.new_source, kernel, **q)
                except Exception as err:
                    skipped.append(f"{rec.id}/{ename}{p or ''}+{blocked.name}{q or ''}: "
                                   f"{getattr(err, 'reason', None) or err}")
                    continue
                c = compose(a, kernel_file, [part(getattr(e, "playbook_id", "") or ename, ename, r1, p),
                                             part(rec.id, blocked.name, r2, q)])
                key = (a.digest, c.transform, json.dumps(c.params, sort_keys=True, default=str))
                if key in attempted or any(o.version.digest == c.version.digest for o in out):
                    continue
                out.append(c)
            if len(out) >= limit:
                return out
    return out


def composites_for(rec, t, a: Version, recs: Sequence, *, limit: int, **kw) -> list[Candidate]:
    """The composites a step ``t`` (of entry ``rec``) is part of: after the transforms that can
    provide its precondition, and before the recommended entries (``recs``) whose precondition
    it provides — so that A's sweep measures A+W too, whichever of the two ranks first."""
    out = enabled_candidates(rec, t, a, limit=limit, **kw) if limit > 0 else []
    transforms = kw["transforms"]
    for r in recs:
        for uname in dict.fromkeys([r.transform, *r.alternatives]):
            u = transforms.get(uname)
            if len(out) >= limit or u is None or u is t or t.name not in getattr(u, "ENABLED_BY", ()):
                continue
            out += enabled_candidates(r, u, a, limit=limit - len(out), enablers=(t.name,), **kw)
    return out[:limit]


def on_top(a: Version, kernel_file: str, base_parts: Sequence[dict], cands: Sequence[Candidate], *,
           entry: str, transform: str, frontier: int, attempted: set) -> list[Candidate]:
    """Candidates chosen on a frontier version (for ``entry`` with ``transform``), as composites
    on ``a``: the frontier's steps (``base_parts``, already in its files), then each candidate's own."""
    out = []
    for c in cands:
        res = c.result
        mine = list(res.parts) if isinstance(res, CompositeResult) else [
            part(entry, c.transform or transform, res, c.params)]
        comp = compose(a, kernel_file, [*base_parts, *mine], frontier=frontier)
        # the frontier's own steps are in c.version.applied already: keep its lineage
        comp.version = Version("", comp.version.files, None, c.version.applied)
        key = (a.digest, comp.transform, json.dumps(comp.params, sort_keys=True, default=str))
        if key not in attempted and comp.version.digest != a.digest:
            out.append(comp)
    return out


def point_label(label: str, cand: Candidate, prefix: Callable[[str], str]) -> str:
    """A sweep point's row: a composite names its steps itself ("A+W: ..."), a single step
    under the sweep's prefix."""
    if isinstance(cand.result, CompositeResult):
        return cand.result.description
    return f"{prefix(label)}: {cand.result.description}"


def part_records(a: Version, cand: Candidate, kernel_file: str,
                 ir_diff: Callable[[Version, Version], dict] | None = None) -> list[dict]:
    """Each part of a composite as the ledger keeps it: what ran, its own diff of the kernel
    file, and (``ir_diff`` given: captures on) the IR diff against the version before it."""
    res = cand.result
    if not isinstance(res, CompositeResult):
        return []
    out, before = [], a
    for i, p in enumerate(res.parts):
        src = p.get("source")
        rec = {k: p.get(k) for k in ("entry", "transform", "params", "description")}
        if src is None:         # a frontier's inner step: its text is only known with the next one's
            rec["diff"] = "(in the next part's diff)"
            out.append(rec)
            continue
        after = Version(f"{cand.version.label}/part{i + 1}", {**before.files, kernel_file: src}, None)
        rec["diff"] = "".join(difflib.unified_diff(
            before.files[kernel_file].splitlines(True), src.splitlines(True),
            f"a/{kernel_file}", f"b/{kernel_file}"))[:6000]
        if ir_diff is not None:
            rec["ir_diff"] = ir_diff(before, after)
        out.append(rec)
        before = after
    return out
