"""Playbook A: ``ct.gather`` / ``ct.scatter`` on a block-contiguous index -> ``ct.load`` / ``ct.store``.

A gather whose index is provably one contiguous, tile-aligned block —
``b * T + ct.arange(T)`` (either operand order) with the same ``T`` — reads exactly tile
``b`` of a 1-D array, so it becomes a tile-indexed (TMA-eligible) load::

    ct.gather(x, b * T + ct.arange(T, dtype=ct.int32))
      -> ct.load(x, index=(b,), shape=(T,), padding_mode=ct.PaddingMode.ZERO)
    ct.scatter(y, idx, v)  ->  ct.store(y, index=(b,), tile=v)

Out-of-bounds behaviour matches: a bounds-checked gather yields its padding value 0
(ZERO padding), a bounds-checked scatter drops out-of-range lanes (``ct.store`` clips).
``latency`` and ``check_bounds`` carry over.  Refused per call: a ``mask``, a non-zero
``padding_value``, an index that is not of that form (or is built from names that are
reassigned, so its value at the call is not provably the same).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from .analysis import assignments, single_value, taken_names
from .base import (Kernel, Plan, Transform, code, expr, find_all, fresh_name, int_value, kwarg,
                   lines_text, literal_value, names_in, positional, refuse, rewrite, stmt)


def _norm(node: cst.CSTNode) -> str:
    return "".join(code(node).split())


def contiguous_block(k: Kernel, node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """``(b, T)`` when ``node`` is ``b * T + ct.arange(T)`` (or a permutation of it)."""
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)):
        return None
    for ar, other in ((node.right, node.left), (node.left, node.right)):
        if not (isinstance(ar, cst.Call) and k.ct.called(ar) == "arange"):
            continue
        pos = positional(ar)
        if len(pos) != 1:
            continue
        start, step = kwarg(ar, "start"), kwarg(ar, "step")
        if (start is not None and int_value(start.value) != 0) or (step is not None and int_value(step.value) != 1):
            continue
        size = pos[0].value
        if not (isinstance(other, cst.BinaryOperation) and isinstance(other.operator, cst.Multiply)):
            continue
        for b, t in ((other.left, other.right), (other.right, other.left)):
            if _norm(t) == _norm(size):
                return b, size
    return None


def _stable(k: Kernel, node: cst.BaseExpression, binds) -> bool:
    """Every name in ``node`` is bound once (parameters included) and no load feeds it."""
    for n in names_in(node):
        if n == k.ct.prefix.split(".")[0] or n in ("min", "max"):
            continue
        if len(binds.get(n, [])) > 1:
            return False
    return not any(k.ct.called(c) in ("load", "gather", "arange", "full")
                   for c in find_all(node, lambda x: isinstance(x, cst.Call)))


@dataclass
class _Site:
    call: cst.Call
    kind: str                       # "gather" / "scatter"
    block: cst.BaseExpression
    tile: cst.BaseExpression
    via: str | None                 # the index variable, if the index is a name


@dataclass(frozen=True)
class GatherToLoad(Transform):
    name: str = "gather_to_load"
    playbook_id: str = "A"
    summary: str = "ct.gather/ct.scatter on b*T + arange(T) -> tile-indexed ct.load/ct.store"
    PARAMS: ClassVar[dict[str, Any]] = {}

    def _plan(self, k: Kernel, params) -> Plan:
        calls = k.calls("gather", "scatter")
        if not calls:
            refuse(f"{k.name} has no ct.gather / ct.scatter")
        binds = assignments(k.func)
        sites: list[_Site] = []
        problems: list[str] = []
        for c in calls:
            kind = k.ct.called(c)
            pos = positional(c)
            where = f"ct.{kind} at line {k.line(c)}"
            need = 2 if kind == "gather" else 3
            if len(pos) != need:
                problems.append(f"{where}: unexpected arguments")
                continue
            if kwarg(c, "mask") is not None:
                problems.append(f"{where} has a mask")
                continue
            if kind == "gather":
                pad = kwarg(c, "padding_value")
                pv = literal_value(pad.value) if pad is not None else 0
                if type(pv) not in (int, float) or pv != 0:
                    problems.append(f"{where} pads with {code(pad.value)}, not 0")
                    continue
            idx = pos[1].value
            via = None
            if isinstance(idx, cst.Name):
                via = idx.value
                v = single_value(binds, via)
                if v is None:
                    problems.append(f"{where}: index `{via}` is not assigned exactly once")
                    continue
                idx = v
            if isinstance(idx, cst.Tuple):
                problems.append(f"{where}: multi-dimensional index")
                continue
            found = contiguous_block(k, idx)
            if found is None:
                problems.append(f"{where}: index `{code(idx)}` is not `b * T + ct.arange(T)`")
                continue
            b, t = found
            if not (_stable(k, b, binds) and _stable(k, t, binds)):
                problems.append(f"{where}: the index is built from reassigned names")
                continue
            sites.append(_Site(c, kind, b, t, via))
        if not sites:
            refuse("; ".join(problems))

        # a block expression that is not a plain name gets a variable when the index variable
        # is removed (one ct.bid per kernel instead of one per call)
        edits: dict = {}
        taken = taken_names(k)
        var_binding: dict[str, str] = {}
        replaced_uses: dict[str, int] = {}
        for s in sites:
            if s.via:
                replaced_uses[s.via] = replaced_uses.get(s.via, 0) + 1
        for var, n_replaced in replaced_uses.items():
            b = binds[var][0]
            uses = sum(1 for n in find_all(k.func.body, lambda x: isinstance(x, cst.Name) and x.value == var)) - 1
            site = next(s for s in sites if s.via == var)
            assign_stmt = k.statement_of(b.node)
            simple = isinstance(site.block, (cst.Name, cst.Integer))
            if not simple:
                blk = fresh_name(taken, "bid" if k.ct.called(site.block) == "bid" else "block")
                taken.add(blk)
                var_binding[var] = blk
            if uses == n_replaced and isinstance(assign_stmt, cst.SimpleStatementLine) and len(assign_stmt.body) == 1:
                if simple:
                    edits[assign_stmt] = lambda node: cst.RemoveFromParent()
                else:
                    new = stmt(f"{var_binding[var]} = {code(site.block)}")
                    edits[assign_stmt] = lambda node, new=new: new.with_changes(leading_lines=node.leading_lines)
            elif not simple:
                new = stmt(f"{var_binding[var]} = {code(site.block)}")
                edits[assign_stmt] = lambda node, new=new: cst.FlattenSentinel([new, node])

        zero = k.ct.ref("PaddingMode.ZERO")
        lines = {"gather": [], "scatter": []}
        for s in sites:
            block = var_binding.get(s.via) if s.via else None
            block = block or code(s.block)
            tile = code(s.tile)
            extra = []
            for kw in ("check_bounds", "latency"):
                a = kwarg(s.call, kw)
                if a is not None:
                    extra.append(f"{kw}={code(a.value)}")
            arr = code(positional(s.call)[0].value)
            if s.kind == "gather":
                text = (f"{k.ct.ref('load')}({arr}, index=({block},), shape=({tile},), "
                        f"padding_mode={zero}" + "".join(", " + e for e in extra) + ")")
            else:
                val = code(positional(s.call)[2].value)
                text = (f"{k.ct.ref('store')}({arr}, index=({block},), tile={val}"
                        + "".join(", " + e for e in extra) + ")")
            new_call = expr(text)
            edits[s.call] = lambda node, new=new_call: new.with_changes(lpar=node.lpar, rpar=node.rpar)
            lines[s.kind].append(k.line(s.call))
        parts = []
        if lines["gather"]:
            parts.append(f"ct.gather -> ct.load ({lines_text(lines['gather'])})")
        if lines["scatter"]:
            parts.append(f"ct.scatter -> ct.store ({lines_text(lines['scatter'])})")
        return Plan(description="; ".join(parts) + " with a tile index and ZERO padding",
                    params={}, module=rewrite(k.module, edits), notes=problems)
