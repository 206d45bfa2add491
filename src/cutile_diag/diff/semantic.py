"""Name structural deltas in kernel-author terms.

Rules run in a fixed order and each marks the deltas (or single fields of an attribute
delta) it explains; whatever no rule explains is reported as an unclassified structural
change, so nothing is silently dropped.  Kinds:

``entry_hint``      occupancy / num_ctas (num_cta_in_cga) / num_worker_warps (…_per_cta) …
``op_hint``         latency / allow_tma on a load or store
``tile_shape``      tile sizes of views, MMA shapes (and every tile type that follows them);
                    identical view / MMA changes (unrolled copies, two views of one array)
                    are one change with a count
``padding``         ``padding_value`` of a view (PaddingMode)
``dim_map``         ``order=`` of a load/store (``dim_map`` of the partition view)
``traversal``       ``traversal_steps`` of a tiled view (``strided_view``)
``view_layout``     static shape/strides of a tensor view
``rounding``, ``flush_to_zero``, ``fast_acc``, ``memory_order``, ``memory_scope``,
``predicate``, ``bounds_check`` (``check_bounds``), ``assumption`` (``div_by`` / ``bounded``),
``constant``        a constant's value
``dtype``           element types: one change per mapping (``f32`` -> ``f16``; a
                    ``ptr<f32>`` argument counts as f32) with the arguments, views and ops
``mma_dtype``       MMA operand / accumulator types (e.g. a TF32 cast)
``access_pattern``  tile-view (TMA-able) load/store vs pointer gather/scatter, or the kind of view
``persistent_loop`` / ``loop_added`` / ``loop_removed``
``token_chain``     make_token / join_tokens added or removed, memory ops re-ordered by tokens
                    (one change per entry)
``math_function``   one math op replaced by another feeding the same users (``exp`` ->
                    ``exp2`` with the log2(e) factor folded in, ...)
``arg_type`` / ``signature``  kernel arguments
Unclassified (level ``structural``): ``ops_added``, ``ops_removed``, ``op_moved``,
``operand_rewired``, ``attribute``.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..ir_parsers.tileir_ops import LOADS, PTR_MEMORY, STORES, VIEW_MEMORY, op_class
from ..ir_parsers.tileir_types import IRType, parse_type
from .delta import Names
from .graph import ROOT, IRGraph
from .match import Matching
from .model import ADDED, ATTRIBUTE, MOVED, REMOVED, REWIRED, Aspect, Change, StructDelta

ENTRY_KNOBS = {"num_cta_in_cga": "num_ctas", "occupancy": "occupancy",
               "num_worker_warps_per_cta": "num_worker_warps"}
_MEMORY_ORDERS = frozenset({"weak", "relaxed", "acquire", "release", "acq_rel"})
_SCOPES = frozenset({"tl_blk", "device", "sys"})
_PREDICATES = frozenset({"equal", "not_equal", "less_than", "less_than_or_equal", "greater_than",
                         "greater_than_or_equal", "signed", "unsigned", "ordered", "unordered"})
_VIEW_MAKERS = frozenset({"make_partition_view", "make_gather_scatter_view", "make_strided_view",
                          "make_tensor_view"})
_MMA = frozenset({"mmaf", "mmai", "mmaf_scaled"})
_LOOPS = frozenset({"for", "loop"})
_MATH_CLASSES = frozenset({"float", "int"})
_TOKEN_OPS = frozenset({"make_token", "join_tokens"})
_VIEW_WORDS = {"partition_view": "tile view (partition_view)",
               "gather_scatter_view": "gather view (gather_scatter_view)",
               "strided_view": "strided tile view (strided_view)"}


def _fmt(v) -> str:
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return " ".join(str(x) for x in v) or "none"
    return str(v)


def _shape(t: IRType | None) -> str:
    if t is None:
        return "?"
    if t.kind == "tile":
        return "x".join("?" if d is None else str(d) for d in t.shape) or "scalar"
    ts = t.tile_shape
    return "x".join(str(d) for d in ts) if ts else "?"


def _type(text: str | None) -> IRType | None:
    if text is None:
        return None
    try:
        return parse_type(text)
    except Exception:
        return None


@dataclass
class _EntryCtx:
    name: str
    m: Matching
    deltas: list[StructDelta]
    na: Names
    nb: Names
    by_a: dict[int, list[StructDelta]] = field(default_factory=lambda: defaultdict(list))
    by_b: dict[int, list[StructDelta]] = field(default_factory=lambda: defaultdict(list))

    def __post_init__(self):
        for d in self.deltas:
            if d.a >= 0:
                self.by_a[d.a].append(d)
            if d.b >= 0:
                self.by_b[d.b].append(d)


class Classifier:
    """Names the structural deltas of each entry in kernel-author terms, rule by rule, marking
    which deltas each change explains."""
    def __init__(self, start_id: int = 0):
        self.changes: list[Change] = []
        self.next_id = start_id
        # (entry, kind, what, before, after) -> (change, ids of the deltas it covers)
        self._views: dict[tuple, tuple[Change, set[int]]] = {}
        # (entry, elem before, elem after) -> (change, noun -> delta ids)
        self._dtypes: dict[tuple, tuple[Change, dict[str, set[int]]]] = {}

    # -- helpers
    def change(self, kind: str, detail: str, ctx: _EntryCtx | None, delta: StructDelta | None = None,
               level: str = "semantic", **kw) -> Change:
        """Record a new change (next id); its op, region and lines default to ``delta``'s."""
        c = Change(id=self.next_id, kind=kind, level=level, detail=detail,
                   entry=ctx.name if ctx else None, **kw)
        if delta is not None:
            c.op = c.op or delta.op
            c.region_path = delta.region_path if c.region_path is None else c.region_path
            c.line_before = c.line_before if c.line_before is not None else delta.line_before
            c.line_after = c.line_after if c.line_after is not None else delta.line_after
            c.source = c.source or delta.source
        self.next_id += 1
        self.changes.append(c)
        return c

    @staticmethod
    def explain(c: Change, d: StructDelta, aspects: list[Aspect] | None = None) -> None:
        """Mark ``d`` (or only ``aspects`` of it) as explained by change ``c``."""
        if aspects is None:
            d.explained_by.append(c.id)
            for a in d.aspects:
                a.explained_by.append(c.id)
        else:
            for a in aspects:
                a.explained_by.append(c.id)
            if all(a.explained_by for a in d.aspects):
                # closed: by every change that explains one of its fields
                d.explained_by[:] = sorted(set(d.explained_by) | {i for a in d.aspects for i in a.explained_by})
        c.explains.append(d.id)

    @staticmethod
    def open_aspects(d: StructDelta) -> list[Aspect]:
        """The aspects of ``d`` no change explains yet."""
        return [a for a in d.aspects if not a.explained_by]

    @staticmethod
    def is_open(d: StructDelta) -> bool:
        """Whether ``d`` is still unexplained (an attribute delta: any aspect is)."""
        if d.explained_by:
            return False
        if d.kind == ATTRIBUTE:
            return any(not a.explained_by for a in d.aspects)
        return True

    # -- entry point
    def classify(self, ctx: _EntryCtx) -> None:
        """Run every rule on one entry (specific rules first, residual last), then add counts to the
        details of merged view and dtype changes."""
        self.entry_rules(ctx)
        self.loop_rules(ctx)
        self.access_rules(ctx)
        self.math_rules(ctx)
        self.mma_rules(ctx)
        self.token_rules(ctx)
        self.attribute_rules(ctx)
        self.residual(ctx)
        for key, (c, ids) in self._views.items():
            if len(ids) > 1 and not c.detail.endswith(")"):
                c.detail += f" ({len(ids)} {'MMAs' if key[2] == 'MMA' else 'views'})"
        for c, nouns in self._dtypes.values():
            parts = [f"{len(nouns[n])} {n}{'s' if len(nouns[n]) != 1 else ''}"
                     for n in ("argument", "view", "op") if nouns.get(n)]
            c.detail = c.detail.split(" (")[0] + f" ({', '.join(parts)})"

    # -- entry hints and arguments
    def entry_rules(self, ctx: _EntryCtx) -> None:
        """Entry hint changes (``entry_hint``) and argument type/signature changes."""
        for d in ctx.deltas:
            if d.op == "entry" and d.kind == ATTRIBUTE:
                for a in d.aspects:
                    _, arch, key = a.field.split(".", 2)
                    knob = ENTRY_KNOBS.get(key, key)
                    name = knob if knob == key else f"{knob} ({key})"
                    where = "" if arch == "default" else f" for {arch}"
                    c = self.change("entry_hint", f"{name}{where}: {_fmt(a.before)} → {_fmt(a.after)}",
                                    ctx, d, before=a.before, after=a.after, knob=knob,
                                    arch=None if arch == "default" else arch)
                    a.category = "entry_hint"
                    self.explain(c, d, [a])
            elif d.op == "arg":
                if d.kind == ATTRIBUTE:
                    a = d.aspects[0]
                    ta, tb = _type(a.before), _type(a.after)
                    if ta is not None and tb is not None and ta.kind == tb.kind == "tile" \
                            and ta.shape == tb.shape and ta.elem != tb.elem:
                        # f32 -> f16 arrays: one dtype change with the ops that follow
                        c = self._dtype(ctx, d, ta.elem, tb.elem, "argument")
                        a.category = "dtype"
                    else:
                        c = self.change("arg_type", f"argument {d.before.split(':')[0]}: {a.before} → {a.after}",
                                        ctx, d, before=a.before, after=a.after)
                        a.category = "arg_type"
                    self.explain(c, d)
                else:
                    c = self.change("signature", f"argument {'added' if d.kind == ADDED else 'removed'}: "
                                    f"{d.after or d.before}", ctx, d, before=d.before, after=d.after)
                    self.explain(c, d)

    def _dtype(self, ctx: _EntryCtx, d: StructDelta, ea: str | None, eb: str | None, noun: str) -> Change:
        """The one ``dtype`` change of an entry for an element-type mapping (``ptr<f32>``
        counts as f32): arguments, views and ops that changed with it are counted."""
        ba, bb = _base_elem(ea), _base_elem(eb)
        key = (ctx.name, ba, bb)
        hit = self._dtypes.get(key)
        if hit is None:
            c = self.change("dtype", f"element type {ba} → {bb}", ctx, d, before=ba, after=bb)
            hit = self._dtypes[key] = (c, defaultdict(set))
        hit[1][noun].add(d.id)
        return hit[0]

    # -- slices of unmatched ops (what a structural change brought along)
    @staticmethod
    def unmatched_slice(g: IRGraph, start: int, matched: list[int], *, down: bool = False) -> set[int]:
        """Unmatched ops reachable from ``start`` through unmatched ops (operands; users too with down)."""
        out: set[int] = set()
        stack = [start]
        while stack:
            v = stack.pop()
            for (src, _p) in g.operands[v]:
                if src > ROOT and g.kind[src] == "op" and matched[src] < 0 and src not in out and src != start:
                    out.add(src)
                    stack.append(src)
            if down:
                for (u, _pos) in g.users[v]:
                    if matched[u] < 0 and u not in out and u != start:
                        out.add(u)
                        stack.append(u)
        return out

    @classmethod
    def replaced_by(cls, inside, to_other: list[int], other: IRGraph, other_map: list[int]) -> set[int]:
        """Unmatched ops of the other side feeding the counterparts of ``inside`` (and their
        unmatched slices): what a loop added or removed on this side took the place of."""
        repl: set[int] = set()
        for x in inside:
            y = to_other[x]
            if y >= 0:
                for (src, _p) in other.operands[y]:
                    if src > ROOT and other_map[src] < 0:
                        repl.add(src)
                        repl |= cls.unmatched_slice(other, src, other_map)
        return repl

    def _explain_nodes(self, c: Change, ctx: _EntryCtx, a_nodes=(), b_nodes=(), kinds=(ADDED, REMOVED)) -> None:
        for v in a_nodes:
            for d in ctx.by_a.get(v, ()):
                if d.kind in kinds and not d.explained_by:
                    self.explain(c, d)
        for v in b_nodes:
            for d in ctx.by_b.get(v, ()):
                if d.kind in kinds and not d.explained_by:
                    self.explain(c, d)

    # -- loops
    def loop_rules(self, ctx: _EntryCtx) -> None:
        """Loops added or removed: a grid-stride loop is ``persistent_loop``."""
        A, B, m = ctx.m.a, ctx.m.b, ctx.m
        for d in list(ctx.deltas):
            if d.kind not in (ADDED, REMOVED) or d.op not in _LOOPS or d.explained_by:
                continue
            g, v, other = (B, d.b, m.b2a) if d.kind == ADDED else (A, d.a, m.a2b)
            persistent = _is_grid_stride(g, v)
            what = "while-style loop" if d.op == "loop" else "for loop"
            if persistent:
                kind = "persistent_loop"
                detail = (f"persistent grid-stride {what} added: a fixed grid of blocks strides over the tiles"
                          if d.kind == ADDED else
                          f"persistent grid-stride {what} removed: one tile per block")
            else:
                kind = "loop_added" if d.kind == ADDED else "loop_removed"
                detail = f"{what} {'added' if d.kind == ADDED else 'removed'}"
            text = d.after if d.kind == ADDED else d.before
            c = self.change(kind, detail, ctx, d,
                            before=None if d.kind == ADDED else text,
                            after=text if d.kind == ADDED else None, knob="persistent" if persistent else None)
            self.explain(c, d)
            inside = set(g.walk_region(v))
            # what the loop brought along: its bounds' computation, everything moved in,
            # new ops inside, operands now taken from the loop's block arguments
            bring = self.unmatched_slice(g, v, other) | {x for x in inside if other[x] < 0}
            for x in inside:
                bring |= self.unmatched_slice(g, x, other)
            side_nodes = bring | inside
            if d.kind == ADDED:
                self._explain_nodes(c, ctx, b_nodes=side_nodes, kinds=(ADDED, MOVED, REWIRED))
                # ops the loop replaced: unmatched before-side ops whose matched users moved in
                repl = self.replaced_by(inside, m.b2a, A, m.a2b)
                self._explain_nodes(c, ctx, a_nodes=repl, kinds=(REMOVED,))
            else:
                self._explain_nodes(c, ctx, a_nodes=side_nodes, kinds=(REMOVED, MOVED, REWIRED))
                for x in inside:
                    for dd in ctx.by_a.get(x, ()):
                        if dd.kind in (MOVED, REWIRED) and not dd.explained_by:
                            self.explain(c, dd)
                repl = self.replaced_by(inside, m.a2b, B, m.b2a)
                self._explain_nodes(c, ctx, b_nodes=repl, kinds=(ADDED,))
        # a matched loop changing between 'for' and 'loop' cannot happen (names differ);
        # a loop whose bounds now come from the grid is a persistence change
        for d in ctx.deltas:
            if d.kind == REWIRED and d.op == "for" and not d.explained_by:
                pa, pb = _is_grid_stride(A, d.a), _is_grid_stride(B, d.b)
                if pa != pb:
                    c = self.change("persistent_loop", f"loop {'became' if pb else 'is no longer'} a "
                                    f"persistent grid-stride loop", ctx, d,
                                    before=pa, after=pb, knob="persistent")
                    self.explain(c, d)

    # -- memory access pattern
    def access_rules(self, ctx: _EntryCtx) -> None:
        """Memory ops swapped between tile views and pointer gather/scatter, or between view kinds
        (``access_pattern``)."""
        A, B, m = ctx.m.a, ctx.m.b, ctx.m
        mem = VIEW_MEMORY | PTR_MEMORY
        removed = [d for d in ctx.deltas if d.kind == REMOVED and d.op in mem and not d.explained_by]
        added = [d for d in ctx.deltas if d.kind == ADDED and d.op in mem and not d.explained_by]
        used: set[int] = set()
        for r in removed:
            rk = _mem_kind(r.op)
            best = None
            for d in added:
                if d.id in used or _mem_kind(d.op) != rk or _access_class(d.op) == _access_class(r.op):
                    continue
                if _neighbours_agree(m, r.a, d.b, rk):
                    best = d
                    break
                if best is None:
                    best = d
            if best is None:
                continue
            used.add(best.id)
            before, after = _access_words(r.op, A, r.a), _access_words(best.op, B, best.b)
            c = self.change("access_pattern", f"{rk}: {before} → {after}",
                            ctx, best, before=before, after=after, line_before=r.line_before)
            self.explain(c, r)
            self.explain(c, best)
            sa = self.unmatched_slice(A, r.a, m.a2b)
            sb = self.unmatched_slice(B, best.b, m.b2a)
            self._explain_nodes(c, ctx, a_nodes=sa, b_nodes=sb)
            # matched ops now reading the new access (or feeding it) are rewired, not changed
            for (u, _pos) in B.users[best.b]:
                for dd in ctx.by_b.get(u, ()):
                    if dd.kind == REWIRED and not dd.explained_by:
                        self.explain(c, dd)
            for (src, _p) in B.operands[best.b]:
                for dd in ctx.by_b.get(src, ()):
                    if dd.kind == REWIRED and not dd.explained_by:
                        self.explain(c, dd)
        # the same memory op through another kind of view
        for d in ctx.deltas:
            if d.kind != ATTRIBUTE or d.op not in VIEW_MEMORY:
                continue
            for a in self.open_aspects(d):
                if not a.field.startswith("operand_types"):
                    continue
                ta, tb = _type(a.before), _type(a.after)
                if ta and tb and ta.kind != tb.kind and ta.kind in _VIEW_WORDS and tb.kind in _VIEW_WORDS:
                    c = self.change("access_pattern", f"{_mem_kind(d.op)}: {_VIEW_WORDS[ta.kind]} → "
                                    f"{_VIEW_WORDS[tb.kind]}", ctx, d,
                                    before=ta.kind, after=tb.kind)
                    a.category = "access_pattern"
                    self.explain(c, d, [a])
                    self._explain_view_maker(c, ctx, d, a)

    def _explain_view_maker(self, c: Change, ctx: _EntryCtx, d: StructDelta, a: Aspect) -> None:
        """The view op feeding ``d`` was replaced too (partition -> gather view)."""
        A, B, m = ctx.m.a, ctx.m.b, ctx.m
        for (src, _p) in B.operands[d.b]:
            if src > ROOT and B.name[src] in _VIEW_MAKERS:
                for dd in ctx.by_b.get(src, ()):
                    if not dd.explained_by:
                        self.explain(c, dd)
                self._explain_nodes(c, ctx, b_nodes=self.unmatched_slice(B, src, m.b2a))
        for (src, _p) in A.operands[d.a]:
            if src > ROOT and A.name[src] in _VIEW_MAKERS:
                for dd in ctx.by_a.get(src, ()):
                    if not dd.explained_by:
                        self.explain(c, dd)
                self._explain_nodes(c, ctx, a_nodes=self.unmatched_slice(A, src, m.a2b))
        for dd in ctx.by_b.get(d.b, ()):
            if dd.kind == REWIRED and not dd.explained_by:
                self.explain(c, dd)

    # -- one math op replaced by another (exp -> exp2 with log2(e) folded in, ...)
    def math_rules(self, ctx: _EntryCtx) -> None:
        """One math op replaced by another feeding the same users (``math_function``, e.g. exp -> exp2)."""
        A, B, m = ctx.m.a, ctx.m.b, ctx.m
        removed = [d for d in ctx.deltas if d.kind == REMOVED and not d.explained_by
                   and op_class(d.op) in _MATH_CLASSES]
        added = [d for d in ctx.deltas if d.kind == ADDED and not d.explained_by
                 and op_class(d.op) in _MATH_CLASSES]
        used: set[int] = set()
        for r in removed:
            oa = A.ops[r.a]
            for x in added:
                if x.id in used or x.op == r.op:
                    continue
                ob = B.ops[x.b]
                if [t.text for t in oa.result_types] != [t.text for t in ob.result_types]:
                    continue
                # the replacement feeds the same (matched) users at the same positions
                ua = {(m.a2b[u], pos) for (u, pos) in A.users[r.a] if m.a2b[u] >= 0}
                if not ua or not ua <= set(B.users[x.b]):
                    continue
                used.add(x.id)
                sb = self.unmatched_slice(B, x.b, m.b2a)
                sa = self.unmatched_slice(A, r.a, m.a2b)
                scale = _log2e_scale(B, x.b, sb) if (r.op, x.op) == ("exp", "exp2") else None
                detail = f"{r.op} → {x.op}"
                if scale:
                    detail += f" (argument multiplied by log2(e) = {scale})"
                elif (r.op, x.op) == ("exp2", "exp") and _log2e_scale(A, r.a, sa):
                    detail += " (log2(e) factor removed)"
                c = self.change("math_function", detail, ctx, x, before=r.op, after=x.op,
                                line_before=r.line_before, knob=f"{r.op}->{x.op}")
                self.explain(c, r)
                self.explain(c, x)
                self._explain_nodes(c, ctx, a_nodes=sa, b_nodes=sb)
                for (u, _pos) in B.users[x.b]:
                    for dd in ctx.by_b.get(u, ()):
                        if dd.kind == REWIRED and not dd.explained_by:
                            self.explain(c, dd)
                break

    # -- MMA operand types
    def mma_rules(self, ctx: _EntryCtx) -> None:
        """MMA operand or accumulator types changed (``mma_dtype``)."""
        A, B, m = ctx.m.a, ctx.m.b, ctx.m
        for d in ctx.deltas:
            if d.kind != ATTRIBUTE or d.op not in _MMA:
                continue
            oa, ob = A.ops[d.a], B.ops[d.b]
            ea = [t.elem for t in oa.operand_types]
            eb = [t.elem for t in ob.operand_types]
            if ea == eb:
                continue
            before, after = _mma_words(oa), _mma_words(ob)
            c = self.change("mma_dtype", f"MMA types {before} → {after}", ctx, d,
                            before=before, after=after)
            asp = []
            for a in self.open_aspects(d):
                ta, tb = _type(a.before), _type(a.after)
                if ta is not None and tb is not None and ta.elem != tb.elem:
                    a.category = "mma_dtype"
                    asp.append(a)
            self.explain(c, d, asp)
            # casts inserted in front of the MMA
            for (src, _p) in B.operands[d.b]:
                if src > ROOT and m.b2a[src] < 0:
                    self._explain_nodes(c, ctx, b_nodes={src} | self.unmatched_slice(B, src, m.b2a))
            for (src, _p) in A.operands[d.a]:
                if src > ROOT and m.a2b[src] < 0:
                    self._explain_nodes(c, ctx, a_nodes={src} | self.unmatched_slice(A, src, m.a2b))
            for dd in ctx.by_b.get(d.b, ()):
                if dd.kind == REWIRED and not dd.explained_by:
                    self.explain(c, dd)

    # -- token chains
    def token_rules(self, ctx: _EntryCtx) -> None:
        """make_token / join_tokens added or removed and memory ops ordered after another
        token: one ``token_chain`` change per entry, listing what moved."""
        A, B = ctx.m.a, ctx.m.b
        ops: list[StructDelta] = []
        reordered: list[tuple[StructDelta, Aspect]] = []
        for d in ctx.deltas:
            if d.explained_by or d.dead:
                continue
            if d.kind in (ADDED, REMOVED) and d.op in _TOKEN_OPS:
                ops.append(d)
            elif d.kind == REWIRED:
                tok = [a for a in d.aspects if _is_token_operand(A, d.a, a) or _is_token_operand(B, d.b, a)]
                if tok and len(tok) == len(d.aspects):
                    reordered.append((d, tok[0]))
        if not ops and not reordered:
            return
        parts = []
        for kind in (ADDED, REMOVED):
            counts: dict[str, int] = {}
            for d in ops:
                if d.kind == kind:
                    counts[d.op] = counts.get(d.op, 0) + 1
            parts += [f"{n} {op} {kind}" for op, n in sorted(counts.items())]
        if reordered:
            names = sorted({d.op for d, _a in reordered})
            parts.append(f"{len(reordered)} op{'s' if len(reordered) != 1 else ''} ordered after another "
                         f"token ({', '.join(names)})")
        first = (ops or [d for d, _a in reordered])[0]
        before = [d.before for d in ops if d.kind == REMOVED] + [f"{d.op} after {a.before}" for d, a in reordered]
        after = [d.after for d in ops if d.kind == ADDED] + [f"{d.op} after {a.after}" for d, a in reordered]
        c = self.change("token_chain", "memory ordering changed: " + "; ".join(parts), ctx, first,
                        before=before, after=after)
        for d in ops:
            self.explain(c, d)
        for d, _a in reordered:
            self.explain(c, d)

    # -- attributes, field by field
    def attribute_rules(self, ctx: _EntryCtx) -> None:
        """Attribute deltas: tile shapes, dtypes, view layouts and op hints, each merged across the
        ops one source change touches."""
        shape_only: list[tuple[StructDelta, Aspect, str, str]] = []
        dtype_only: dict[tuple[str, str], list[tuple[StructDelta, Aspect]]] = defaultdict(list)
        view_changes: dict[int, list[Change]] = defaultdict(list)    # B node -> changes on its result
        tile_changes: list[Change] = []
        attr_ds = [d for d in ctx.deltas if d.kind == ATTRIBUTE and d.op not in ("entry", "arg")]
        # view-making ops first: their type changes explain their users' operand types
        attr_ds.sort(key=lambda d: 0 if d.op in _VIEW_MAKERS else 1)
        for d in attr_ds:
            # result types first: a view op's own operand-type copy then follows its result
            for a in sorted(self.open_aspects(d), key=lambda x: 0 if x.field.startswith("result_types") else 1):
                f = a.field
                if f.startswith("hints."):
                    _, arch, key = f.split(".", 2)
                    where = "" if arch == "default" else f" for {arch}"
                    c = self.change("op_hint", f"{d.op} {key}{where}: {_fmt(a.before)} → {_fmt(a.after)}"
                                   , ctx, d, before=a.before, after=a.after, knob=key,
                                    arch=None if arch == "default" else arch)
                    a.category = "op_hint"
                    self.explain(c, d, [a])
                elif f == "keywords":
                    self._keywords(ctx, d, a)
                elif f.startswith("attrs."):
                    self._attr(ctx, d, a)
                elif f.startswith(("operand_types", "result_types", "block_args")):
                    self._types(ctx, d, a, view_changes, tile_changes, shape_only, dtype_only)
                elif f == "operand_count":
                    pass   # left to the residual rule
        # tile-shape-only changes of ordinary ops follow the view/MMA tile changes
        if shape_only:
            if tile_changes:
                for d, a, _sa, _sb in shape_only:
                    a.category = "tile_shape"
                    self.explain(tile_changes[0], d, [a])
            else:
                groups: dict[tuple[str, str], list[tuple[StructDelta, Aspect]]] = defaultdict(list)
                for d, a, sa, sb in shape_only:
                    groups[(sa, sb)].append((d, a))
                for (sa, sb), items in groups.items():
                    d0 = items[0][0]
                    c = self.change("tile_shape", f"tile shape {sa} → {sb} ({len({d.id for d, _ in items})} ops)",
                                    ctx, d0, before=sa, after=sb)
                    for d, a in items:
                        a.category = "tile_shape"
                        self.explain(c, d, [a])
        for (ea, eb), items in dtype_only.items():
            for d, a in items:
                c = self._dtype(ctx, d, ea, eb, "op")
                a.category = "dtype"
                self.explain(c, d, [a])

    def _keywords(self, ctx: _EntryCtx, d: StructDelta, a: Aspect) -> None:
        before, after = set(a.before or []), set(a.after or [])
        cats: dict[str, tuple[list[str], list[str]]] = {}
        for w in sorted(before ^ after):
            if w == "flush_to_zero":
                cat = "flush_to_zero"
            elif w == "fast_acc":
                cat = "fast_acc"
            elif w in _MEMORY_ORDERS:
                cat = "memory_order"
            elif w in _SCOPES:
                cat = "memory_scope"
            elif w in _PREDICATES:
                cat = "predicate"
            else:
                cat = "attribute"
            cats.setdefault(cat, ([], []))
            (cats[cat][0] if w in before else cats[cat][1]).append(w)
        if not cats and a.before != a.after:
            cats["attribute"] = (list(a.before or []), list(a.after or []))   # same words, new order
        a.category = ",".join(sorted(cats))
        for cat, (gone, new) in cats.items():
            if cat in ("flush_to_zero", "fast_acc"):
                b, af = bool(gone), bool(new)
                detail = f"{d.op} {cat}: {_fmt(b)} → {_fmt(af)}"
            else:
                b = [w for w in (a.before or []) if w in gone or _cat_of(w) == cat]
                af = [w for w in (a.after or []) if w in new or _cat_of(w) == cat]
                detail = f"{d.op} {cat.replace('_', ' ')}: {_fmt(b)} → {_fmt(af)}"
            level = "structural" if cat == "attribute" else "semantic"
            c = self.change(cat, detail, ctx, d, level=level, before=b, after=af)
            self.explain(c, d, [a])

    def _attr(self, ctx: _EntryCtx, d: StructDelta, a: Aspect) -> None:
        key = a.field.split(".", 1)[1]
        if key == "rounding":
            cat, what = "rounding", "rounding mode"
            b = a.before or "nearest_even"
            af = a.after or "nearest_even"
        elif key == "value" and d.op == "constant":
            cat, what, b, af = "constant", "constant", a.before, a.after
        elif d.op == "assume":
            cat, what, b, af = "assumption", f"assume {key}", a.before, a.after
        elif key == "inbounds":
            cat, what, b, af = "bounds_check", "inbounds (check_bounds=False)", a.before, a.after
        else:
            cat, what, b, af = "attribute", key, a.before, a.after
        level = "structural" if cat == "attribute" else "semantic"
        c = self.change(cat, f"{d.op} {what}: {_fmt(b)} → {_fmt(af)}", ctx, d,
                        level=level, before=b, after=af)
        a.category = cat
        self.explain(c, d, [a])

    def _types(self, ctx, d, a, view_changes, tile_changes, shape_only, dtype_only) -> None:
        A, B = ctx.m.a, ctx.m.b
        ta, tb = _type(a.before), _type(a.after)
        if ta is None or tb is None:
            c = self.change("attribute", f"{d.op} {a.field}: {_fmt(a.before)} → {_fmt(a.after)}", ctx, d,
                            level="structural", before=a.before, after=a.after)
            self.explain(c, d, [a])
            return
        # an operand typed by a changed view op: explained by that op's change (ops printed
        # without '->' list their result type among the operand types: same thing)
        if a.field.startswith("operand_types"):
            own = [x for x in d.aspects if x.field.startswith("result_types") and
                   (x.before, x.after) == (a.before, a.after) and x.explained_by]
            if own:
                a.category = own[0].category
                for cid in own[0].explained_by:
                    c = self.changes[cid - self.changes[0].id] if self.changes else None
                    if c is not None and c.id == cid:
                        self.explain(c, d, [a])
                return
            src = _operand_src(B, d.b, a)
            if src is not None and view_changes.get(src):
                a.category = "view"
                for c in view_changes[src]:
                    self.explain(c, d, [a])
                return
        if ta.kind in _VIEW_WORDS and tb.kind == ta.kind:
            pa, pb = ta.param, tb.param
            made = []
            for key in sorted(set(pa) | set(pb)):
                if pa.get(key) == pb.get(key):
                    continue
                if key == "tile":
                    cat, what = "tile_shape", "tile"
                    b_, a_ = _shape(ta), _shape(tb)
                elif key == "padding_value":
                    cat, what = "padding", "padding"
                    b_, a_ = pa.get(key) or "undetermined", pb.get(key) or "undetermined"
                elif key == "dim_map":
                    cat, what = "dim_map", "dim_map (order)"
                    b_, a_ = pa.get(key) or "identity", pb.get(key) or "identity"
                elif key in ("traversal_strides", "traversal_steps"):
                    cat, what = "traversal", "traversal strides"
                    b_, a_ = pa.get(key), pb.get(key)
                else:
                    cat, what = "view_layout", key
                    b_, a_ = pa.get(key), pb.get(key)
                made.append((cat, what, b_, a_))
            ia, ib = ta.inner, tb.inner
            if ia is not None and ib is not None and ia.text != ib.text:
                if ia.elem != ib.elem:
                    dt = self._dtype(ctx, d, ia.elem, ib.elem, "view")
                    self.explain(dt, d, [a])
                    if a.field.startswith("result_types") and d.b >= 0:
                        view_changes[d.b].append(dt)
                if ia.shape != ib.shape or ia.params != ib.params:
                    made.append(("view_layout", "tensor view", ia.text, ib.text))
            for cat, what, b_, a_ in made:
                # one change per distinct view change: several views of one array (the
                # num_tiles view and the load's) change together
                key = (ctx.name, cat, what, str(b_), str(a_))
                hit = self._views.get(key)
                if hit is None:
                    noun = _view_noun(d.op)
                    c = self.change(cat, f"{noun} {what} {_fmt(b_)} → {_fmt(a_)}", ctx, d,
                                    before=b_, after=a_)
                    self._views[key] = (c, {d.id})
                else:
                    c = hit[0]
                    hit[1].add(d.id)
                self.explain(c, d, [a])
                if cat == "tile_shape":
                    tile_changes.append(c)
                if a.field.startswith("result_types") and d.b >= 0:
                    view_changes[d.b].append(c)
            a.category = ",".join(sorted({x[0] for x in made} | ({"dtype"} if a.explained_by else set()))) or "view"
            if not made and not a.explained_by:
                c = self.change("view_layout", f"{d.op} view type {a.before} → {a.after}", ctx, d,
                                before=a.before, after=a.after)
                self.explain(c, d, [a])
            return
        if ta.kind == tb.kind == "tensor_view":
            if ta.elem != tb.elem:
                c = self._dtype(ctx, d, ta.elem, tb.elem, "view")
                self.explain(c, d, [a])
                if a.field.startswith("result_types") and d.b >= 0:
                    view_changes[d.b].append(c)
            if ta.shape != tb.shape or ta.params != tb.params:
                before = f"{_shape_dims(ta)}, {', '.join(f'{k}={v}' for k, v in ta.params)}"
                after = f"{_shape_dims(tb)}, {', '.join(f'{k}={v}' for k, v in tb.params)}"
                key = (ctx.name, "view_layout", "tensor view", before, after)
                hit = self._views.get(key)
                if hit is None:
                    c = self.change("view_layout", f"tensor view layout {before} → {after}", ctx, d,
                                    before=before, after=after)
                    self._views[key] = (c, {d.id})
                else:
                    c = hit[0]
                    hit[1].add(d.id)
                self.explain(c, d, [a])
                if a.field.startswith("result_types") and d.b >= 0:
                    view_changes[d.b].append(c)
            a.category = "view"
            return
        if ta.kind == "tile" and tb.kind == "tile":
            if ta.elem != tb.elem:
                dtype_only[(ta.elem or "?", tb.elem or "?")].append((d, a))
            if ta.shape != tb.shape:
                if d.op in _MMA and a.field.startswith("result_types"):
                    oa, ob = A.ops[d.a], B.ops[d.b]
                    sa, sb = _mma_shape(oa), _mma_shape(ob)
                    key = (ctx.name, "tile_shape", "MMA", sa, sb)      # one change for unrolled MMAs
                    hit = self._views.get(key)
                    if hit is None:
                        c = self.change("tile_shape", f"MMA shape (MxNxK) {sa} → {sb}", ctx, d, before=sa, after=sb)
                        self._views[key] = (c, {d.id})
                        tile_changes.append(c)
                    else:
                        c = hit[0]
                        hit[1].add(d.id)
                    a.category = "tile_shape"
                    self.explain(c, d, [a])
                elif ta.elem == tb.elem:
                    shape_only.append((d, a, _shape(ta), _shape(tb)))
                else:
                    shape_only.append((d, a, _shape(ta), _shape(tb)))
            return
        c = self.change("attribute", f"{d.op} type {a.before} → {a.after}", ctx, d,
                        level="structural", before=a.before, after=a.after)
        self.explain(c, d, [a])

    # -- what no rule explained
    def residual(self, ctx: _EntryCtx) -> None:
        """What no rule explained, as unclassified structural changes (ops added/removed, moved,
        rewired, attributes); dead ops are left out."""
        A, B = ctx.m.a, ctx.m.b
        for kind, side in ((ADDED, "b"), (REMOVED, "a")):
            open_ds = {getattr(d, side): d for d in ctx.deltas
                       if d.kind == kind and self.is_open(d) and not d.dead}
            g = B if side == "b" else A
            seen: set[int] = set()
            for v in sorted(open_ds):
                if v in seen:
                    continue
                comp = [v]
                seen.add(v)
                stack = [v]
                while stack:
                    x = stack.pop()
                    nbrs = [s for (s, _p) in g.operands[x] if s >= 0] + [u for (u, _p) in g.users[x]]
                    for y in nbrs:
                        if y in open_ds and y not in seen:
                            seen.add(y)
                            comp.append(y)
                            stack.append(y)
                comp.sort()
                ds = [open_ds[x] for x in comp]
                names = ", ".join(sorted({d.op for d in ds}))
                word = "added" if kind == ADDED else "removed"
                c = self.change(f"ops_{word}", f"{len(ds)} op{'s' if len(ds) != 1 else ''} {word}: {names}",
                                ctx, ds[0], level="structural",
                                before=None if kind == ADDED else [d.before for d in ds],
                                after=[d.after for d in ds] if kind == ADDED else None)
                for d in ds:
                    self.explain(c, d)
        for d in ctx.deltas:
            if not self.is_open(d) or d.dead:
                continue
            if d.kind == MOVED:
                c = self.change("op_moved", f"{d.op} moved from {d.before} to {d.after}",
                                ctx, d, level="structural", before=d.before, after=d.after)
                self.explain(c, d)
            elif d.kind == REWIRED:
                a = d.aspects[0]
                c = self.change("operand_rewired", f"{d.op} {a.field} {a.category}: {a.before} → {a.after}"
                               , ctx, d, level="structural", before=d.before, after=d.after)
                self.explain(c, d)
            elif d.kind == ATTRIBUTE:
                for a in self.open_aspects(d):
                    c = self.change("attribute", f"{d.op} {a.field}: {_fmt(a.before)} → {_fmt(a.after)}"
                                   , ctx, d, level="structural", before=a.before, after=a.after)
                    self.explain(c, d, [a])


