"""Choosing a step: of the diagnosis's ranked entries, the first automatic one whose transform
applies to the last kept version with parameters not tried on it; its parameter settings
(up to ``max_sweep``) become the candidates, beside composites with the transforms that can
provide its precondition (``loop.composite``; all of the sweep when the entry's transform
refuses the kept version).  Manual entries ranked above it are returned for ``loop next``,
and every skipped entry says why."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .backends import Version
from .candidate import Candidate, transform_key
from .composite import composites_for
from .diagnosis import LoopDiagnosis, Rec


@dataclass
class Choice:
    """The step chosen: the diagnosis's entry, the transform that applies it, and its candidates (several: a sweep).
    The step chosen: the diagnosis's entry, the transform that applies it, and its candidates (several: a sweep)."""
    rec: Rec
    transform: Any
    candidates: list[Candidate]


def choose(diag: LoopDiagnosis, a: Version, *, kernel_file: str, kernel: str, transforms: Mapping[str, Any],
           attempted: set, only: Sequence[str] = (), skip: Sequence[str] = (), max_sweep: int = 4,
           untimed: Callable[[Mapping[str, str], Mapping[str, str]], str | None] | None = None
           ) -> tuple[Choice | None, list[dict], list[str]]:
    """The next automatic step, the manual entries ranked above it, and why entries were skipped.
    ``attempted``: (base digest, transform, params json) already tried (``Ledger.attempted``).
    ``untimed(kept files, candidate files)``: why the backend would not time the candidate's change (a bare
    replay and a changed wrapper), or None; such candidates are skipped with that reason."""
    source = a.files[kernel_file]
    facts = {e.get("key"): e.get("value") for e in diag.evidence if isinstance(e, dict)}
    manual: list[dict] = []
    skipped: list[str] = []
    for rec in diag.recommendations:
        if only and rec.id.upper() not in only:
            continue
        if rec.id.upper() in skip:
            continue
        if not rec.automatic:
            manual.append(rec.to_json())
            continue
        for tname in dict.fromkeys([rec.transform, *rec.alternatives]):
            t = transforms.get(tname)
            if t is None:
                skipped.append(f"{rec.id}: transform '{tname}' is not available")
                continue
            if getattr(t, "kind", "source") != "source":
                continue        # hint-only transforms have a source twin the loop commits
            try:
                params_list = t.candidates_for(source, kernel, facts)
                if not params_list:             # say why (loop next shows it): e.g. hints a wrapper overrides
                    skipped.append(f"{rec.id}/{tname}: {t.why_no_candidates(source, kernel) or 'nothing to change'}")
            except Exception as e:
                skipped.append(f"{rec.id}/{tname}: {type(e).__name__}: {e}")
                params_list = []
            cands: list[Candidate] = []
            for params in params_list:
                key = (a.digest, tname, json.dumps(params, sort_keys=True, default=str))
                if key in attempted:
                    continue
                try:
                    res = t.apply(source, kernel, **params)
                except Exception as e:
                    skipped.append(f"{rec.id}/{tname}{params or ''}: {getattr(e, 'reason', None) or e}")
                    continue
                files = {**a.files, kernel_file: res.new_source}
                v = Version("", files, None, a.applied + (transform_key(tname, res.params or params),))
                if any(c.version.digest == v.digest for c in cands) or v.digest == a.digest:
                    continue
                cands.append(Candidate(v, res, dict(params)))
                if len(cands) >= max_sweep:
                    break
            # beside the step itself: composites with the transforms that provide its precondition or whose
            # precondition it provides (all the sweep when the step itself refuses A, else up to half of it)
            room = max_sweep if not cands else max_sweep // 2
            comps = composites_for(rec, t, a, [r for r in diag.recommendations if r.automatic and r is not rec
                                               and not (only and r.id.upper() not in only) and r.id.upper() not in skip],
                                   limit=room, kernel_file=kernel_file, kernel=kernel, transforms=transforms,
                                   facts=facts, attempted=attempted, skipped=skipped)
            if untimed is not None:
                cands, comps = (_timed(cs, a, untimed, f"{rec.id}/{tname}", skipped) for cs in (cands, comps))
            if cands or comps:
                return Choice(rec, t, cands[:max_sweep - len(comps)] + comps), manual, skipped
            if params_list:
                skipped.append(f"{rec.id}/{tname}: no untried parameters apply")
    return None, manual, skipped


def _timed(cands: list[Candidate], a: Version, untimed: Callable, label: str, skipped: list[str]) -> list[Candidate]:
    """The candidates whose change the backend times; the others are skipped, saying why."""
    out = []
    for c in cands:
        why = untimed(a.files, c.version.files)
        if why:
            skipped.append(f"{label}{c.params or ''}: not timed: {why}")
        else:
            out.append(c)
    return out


def row_label(entry: str, planned: str, ran: str, cands: Sequence[Candidate]) -> str:
    """What a row says it ran: the transform that really ran (an entry's alternative is named as
    such, never under the entry's own title) and, for a sweep, the parameters it varies."""
    who = f"{entry} {ran}" if ran == planned or not planned else f"{entry} {ran} (in place of {planned})"
    ids = sorted({c.result.ids for c in cands if getattr(c.result, "parts", None)})
    if ids and len(ids) == len(cands) == 1:                 # a composite names its steps
        return cands[0].result.description
    if ids:
        return f"{who}: sweep ({len(cands)} settings, composite {'/'.join(ids)})"
    if len(cands) == 1:
        return f"{who}: {cands[0].result.description}"
    varied = sorted({k for c in cands for k, v in c.params.items()
                     if any(o.params.get(k) != v for o in cands)}) or ["settings"]
    return f"{who}: {'/'.join(varied)} sweep ({len(cands)} settings)"


def sweep_prefix(label: str) -> str:
    """The part of a sweep's label before the swept parameters (the chosen point's row reuses it)."""
    return label.rsplit(": ", 1)[0] if " sweep (" in label else label
