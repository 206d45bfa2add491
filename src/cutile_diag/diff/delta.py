"""Structural deltas of one matched entry pair: attributes vs topology, in canonical names.

Display names: the before side uses its canonical names (``%v12``); the after side reuses
the name of the matched before value, and values that exist only after get ``%new<n>``, so
a reader sees the same name for the same value on both sides.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir_parsers.tileir_ops import op_class
from .graph import ROOT, IRGraph, erase_ssa, map_ssa, region_of, region_path, value_label
from .match import Matching
from .model import ADDED, ATTRIBUTE, MOVED, REMOVED, REWIRED, Aspect, RegionDelta, StructDelta

# ops whose removal/addition changes nothing when their results are unused
_PURE_CLASSES = frozenset({"float", "int", "compare", "conversion", "shape", "view", "assume",
                           "grid", "reduction"})
_PURE_OPS = frozenset({"make_token", "join_tokens"})


@dataclass
class Names:
    """Per-node display names (results, block args, id) for one side."""
    res: list[list[str]]
    bargs: list[list[list[str]]]
    cid: list[str]


def display_names(m: Matching) -> tuple[Names, Names]:
    """The display names of both sides: the before side's canonical names; after, the matched
    before value's name or ``%new<n>`` (see the module docstring)."""
    A, B = m.a, m.b
    na = Names(A.res_names, A.barg_names, A.cid)
    res: list[list[str]] = []
    bargs: list[list[list[str]]] = []
    cid: list[str] = []
    k = 0
    for v in range(B.size):
        a = m.b2a[v]
        own = B.res_names[v]
        if a >= 0 and len(A.res_names[a]) == len(own):
            res.append(A.res_names[a])
        elif own:
            base = f"%new{k}"
            k += 1
            res.append([f"{base}#{i}" for i in range(len(own))] if len(own) > 1 and "#" in own[0]
                       else ([base] if len(own) == 1 else [f"{base}_{i}" for i in range(len(own))]))
        else:
            res.append([])
        ba = []
        for r, names in enumerate(B.barg_names[v]):
            if a >= 0 and r < len(A.barg_names[a]) and len(A.barg_names[a][r]) == len(names):
                ba.append(A.barg_names[a][r])
            else:
                ba.append([f"%newb{k}_{i}" for i in range(len(names))])
                k += 1
        bargs.append(ba)
        if a >= 0:
            cid.append(A.cid[a])
        elif res[-1]:
            cid.append(res[-1][0].split("#")[0])
        else:
            cid.append(f"^new{k}")
            k += 1
    return na, Names(res, bargs, cid)


def text(g: IRGraph, names: Names, node: int) -> str:
    """Canonical text with the side's display names (one text per delta: a hot path when a
    tile-size change touches thousands of ops, so the name map is built here directly)."""
    kind = g.kind[node]
    if kind != "op":
        if kind == "arg":
            return f"{names.res[node][0]}: {g.entry.args[node - 1].type.text}"
        return g.label[node]
    op = g.ops[node]
    mapping: dict[str, str] = {}
    res = names.res[node]
    if op.result_group:
        base = res[0].split("#")[0] if res else op.result_group
        mapping[op.result_group] = base
        for k, r in enumerate(op.results):
            mapping[r] = f"{base}#{k}"
    else:
        for r, c in zip(op.results, res):
            mapping[r] = c
    bargs = names.bargs[node]
    for r, region in enumerate(op.regions):
        for a, c in zip(region.args, bargs[r] if r < len(bargs) else ()):
            mapping.setdefault(a.name, c)
    for (src, port), use in zip(g.operands[node], op.operands):
        if use in mapping or src < 0:
            continue
        mapping[use] = _disp_value(g, names, src, port)
    out = map_ssa(op.text, mapping)
    if op.regions and op.name in ("reduce", "scan"):
        a = op.regions[0].args
        bn = bargs[0] if bargs else []
        out += " (" + ", ".join(f"{bn[i] if i < len(bn) else x.name}: {x.type.text}"
                                for i, x in enumerate(a)) + ")"
    return out


def _source(g: IRGraph, node: int) -> str | None:
    op = g.ops[node] if node >= 0 else None
    if op is not None and op.source is not None:
        return f"{op.source.file}:{op.source.line}"
    return None


def is_dead(g: IRGraph, node: int) -> bool:
    """Whether ``node``'s results are unused and removing it changes nothing (a pure op without regions)."""
    op = g.ops[node]
    if op is None or not op.results or g.users[node]:
        return False
    if op.regions:
        return False
    return op_class(op.name) in _PURE_CLASSES or op.name in _PURE_OPS


def _flat_hints(h: dict) -> dict[str, object]:
    return {f"{arch}.{k}": v for arch, d in h.items() for k, v in d.items()}