# ---------------------------------------------------------------------------------------
# small predicates

def _cat_of(w: str) -> str:
    if w in _MEMORY_ORDERS:
        return "memory_order"
    if w in _SCOPES:
        return "memory_scope"
    if w in _PREDICATES:
        return "predicate"
    return ""


def _is_grid_stride(g: IRGraph, v: int) -> bool:
    """A loop starting at the block id and stepping by the number of blocks."""
    if v < 0 or g.ops[v] is None:
        return False
    op = g.ops[v]

    def from_op(src: int, names: tuple[str, ...], depth: int = 3) -> bool:
        if src <= ROOT or g.kind[src] != "op":
            return False
        if g.name[src] in names:
            return True
        if depth == 0:
            return False
        return any(from_op(s, names, depth - 1) for (s, _p) in g.operands[src])

    srcs = dict(zip(op.operand_roles, (s for s, _p in g.operands[v])))
    if op.name == "for":
        return from_op(srcs.get("lower", -1), ("get_tile_block_id",)) and \
            from_op(srcs.get("step", -1), ("get_num_tile_blocks",))
    if op.name == "loop":
        inits = [s for (s, _p), r in zip(g.operands[v], op.operand_roles) if r == "init"]
        starts = any(from_op(s, ("get_tile_block_id",)) for s in inits)
        steps = any(g.name[x] == "get_num_tile_blocks" or
                    any(g.name[s] == "get_num_tile_blocks" for (s, _p) in g.operands[x] if s > ROOT)
                    for x in g.walk_region(v))
        return starts and steps
    return False


