"""Playbook A: tile-shaped ``ct.gather`` / ``ct.scatter`` -> ``ct.load`` / ``ct.store``.

A gather whose index is, per array dimension, a scalar (a row id, ``ct.full((T,), row)``)
or one contiguous, tile-aligned block ``b * T + ct.arange(T)`` (spelt inline, through
``offs = j * T + offsets``, as a broadcast chunk start ``ct.full((T,), start) + offsets``
with ``start = j * T``, ``off + ct.arange(T)`` in ``for off in range(0, N, T)`` (tile
``off // T``), or broadcast as ``rows[:, None]`` / ``cols[None, :]``) reads
exactly one tile of the array, so it becomes a tile-indexed (TMA-eligible) load::

    ct.gather(x, (row, j * T + ct.arange(T)))
      -> ct.reshape(ct.load(x, index=(row, j), shape=(1, T), padding_mode=ct.PaddingMode.ZERO), (T,))
    ct.gather(w, offs)              ->  ct.load(w, index=(j,), shape=(T,), padding_mode=...ZERO)
    ct.scatter(y, (row, offs), v)   ->  ct.store(y, index=(row, j), tile=ct.reshape(v, (1, T)))

Out-of-bounds behaviour matches: a bounds-checked gather yields its padding value 0 (ZERO
padding), a bounds-checked scatter drops out-of-range lanes (``ct.store`` clips).  A mask
is dropped only when it is a bounds mask (``cols < x.shape[1]``, or ``cols < N`` where every
launch in the file passes the array's ``.shape[1]`` as ``N``: inline or through the wrapper's
``m, n = x.shape`` / ``x.shape[-1]`` / ``x.size(1)``, read from the array passed or one
provably of its shape, ``y = torch.empty_like(x)`` or ``assert y.shape == x.shape``).
``latency`` and ``check_bounds`` carry over.  ``tma="off"`` writes the tile loads/stores with
``allow_tma=False``: on sm_90 a TMA load or store warp-specialises a one-row-per-block kernel
(256 threads, 255 registers, ~50 KB of shared memory: one resident block per SM), while the
same view ops without TMA stay at 128 threads and tens of registers; ``candidates`` offers both.
Refused per call, with the reason: data-dependent indices (loaded from memory), strided or
unaligned ones, other masks, a non-zero ``padding_value``, names whose value at the call
is not provable.  Index variables left unused are removed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from ..source.analysis import (AffineGather, affine_gather_form, assignments, bounds_mask_axes, launch_extent,
                                taken_names)
from .tma_padding import TMA_OFF_NOTE, TmaChoice, ensure_import_math, tma_setting, valid_mask
from ..source.model import (Kernel, code, expr, find_all, fresh_name, kwarg, lines_text, literal_value,
                             names_in, refuse, rewrite, stmt)
from .base import Plan, Transform

_PURE = {"bid", "arange", "full", "cdiv", "num_blocks"}


def _data_free(k: Kernel, pad: cst.BaseExpression) -> str | None:
    """Why a padding value cannot be restored with ``ct.where`` after a ZERO load, or None."""
    if any(isinstance(c, cst.Call) for c in find_all(pad, lambda x: isinstance(x, cst.Call))):
        return "is computed by a call (kept as a gather)"
    return None


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _stable_names(k: Kernel, form: AffineGather, binds) -> str | None:
    """Names copied into the new index must mean at the call what they meant at their use
    in the index: bound once, or the variable of a loop around the call not rebound in it."""
    loops = [a for a in k.ancestors(form.call) if isinstance(a, cst.For)]
    for a in form.axes:
        for part in (a.block, a.tile):
            if part is None:
                continue
            for n in names_in(part):
                if n == k.ct.prefix.split(".")[0] or len(binds.get(n, [])) <= 1:
                    continue
                own = [lp for lp in loops if n in names_in(lp.target)]
                if not own or len(assignments(own[0].body).get(n, [])) > 0:
                    return f"`{n}` is reassigned, so the index at the call is not provable"
    return None


@dataclass(frozen=True)
class GatherToLoad(TmaChoice, Transform):
    """Tile-shaped ``ct.gather`` / ``ct.scatter`` (row ids, ``b*T + arange(T)``) rewritten as ``ct.load`` /
    ``ct.store``, with or without TMA."""
    name: str = "gather_to_load"
    playbook_id: str = "A"
    summary: str = "tile-shaped ct.gather/ct.scatter (row ids, b*T + arange(T)) -> ct.load/ct.store"
    PARAMS: ClassVar[dict[str, Any]] = {"tma": "auto"}

    def _plan(self, k: Kernel, params) -> Plan:
        tma_off = tma_setting(params)
        calls = k.calls("gather", "scatter")
        if not calls:
            refuse(f"{k.name} has no ct.gather / ct.scatter")
        binds = assignments(k.func)
        extent_of = launch_extent(k)
        sites: list[AffineGather] = []
        problems: list[str] = []
        for c in calls:
            kind = k.ct.called(c)
            where = f"ct.{kind} at line {k.line(c)}"
            form = affine_gather_form(k, c)
            if isinstance(form, str):
                problems.append(f"{where}: {form}")
                continue
            mask = kwarg(c, "mask")
            if mask is not None:
                why = bounds_mask_axes(k, form, mask.value, extent_of)
                if why:
                    problems.append(f"{where} has a mask that is not a bounds mask ({why})")
                    continue
            if kind == "gather":
                pad = kwarg(c, "padding_value")
                pv = literal_value(pad.value) if pad is not None else 0
                if pad is not None and not (type(pv) in (int, float) and pv == 0) \
                        and _data_free(k, pad.value) is not None:
                    problems.append(f"{where} pads with {code(pad.value)}, which {_data_free(k, pad.value)}")
                    continue
            why = _stable_names(k, form, binds)
            if why:
                problems.append(f"{where}: {why}")
                continue
            sites.append(form)
        if not sites:
            refuse("; ".join(problems))

        edits: dict = {}
        taken = taken_names(k)
        hoisted: dict[str, str] = {}      # block expression text -> variable
        body, skip = k.body_statements()
        for name, bl in binds.items():     # reuse `row = ct.bid(0)` when the kernel has one
            if len(bl) == 1 and bl[0].value is not None and isinstance(bl[0].value, cst.Call) \
                    and k.ct.called(bl[0].value) == "bid" and k.statement_of(bl[0].node) in body:
                hoisted.setdefault("".join(code(bl[0].value).split()), name)
        new_vars: list[cst.BaseStatement] = []

        def block_text(b: cst.BaseExpression) -> str:
            key = "".join(code(b).split())
            if isinstance(b, cst.Call) and k.ct.called(b) == "bid":
                if key not in hoisted:
                    v = fresh_name(taken, "bid")
                    taken.add(v)
                    hoisted[key] = v
                    new_vars.append(stmt(f"{v} = {code(b)}"))
                return hoisted[key]
            return code(b)

        zero = k.ct.ref("PaddingMode.ZERO")
        needs_math = False
        lines = {"gather": [], "scatter": []}
        for s in sites:
            index = _tuple([block_text(a.block) for a in s.axes])
            shape = _tuple(s.load_shape)
            need_reshape = s.result_shape != s.load_shape
            res = _tuple(s.result_shape)
            extra = [f"{kw}={code(a.value)}" for kw in ("check_bounds", "latency")
                     if (a := kwarg(s.call, kw)) is not None] + (["allow_tma=False"] if tma_off else [])
            arr = code(s.array)
            if s.kind == "gather":
                text = (f"{k.ct.ref('load')}({arr}, index={index}, shape={shape}, "
                        f"padding_mode={zero}" + "".join(", " + e for e in extra) + ")")
                if need_reshape:
                    text = f"{k.ct.ref('reshape')}({text}, {res})"
                pad = kwarg(s.call, "padding_value")
                if pad is not None and literal_value(pad.value) != 0:
                    # TMA pads with zeros only: pad with zeros, then put the value back (playbook P)
                    positions = [(d, block_text(a.block), code(a.tile) if a.tile is not None else "1",
                                  s.result_axis(d)) for d, a in enumerate(s.axes)]
                    mask = valid_mask(k, arr, positions, len(s.result_shape), extent_of)
                    if mask is not None:
                        text = f"{k.ct.ref('where')}({mask}, {text}, {code(pad.value)})"
                        needs_math |= "math" in names_in(pad.value)
            else:
                val = code(s.value)
                if need_reshape:
                    val = f"{k.ct.ref('reshape')}({val}, {shape})"
                text = (f"{k.ct.ref('store')}({arr}, index={index}, tile={val}"
                        + "".join(", " + e for e in extra) + ")")
            new_call = expr(text)
            edits[s.call] = lambda node, new=new_call: new.with_changes(lpar=node.lpar, rpar=node.rpar)
            lines[s.kind].append(k.line(s.call))
        if new_vars:
            first = body[skip] if len(body) > skip else None
            if first is None:
                refuse("empty kernel body")
            edits[first] = lambda node: cst.FlattenSentinel(
                [new_vars[0].with_changes(leading_lines=node.leading_lines), *new_vars[1:],
                 node.with_changes(leading_lines=())])
        module = rewrite(k.module, edits)
        module = _drop_dead_index_vars(module, k, set(binds))
        if needs_math:
            module = ensure_import_math(module)
        parts = []
        if lines["gather"]:
            parts.append(f"ct.gather -> ct.load ({lines_text(lines['gather'])})")
        if lines["scatter"]:
            parts.append(f"ct.scatter -> ct.store ({lines_text(lines['scatter'])})")
        return Plan(description="; ".join(parts) + " with a tile index and ZERO padding"
                    + (TMA_OFF_NOTE if tma_off else ""),
                    params={"tma": "off"} if tma_off else {}, module=module, notes=problems)


def _drop_dead_index_vars(module: cst.Module, k: Kernel, were_bound: set[str]) -> cst.Module:
    """Remove ``name = <pure index math>`` statements of the kernel the rewrite left unread."""
    func_name = k.func.name.value
    for _ in range(6):
        func = next(s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == func_name)
        reads: dict[str, int] = {}
        keywords = {id(a.keyword) for a in find_all(func.body, lambda x: isinstance(x, cst.Arg)) if a.keyword}
        for n in find_all(func.body, lambda x: isinstance(x, cst.Name) and id(x) not in keywords):
            reads[n.value] = reads.get(n.value, 0) + 1
        dead = {}
        for st in find_all(func.body, lambda x: isinstance(x, cst.SimpleStatementLine)):
            if len(st.body) != 1 or not isinstance(st.body[0], cst.Assign):
                continue
            a = st.body[0]
            if len(a.targets) != 1 or not isinstance(a.targets[0].target, cst.Name):
                continue
            name = a.targets[0].target.value
            pure = all(k.ct.called(c) in _PURE for c in find_all(a.value, lambda x: isinstance(x, cst.Call)))
            # the target itself is one read of the name in the count above
            if name in were_bound and pure and reads.get(name, 0) == sum(
                    1 for s2 in find_all(func.body, lambda x: isinstance(x, cst.Assign))
                    if any(isinstance(t.target, cst.Name) and t.target.value == name for t in s2.targets)):
                dead[st] = lambda node: cst.RemoveFromParent()
        if not dead:
            return module
        module = rewrite(module, dead)
    return module
