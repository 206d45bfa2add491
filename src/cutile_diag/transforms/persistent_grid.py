"""Playbook B: persistent grid-stride scheduling for a 1-D grid of independent tiles.

The kernel body becomes ``for t in range(ct.bid(0), n_tiles, ct.num_blocks(0)):`` with the
old block id replaced by the loop variable, and every launch's grid ``(g,)`` becomes
``(min(g, num_sms * blocks_per_sm),)`` with ``num_sms`` read from
``torch.cuda.get_device_properties(<first array>.device)`` (never a hard-coded SM count).
``n_tiles`` is recomputed in the kernel from a load/store the block id indexes
(``ct.num_tiles(a, axis=0, shape=(TILE,))``), or from the prologue ``group_m_swizzle``
writes (``num_bid_m * num_bid_n``).  Leading statements that do not depend on the block id
and are assigned once (grid extents, a TF32 guard) stay outside the loop.

``blocks_per_sm`` defaults to the decorator's ``occupancy`` when it is a literal, else 4.  In the
loop (``candidates_for``) the sweep starts at the blocks per SM the compiled kernel can keep
resident (``cubin.resident_ctas``): a light row kernel holds 16, and a grid of 4 per SM starved
the H200's row_norm and softmax examples (97 % and 23 % slower).
Refusals: other grid axes, ``ct.num_blocks`` already used, ``return`` in the body (it would
end the whole loop), block id read inside a loop, an extent it cannot derive.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import libcst as cst

from ..source.analysis import assignments, axis_extent, bid_calls, bid_variables, require_launches, taken_names
from ..source.model import (Kernel, TransformParamError, code, expr, find_all, fresh_name, int_value, load,
                             module_bindings, names_in, positional, refuse, rewrite, stmt)
from .base import Plan, Transform
from .group_m_swizzle import PARAM as GROUP_PARAM
from .kernel_hints import decorator_hints

_PURE_CT = {"num_tiles", "cdiv", "tfloat32", "float32", "float16", "bfloat16"}
SWEEP = (1, 2, 4, 8)


def _is_pure(k: Kernel, node: cst.CSTNode) -> bool:
    """No calls except ct.num_tiles / ct.cdiv / min / max: safe to evaluate once."""
    for c in find_all(node, lambda n: isinstance(n, cst.Call)):
        m = k.ct.called(c)
        if m in _PURE_CT:
            continue
        if isinstance(c.func, cst.Name) and c.func.value in ("min", "max") and k.ct.member(c.func) is None:
            continue
        return False
    return True


def _swizzle_extent(k: Kernel, body: list[cst.BaseStatement]) -> str | None:
    """``M * N`` from a GROUP_SIZE_M prologue: ``X = GROUP_SIZE_M * N`` and
    ``Y = min(M - first, GROUP_SIZE_M)`` at the top level."""
    if GROUP_PARAM not in k.param_names:
        return None
    m = n = None
    for s in body:
        if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Assign)):
            continue
        v = s.body[0].value
        if isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Multiply) \
                and isinstance(v.left, cst.Name) and v.left.value == GROUP_PARAM and isinstance(v.right, cst.Name):
            n = v.right.value
        # group_m_swizzle writes max(min(M - first, G), 1); matmul_tuned style is min(M - first, G)
        if isinstance(v, cst.Call) and isinstance(v.func, cst.Name) and v.func.value == "max" \
                and len(v.args) == 2 and int_value(v.args[1].value) == 1:
            v = v.args[0].value
        if isinstance(v, cst.Call) and isinstance(v.func, cst.Name) and v.func.value == "min" \
                and len(v.args) == 2 and isinstance(v.args[1].value, cst.Name) \
                and v.args[1].value.value == GROUP_PARAM and isinstance(v.args[0].value, cst.BinaryOperation) \
                and isinstance(v.args[0].value.left, cst.Name):
            m = v.args[0].value.left.value
    return f"{m} * {n}" if m and n else None


@dataclass(frozen=True)
class PersistentGrid(Transform):
    """A 1-D grid of independent tiles made persistent: a grid-stride loop over tiles, launched on ``min(n_tiles,
    NUM_SMS * blocks_per_sm)`` blocks."""
    name: str = "persistent_grid"
    playbook_id: str = "B"
    summary: str = "grid-stride loop over tiles; launch grid min(n_tiles, NUM_SMS * blocks_per_sm)"
    PARAMS: ClassVar[dict[str, Any]] = {"blocks_per_sm": None}

    def _plan(self, k: Kernel, params) -> Plan:
        bps = params["blocks_per_sm"]
        if bps is None:
            bps = _default_bps(k)
        if isinstance(bps, bool) or not isinstance(bps, int) or not 1 <= bps <= 64:
            raise TransformParamError(f"{self.name}: blocks_per_sm must be an integer in 1..64, got {bps!r}")
        if k.calls("num_blocks"):
            refuse(f"already applied: {k.name} uses ct.num_blocks (line {k.line(k.calls('num_blocks')[0])}), "
                   f"it is already grid-size aware")
        calls = bid_calls(k)
        if set(calls) - {0}:
            refuse(f"{k.name} uses ct.bid({max(calls)}): not a 1-D grid")
        if 0 not in calls:
            refuse(f"{k.name} never reads ct.bid(0)")
        if any(k.in_loop(c, stop=k.func) for c in calls[0]):
            refuse(f"{k.name} reads ct.bid(0) inside a loop; it looks persistent already")
        returns = [r for r in find_all(k.func.body, lambda n: isinstance(n, cst.Return))
                   if k.enclosing_function(r) is k.func]
        if returns:
            refuse(f"{k.name} returns early (line {k.line(returns[0])}); inside a grid-stride loop that "
                   f"would skip the block's remaining tiles")
        var, bid_stmt = bid_variables(k, calls, (0,))[0]
        body, skip = k.body_statements()
        rest = [s for s in body[skip:] if s is not bid_stmt]
        extent = _swizzle_extent(k, rest)
        if extent is None:
            extent, _ = axis_extent(k, 0, var, calls[0])

        # leading statements independent of the block id stay outside the loop
        binds = assignments(k.func)
        dependent = {var} if var else set()
        hoist = []
        for s in rest:
            if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Assign)):
                break
            a = s.body[0]
            targets = [t.target for t in a.targets]
            if not all(isinstance(t, cst.Name) and len(binds.get(t.value, [])) == 1 for t in targets):
                break
            reads_bid = find_all(a.value, lambda n: any(n is c for c in calls[0]))
            if names_in(a.value) & dependent or reads_bid or not _is_pure(k, a.value):
                break
            hoist.append(s)
        loop_body = rest[len(hoist):]
        if not loop_body:
            refuse(f"{k.name} has nothing to do per tile")

        sites = require_launches(k, "the persistent grid")
        arrays = [n for n in k.param_names if n not in k.constant_params()]
        for s in sites:
            g = s.grid
            els = [e.value for e in g.elements] if isinstance(g, (cst.Tuple, cst.List)) else None
            if els is None or not (len(els) == 1 or all(int_value(e) == 1 for e in els[1:])):
                refuse(f"the grid of the launch at line {s.line} is `{code(g)}`, not a 1-D tuple")
            if s.args is None:
                refuse(f"the arguments of the launch at line {s.line} are not a literal tuple")
            if s.func is None:
                refuse(f"the launch at line {s.line} is not inside a host function")

        taken = taken_names(k)
        loop_var = var or fresh_name(taken, "tile_id")
        taken.add(loop_var)
        n_var = fresh_name(taken, "num_tiles")
        bid0, nb0 = f"{k.ct.ref('bid')}(0)", f"{k.ct.ref('num_blocks')}(0)"
        count = stmt(f"{n_var} = {extent}")
        loop = cst.ensure_type(stmt(f"for {loop_var} in range({bid0}, {n_var}, {nb0}):\n    pass\n"), cst.For)

        edits: dict = {}
        for c in calls[0]:
            if bid_stmt is not None and c is bid_stmt.body[0].value:
                continue
            edits[c] = lambda node: cst.Name(loop_var)

        def edit_func(f: cst.FunctionDef) -> cst.FunctionDef:
            new_body = list(f.body.body)
            # children were rewritten already: locate the statements by position
            head = new_body[:skip]
            tail = [s for i, s in enumerate(new_body[skip:]) if body[skip + i] is not bid_stmt]
            if bid_stmt is not None and bid_stmt.leading_lines and tail:
                # comments above the removed `v = ct.bid(0)` stay with what followed it
                tail[0] = tail[0].with_changes(leading_lines=[*bid_stmt.leading_lines, *tail[0].leading_lines])
            hoisted, per_tile = tail[:len(hoist)], tail[len(hoist):]
            new_loop = loop.with_changes(body=cst.IndentedBlock(body=per_tile))
            return f.with_changes(body=f.body.with_changes(body=[*head, *hoisted, count, new_loop]))
        edits[k.func] = edit_func

        for s in sites:
            fbinds = s.binds
            first_array = next((e for i, e in enumerate(s.args) if k.param_names[i] in arrays
                                and isinstance(e, cst.Name)), None)
            if first_array is None:
                refuse(f"the launch at line {s.line} passes no array as a plain name to read the device from")
            wtaken = names_in(s.func)
            sms = fresh_name(wtaken, "num_sms")
            new_stmts = []
            if "torch" not in fbinds and not any(
                    "torch" in names_in(x.node) for x in _module_imports(k)):
                new_stmts.append(stmt("import torch"))
            new_stmts.append(stmt(f"{sms} = torch.cuda.get_device_properties({first_array.value}.device)"
                                  f".multi_processor_count"))
            g = s.grid
            target = s.grid_binding.value if s.grid_binding is not None else positional(s.call)[1].value
            g0 = code(g.elements[0].value)
            new_grid = expr(f"(min({g0}, {sms} * {bps}),)")
            edits[target] = lambda node, new_grid=new_grid: new_grid
            anchor = k.statement_of(s.grid_binding) if s.grid_binding is not None else s.statement
            prev = edits.get(anchor)
            edits[anchor] = lambda node, new=new_stmts, prev=prev: cst.FlattenSentinel(
                [*new, prev(node) if prev else node])
        module = rewrite(k.module, edits)
        desc = (f"grid-stride loop `for {loop_var} in range(ct.bid(0), {n_var}, ct.num_blocks(0))` "
                f"with {n_var} = {extent}; grid min(n, num_sms * {bps}) at "
                f"line {', '.join(str(s.line) for s in sites)}")
        notes = []
        if hoist:
            notes.append(f"kept {len(hoist)} block-independent statement(s) outside the loop")
        return Plan(description=desc, params={"blocks_per_sm": bps}, module=module, notes=notes)

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """The default blocks per SM, then each swept value; [] when the kernel is not a candidate."""
        ok, _ = self.applicable(source, kernel_name)
        if not ok:
            return []
        return [{}] + [{"blocks_per_sm": v} for v in SWEEP]

    def candidates_for(self, source: str, kernel_name: str, facts: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A full wave of resident blocks first, then half of it, then the default and the sweep."""
        out = self.candidates(source, kernel_name)
        resident = facts.get("cubin.resident_ctas")
        if not out or not isinstance(resident, int) or isinstance(resident, bool) or not 1 <= resident <= 64:
            return out
        default = _default_bps(load(source, kernel_name))
        first = [resident, max(1, resident // 2)]
        rest = [p.get("blocks_per_sm", default) for p in out]
        order = list(dict.fromkeys(first + rest))
        return [{} if v == default else {"blocks_per_sm": v} for v in order]


def _default_bps(k: Kernel) -> int:
    """The decorator's literal ``occupancy``, else 4."""
    occ = decorator_hints(k).get("occupancy")
    return occ if isinstance(occ, int) else 4


def _module_imports(k: Kernel):
    return [b for bs in module_bindings(k.module).values() for b in bs
            if isinstance(b.node, (cst.Import, cst.ImportFrom))]