def attribute_aspects(A: IRGraph, a: int, B: IRGraph, b: int) -> list[Aspect]:
    """Field-level differences of two matched ops (or entries / args)."""
    out: list[Aspect] = []
    if A.kind[a] == "entry":
        ha, hb = _flat_hints(A.entry.hints), _flat_hints(B.entry.hints)
        for k in sorted(set(ha) | set(hb)):
            if ha.get(k) != hb.get(k):
                out.append(Aspect(f"hints.{k}", ha.get(k), hb.get(k)))
        return out
    if A.kind[a] == "arg":
        ta, tb = A.entry.args[a - 1].type, B.entry.args[b - 1].type
        if ta.text != tb.text:
            out.append(Aspect("type", ta.text, tb.text))
        return out
    oa, ob = A.ops[a], B.ops[b]
    assert oa is not None and ob is not None
    if oa.keywords != ob.keywords:
        out.append(Aspect("keywords", list(oa.keywords), list(ob.keywords)))
    if oa.attrs != ob.attrs:           # (cheap tests first: thousands of pairs differ in types only)
        aa = {k: erase_ssa(v) for k, v in oa.attrs.items()}
        ab = {k: erase_ssa(v) for k, v in ob.attrs.items()}
        for k in sorted(set(aa) | set(ab)):
            if aa.get(k) != ab.get(k):
                out.append(Aspect(f"attrs.{k}", aa.get(k), ab.get(k)))
    if oa.hints != ob.hints:
        ha, hb = _flat_hints(oa.hints), _flat_hints(ob.hints)
        for k in sorted(set(ha) | set(hb)):
            if ha.get(k) != hb.get(k):
                out.append(Aspect(f"hints.{k}", ha.get(k), hb.get(k)))
    for what, la, lb in (("operand_types", oa.operand_types, ob.operand_types),
                         ("result_types", oa.result_types, ob.result_types)):
        for i in range(max(len(la), len(lb))):
            ta = la[i].text if i < len(la) else None
            tb = lb[i].text if i < len(lb) else None
            if ta != tb:
                out.append(Aspect(f"{what}[{i}]", ta, tb))
    for r in range(min(len(oa.regions), len(ob.regions))):
        xa = [x.type.text for x in oa.regions[r].args]
        xb = [x.type.text for x in ob.regions[r].args]
        for j in range(max(len(xa), len(xb))):
            ta = xa[j] if j < len(xa) else None
            tb = xb[j] if j < len(xb) else None
            if ta != tb:
                out.append(Aspect(f"block_args[{r}][{j}]", ta, tb))
    if len(oa.operands) != len(ob.operands):
        out.append(Aspect("operand_count", len(oa.operands), len(ob.operands)))
    if not out and A.label[a] != B.label[b]:
        out.append(Aspect("text", A.label[a], B.label[b]))
    return out