def _base_elem(e: str | None) -> str:
    """``ptr<f32>`` -> ``f32``: a pointer's element type changes with its array's."""
    e = e or "?"
    while e.startswith("ptr<") and e.endswith(">"):
        e = e[4:-1]
    return e


def _shape_dims(t: IRType) -> str:
    return "x".join("?" if x is None else str(x) for x in t.shape) or "scalar"


def _log2e_scale(g: IRGraph, v: int, among: set[int]) -> str | None:
    """The printed constant when ``v``'s argument is ``x * c`` with c == log2(e) (via
    reshape/broadcast of a scalar constant), looking only at ops in ``among``."""
    for (src, _p) in g.operands[v]:
        if src not in among or g.name[src] != "mulf":
            continue
        for (k, _q) in g.operands[src]:
            seen = 0
            while k in among and g.name[k] in ("broadcast", "reshape") and seen < 4:
                k = g.operands[k][0][0] if g.operands[k] else -1
                seen += 1
            if k in among and g.name[k] == "constant":
                val = (g.ops[k].attrs.get("value") or "").split(":")[-1].strip()
                try:
                    if abs(float(val) - 1.4426950408889634) < 1e-6:
                        return val
                except ValueError:
                    pass
    return None


def _mem_kind(op: str) -> str:
    if op in LOADS:
        return "load"
    if op in STORES:
        return "store"
    return "atomic"


