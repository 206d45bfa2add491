"""Read once: a row loaded in every pass of a multi-pass kernel is loaded once when the
pass loops run once (extent <= tile).

Two- and three-pass row kernels (RMS/layer norm: statistics, then normalise) loop over
the row's column tiles in each pass, loading the same tile again each time.  When the
whole row fits one tile, every pass loop runs exactly once and the second and third
loads re-read DRAM/L2 for data the block already holds.  The rewrite keeps the general
loops and adds a one-pass path selected by the pass count::

    if num_tiles == 1:            # the row fits one tile: load it once
        j = 0
        x_tile = ct.load(x, index=(row, j), ...)
        <pass 1 body, the load replaced by x_tile>
        <statements between the passes>
        <pass 2 body, the load replaced by x_tile>
    else:
        <the original passes>

Applicable when two or more consecutive ``for j in range(0, n)`` (or ``range(0, n, T)``)
loops (same range, same loop variable) contain the same ``ct.load`` or ``ct.gather`` (same array, index, shape and options), the
array is not written in the region, ``n`` depends only on names bound before the loops and
so does the load — or its index is computed in each pass by the same statement from the
loop variable (a gather's ``cols = j * T + lanes``): the one-pass path computes it first, for
``j = 0``, so a gathered row is read once without converting it to tile loads (A) first.
When ``n`` is made of ``ct.Constant`` parameters (``ct.cdiv(N, T)``,
``(N + T - 1) // T``) cuTile picks the path when it compiles; when it depends on a
run-time scalar the ``if`` is a run-time branch (cuTile compiles both paths and merges the
names both assign: tiles and scalars alike, checked with tileiras).  Otherwise it refuses
and says which condition failed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from ..source.analysis import assignments, reaching_value, taken_names
from ..source.model import (Kernel, code, expr, find_all, fresh_name, lines_text, names_in, positional, refuse,
                             rewrite, stmt)
from .base import Plan, Transform


def _norm(node: cst.CSTNode) -> str:
    return "".join(code(node).split())


def _range_count(k: Kernel, f: cst.For) -> cst.BaseExpression | None:
    """The trip count of ``for v in range(n)`` / ``range(0, n)`` (``n``) and of
    ``range(0, n, T)`` (``ct.cdiv(n, T)``); the first ``v`` is 0 in each."""
    it = f.iter
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range"
            and all(a.keyword is None and not a.star for a in it.args)):
        return None
    args = [a.value for a in it.args]
    if len(args) == 1:
        return args[0]
    if len(args) >= 2 and code(args[0]) == "0":
        return args[1] if len(args) == 2 else expr(f"{k.ct.ref('cdiv')}({code(args[1])}, {code(args[2])})")
    return None


def _pass_defs(dep: set[str], fors: list[cst.For], inner_bound: set[str]) -> list[cst.SimpleStatementLine] | None:
    """The statements that bind ``dep`` in the passes (a gather's ``cols = j * T + lanes``),
    when each name is assigned once per pass, at the top level of its body, by the same
    statement in every pass, from the loop variable and names bound before the loops only;
    else None.  Empty when ``dep`` is."""
    out = []
    for name in sorted(dep):
        texts = set()
        for f in fors:
            found = [s for s in f.body.body if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                     and isinstance(s.body[0], cst.Assign) and len(s.body[0].targets) == 1
                     and isinstance(s.body[0].targets[0].target, cst.Name)
                     and s.body[0].targets[0].target.value == name]
            if len(found) != 1 or len(assignments(f.body).get(name, [])) != 1 \
                    or names_in(found[0].body[0].value) & inner_bound:
                return None
            texts.add(_norm(found[0]))
            if len(texts) == 1 and f is fors[0]:
                first = found[0]
        if len(texts) != 1:
            return None
        out.append(first)
    return out


class _Replace(cst.CSTTransformer):
    def __init__(self, texts: dict[str, str]):
        super().__init__()
        self.texts = texts

    def leave_Call(self, original, updated):
        name = self.texts.get(_norm(original))
        return cst.Name(name) if name else updated


@dataclass(frozen=True)
class ReadOnce(Transform):
    """A one-pass path for multi-pass row kernels: when every pass loop runs once, the row's tile is loaded once and
    shared by the passes."""
    name: str = "read_once"
    playbook_id: str = "W"
    summary: str = "multi-pass row kernels: load the row once when every pass loop runs once (extent <= tile)"
    PARAMS: ClassVar[dict[str, Any]] = {}
    ENABLED_BY: ClassVar[tuple[str, ...]] = ("gather_to_load",)

    def _plan(self, k: Kernel, params) -> Plan:
        why_not: list[str] = []
        for block in [k.func.body] + [s.body for s in find_all(k.func.body, lambda x: isinstance(x, cst.For))]:
            plan = self._plan_block(k, block, why_not)
            if plan is not None:
                return plan
        refuse("; ".join(why_not) if why_not else
               f"{k.name} has no two consecutive pass loops over the same range loading the same tile")

    def _plan_block(self, k: Kernel, block: cst.IndentedBlock, why_not: list[str]) -> Plan | None:
        body = list(block.body)
        loops = [i for i, s in enumerate(body) if isinstance(s, cst.For) and _range_count(k, s) is not None]
        # group loops over the same count and variable, separated only by straight-line code
        groups: list[list[int]] = []
        for i in loops:
            f = body[i]
            if groups:
                g = groups[-1]
                prev = body[g[-1]]
                between = body[g[-1] + 1:i]
                if _norm(_range_count(k, prev)) == _norm(_range_count(k, f)) and _norm(prev.target) == _norm(f.target) \
                        and all(isinstance(s, cst.SimpleStatementLine) for s in between):
                    g.append(i)
                    continue
            groups.append([i])
        for g in groups:
            if len(g) < 2:
                continue
            fors = [body[i] for i in g]
            lines = lines_text(k.line(f) for f in fors)
            loads: dict[str, cst.Call] = {}
            seen_in: dict[str, set[int]] = {}
            for n, f in enumerate(fors):
                for c in k.calls("load", "gather", root=f.body):
                    t = _norm(c)
                    loads.setdefault(t, c)
                    seen_in.setdefault(t, set()).add(n)
            shared = [t for t, ns in seen_in.items() if len(ns) >= 2]
            if not shared:
                why_not.append(f"the pass loops at {lines} load no tile in common")
                continue
            region = body[g[0]:g[-1] + 1]
            inner_bound, region_bound = set(), set()
            for s in region:
                if isinstance(s, cst.For):
                    inner_bound |= set(assignments(s.body))
                    region_bound |= names_in(s.target)
                region_bound |= set(assignments(s))
            written = {code(positional(c)[0].value) for s in region for c in k.calls("store", "scatter", root=s)
                       if positional(c)}
            keep, pre = [], []
            for t in shared:
                c = loads[t]
                arr = code(positional(c)[0].value)
                if arr in written:
                    why_not.append(f"{arr} is written between its loads at {lines}: the passes must re-read it")
                    continue
                dep = names_in(c) & inner_bound
                defs = _pass_defs(dep, [f for n, f in enumerate(fors) if n in seen_in[t]], inner_bound)
                if defs is None:
                    why_not.append(f"the load of {arr} at line {k.line(c)} depends on {', '.join(sorted(dep))} "
                                   f"computed inside the pass other than the same way in every pass from the "
                                   f"loop variable (convert gathers with gather_to_load first)")
                    continue
                pre.extend(d for d in defs if all(_norm(d) != _norm(p) for p in pre))
                keep.append(t)
            if not keep:
                continue
            n_expr = _range_count(k, fors[0])
            # the branch tests the count once, before the passes: every pass must run it as tested
            moved = names_in(n_expr) & region_bound
            if moved:
                why_not.append(f"the pass count `{code(n_expr)}` of the loops at {lines} depends on "
                               f"{', '.join(sorted(moved))}, assigned between or inside the passes")
                continue
            count = n_expr
            if isinstance(n_expr, cst.Name):
                count = reaching_value(k, n_expr.value, fors[0]) or n_expr
            static = names_in(count) - {k.ct.prefix.split(".")[0]} <= set(k.constant_params())
            return self._build(k, block, body, g, fors, [loads[t] for t in keep], n_expr, count, lines, static, pre)
        return None

    def _build(self, k, block, body, g, fors, loads, n_expr, count, lines, static, pre=()) -> Plan:
        taken = taken_names(k)
        names: dict[str, str] = {}
        hoist = []
        for c in loads:
            arr = code(positional(c)[0].value)
            v = fresh_name(taken, f"{arr.lower()}_tile")
            taken.add(v)
            names[_norm(c)] = v
            hoist.append(stmt(f"{v} = {code(c)}"))
        var = code(fors[0].target)
        # the indices a gather computes in its pass (``cols = j * T + lanes``) come first, for j = 0
        fast: list[cst.BaseStatement] = [stmt(f"{var} = 0"), *(p.with_changes(leading_lines=()) for p in pre), *hoist]
        for s in body[g[0]:g[-1] + 1]:
            if isinstance(s, cst.For):
                fast.extend(st.visit(_Replace(names)) for st in s.body.body)
            else:
                fast.append(s.visit(_Replace(names)))
        fast[0] = fast[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(
            f"# {code(count)} == 1: the row fits one tile, so it is loaded once (read_once)"))])
        orig = list(body[g[0]:g[-1] + 1])
        first_lead = orig[0].leading_lines
        orig[0] = orig[0].with_changes(leading_lines=())
        new_if = cst.If(test=expr(f"{code(n_expr)} == 1"), body=cst.IndentedBlock(body=fast),
                        orelse=cst.Else(body=cst.IndentedBlock(body=orig)), leading_lines=first_lead)
        edits = {body[g[0]]: (lambda node: new_if)}
        for s in body[g[0] + 1:g[-1] + 1]:
            edits[s] = lambda node: cst.RemoveFromParent()
        arrays = sorted({code(positional(c)[0].value) for c in loads})
        when = "" if static else (": a run-time branch (the count depends on run-time values, so both paths "
                                  "are compiled and the row length picks one per launch)")
        return Plan(description=f"the pass loops at {lines} load {', '.join(arrays)} once when "
                                f"{code(count)} == 1 (extent <= tile){when}; the loops stay for longer rows",
                    params={}, module=rewrite(k.module, edits))