def compute_deltas(m: Matching, entry_name: str, start_id: int = 0) -> tuple[list[StructDelta], list[RegionDelta], Names, Names]:
    """The structural deltas (added, removed, moved, rewired, attribute) and per-region op counts
    of one matched entry pair, ids from ``start_id``, with both sides' display names."""
    A, B = m.a, m.b
    na, nb = display_names(m)
    out: list[StructDelta] = []
    nid = start_id

    def add(**kw) -> StructDelta:
        nonlocal nid
        d = StructDelta(id=nid, entry=entry_name, **kw)
        nid += 1
        out.append(d)
        return d

    def line(g: IRGraph, v: int) -> int | None:
        op = g.ops[v] if v >= 0 else None
        if op is not None:
            return op.line
        return g.entry.line if v == ROOT else None

    # entry and arguments: located at the kernel's def line
    def_line = next((f"{e.source.file}:{e.source.line}" for e in (B.entry, A.entry) if e.source), None)
    asp = attribute_aspects(A, ROOT, B, ROOT)
    if asp:
        add(kind=ATTRIBUTE, op="entry", region_path="", a=ROOT, b=ROOT, line_before=A.entry.line,
            line_after=B.entry.line, before=A.label[ROOT], after=B.label[ROOT], aspects=asp,
            source=def_line)
    na_args, nb_args = len(A.entry.args), len(B.entry.args)
    for i in range(max(na_args, nb_args)):
        if i < na_args and i < nb_args:
            asp = attribute_aspects(A, 1 + i, B, 1 + i)
            if asp:
                add(kind=ATTRIBUTE, op="arg", region_path="", a=1 + i, b=1 + i, line_before=A.entry.line,
                    line_after=B.entry.line, before=text(A, na, 1 + i), after=text(B, nb, 1 + i), aspects=asp,
                    source=def_line)
        elif i < na_args:
            add(kind=REMOVED, op="arg", region_path="", a=1 + i, line_before=A.entry.line,
                before=text(A, na, 1 + i), source=def_line)
        else:
            add(kind=ADDED, op="arg", region_path="", b=1 + i, line_after=B.entry.line,
                after=text(B, nb, 1 + i), source=def_line)

    a2b, b2a = m.a2b, m.b2a
    for a in A.op_nodes:
        b = a2b[a]
        if b < 0:
            add(kind=REMOVED, op=A.name[a], region_path=region_path(A, na.cid, a), a=a,
                line_before=line(A, a), source=_source(A, a), before=text(A, na, a),
                dead=is_dead(A, a))
            continue
        # most pairs are unchanged: where/source texts are only made for a delta
        moved = a2b[A.parent[a]] != B.parent[b] or A.region[a] != B.region[b]
        labelled = A.label[a] != B.label[b]
        wa, wb = A.operands[a], B.operands[b]
        # equal hashes: equal operand hashes position by position, so only block-argument
        # operands (whose owners must correspond) can still be rewired
        if not moved and not labelled and A.hash[a] == B.hash[b] and all(p >= 0 for _s, p in wa):
            continue
        src = _source(B, b) or _source(A, a)
        rp = region_path(B, nb.cid, b)
        if labelled:
            asp = attribute_aspects(A, a, B, b)
            add(kind=ATTRIBUTE, op=A.name[a], region_path=rp, a=a, b=b, line_before=line(A, a),
                line_after=line(B, b), source=src, before=text(A, na, a), after=text(B, nb, b),
                aspects=asp)
        # operands wired to a different value
        changed = []
        for pos in range(max(len(wa), len(wb))):
            if pos >= len(wa) or pos >= len(wb):
                changed.append(pos)
                continue
            (sa, pa), (sb, pb) = wa[pos], wb[pos]
            if pa != pb:
                changed.append(pos)
            elif sa < 0 or sb < 0:
                if not (sa < 0 and sb < 0):
                    changed.append(pos)
            elif pa < 0:                      # block argument: the owner must correspond
                if a2b[sa] != sb:
                    changed.append(pos)
            elif a2b[sa] != sb and A.hash[sa] != B.hash[sb]:
                # a hash-identical value (a twin) is the same computation
                changed.append(pos)
        if changed:
            fa = {}
            for pos in changed:
                va = A.value_name(*wa[pos]) if pos < len(wa) else None
                vb = B.value_name(*wb[pos]) if pos < len(wb) else None
                if pos < len(wa) and wa[pos][0] >= 0:
                    va = _disp_value(A, na, *wa[pos])
                if pos < len(wb) and wb[pos][0] >= 0:
                    vb = _disp_value(B, nb, *wb[pos])
                role = (A.roles[a][pos] if pos < len(A.roles[a]) else "") or "operand"
                fa[pos] = Aspect(f"operand[{pos}]", va, vb, category=role)
            add(kind=REWIRED, op=A.name[a], region_path=rp, a=a, b=b, line_before=line(A, a),
                line_after=line(B, b), source=src, before=text(A, na, a), after=text(B, nb, b),
                aspects=list(fa.values()))
        # moved to another region
        if moved:
            add(kind=MOVED, op=A.name[a], region_path=rp, a=a, b=b, line_before=line(A, a),
                line_after=line(B, b), source=src, before=region_path(A, na.cid, a) or "entry",
                after=rp or "entry")
    for b in B.op_nodes:
        if b2a[b] < 0:
            add(kind=ADDED, op=B.name[b], region_path=region_path(B, nb.cid, b), b=b,
                line_after=line(B, b), source=_source(B, b), after=text(B, nb, b),
                dead=is_dead(B, b))

    # per-region op counts
    regions: list[RegionDelta] = []
    seen_b: set[tuple[int, int]] = set()

    def counts(g: IRGraph, owner: int, ridx: int) -> dict[str, int]:
        c: dict[str, int] = {}
        for k in g.children[owner][ridx]:
            c[g.name[k]] = c.get(g.name[k], 0) + 1
        return c

    for owner in range(A.size):
        for ridx in range(len(A.children[owner])):
            ca = counts(A, owner, ridx)
            ob = a2b[owner]
            if ob >= 0 and ridx < len(B.children[ob]):
                cb = counts(B, ob, ridx)
                seen_b.add((ob, ridx))
            else:
                cb = {}
            if ca != cb:
                regions.append(RegionDelta(entry_name, region_of(A, na.cid, owner, ridx), ca, cb))
    for owner in range(B.size):
        for ridx in range(len(B.children[owner])):
            if (owner, ridx) not in seen_b:
                regions.append(RegionDelta(entry_name, region_of(B, nb.cid, owner, ridx), {},
                                           counts(B, owner, ridx)))
    return out, regions, na, nb


def _disp_value(g: IRGraph, names: Names, src: int, port: int) -> str:
    return value_label(names.res, names.bargs, names.cid, src, port)