def _access_class(op: str) -> str:
    return "view" if op in VIEW_MEMORY else "ptr"


def _access_words(op: str, g: IRGraph, v: int) -> str:
    if op in VIEW_MEMORY:
        kinds = [t.kind for t in g.ops[v].operand_types if t.kind in _VIEW_WORDS] if v >= 0 else []
        view = _VIEW_WORDS.get(kinds[0], "view") if kinds else "view"
        tma = ", TMA-eligible" if kinds and kinds[0] == "partition_view" else ""
        return f"{view} {op}{tma}"
    if op in ("load_ptr_tko",):
        return "pointer gather load_ptr_tko (per-element addresses)"
    if op in ("store_ptr_tko",):
        return "pointer scatter store_ptr_tko (per-element addresses)"
    return op


def _neighbours_agree(m: Matching, a: int, b: int, kind: str) -> bool:
    A, B = m.a, m.b
    if kind == "load":
        ub = {u for (u, _p) in B.users[b]}
        return any(m.a2b[u] in ub for (u, _p) in A.users[a] if m.a2b[u] >= 0)
    srcs_b = {s for (s, _p) in B.operands[b]}
    return any(m.a2b[s] in srcs_b for (s, _p) in A.operands[a] if s > ROOT and m.a2b[s] >= 0)


def _is_token_operand(g: IRGraph, v: int, a: Aspect) -> bool:
    if v < 0 or not a.field.startswith("operand["):
        return False
    pos = int(a.field[8:-1])
    ops = g.operands[v]
    return pos < len(ops) and ops[pos] in g.token_values


def _operand_src(g: IRGraph, v: int, a: Aspect) -> int | None:
    """The node defining the operand whose type an ``operand_types[i]`` aspect describes."""
    op = g.ops[v]
    if op is None:
        return None
    # operand types are printed for the non-index operands in order; match by type text
    want = a.after
    for (src, port) in g.operands[v]:
        if src > ROOT and port >= 0 and g.ops[src] is not None:
            rts = g.ops[src].result_types
            if port < len(rts) and rts[port].text == want:
                return src
    return None


def _mma_words(op) -> str:
    e = [t.elem or "?" for t in op.operand_types]
    if len(e) >= 3:
        return f"{e[0]} x {e[1]} + {e[2]}"
    return " x ".join(e)


def _mma_shape(op) -> str:
    ts = op.operand_types
    if len(ts) >= 2 and len(ts[0].shape) == 2 and len(ts[1].shape) == 2:
        m_, k = ts[0].shape
        _k2, n = ts[1].shape
        return f"{m_}x{n}x{k}"
    return _shape(op.result_types[0]) if op.result_types else "?"


def _view_noun(op: str) -> str:
    return {"make_partition_view": "view", "make_gather_scatter_view": "gather view",
            "make_strided_view": "strided view", "make_tensor_view": "tensor view"}.get(op, op)


def classify(entries: list[tuple[str, Matching, list[StructDelta], Names, Names]], start_id: int = 0) -> list[Change]:
    """The changes of every matched entry, ids from ``start_id``."""
    cl = Classifier(start_id)
    for name, m, deltas, na, nb in entries:
        cl.classify(_EntryCtx(name, m, deltas, na, nb))
    return cl.changes
