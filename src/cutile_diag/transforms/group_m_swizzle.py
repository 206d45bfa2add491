"""Playbook I: GROUP_SIZE_M swizzle — a 2-D tile grid becomes a grouped 1-D grid.

A row-major 2-D grid sweeps a whole row of output tiles before moving down, so the B
tiles it reads fall out of L2 before they are reused.  Grouping GROUP_SIZE_M rows makes
consecutive blocks share them.  The kernel gets a ``GROUP_SIZE_M: ct.Constant[int]``
parameter and a prologue that maps the 1-D block id back to ``(bm, bn)`` (the Triton
formula, last group clamped); the extent of each axis is recomputed in the kernel with
``ct.num_tiles`` on an array the axis indexes (``ct.load(A, index=(bm, k), shape=(TM,
TK))`` -> ``ct.num_tiles(A, axis=0, shape=(TM, TK))``).  On the host every launch's grid
``(g0, g1)`` becomes ``(g0 * g1,)`` and the new constant is appended to the arguments;
every ``CAPTURE_SPECS`` entry of the kernel gets it too.

Refusals: no ``ct.bid(1)`` (not 2-D) or a ``ct.bid(2)``; ``ct.num_blocks`` in the body
(grid-size dependent); no load/store whose index uses the block id with a shape built from
parameters; a grid or argument tuple the transform cannot see; already swizzled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from ..source.analysis import (axis_extent, bid_calls, bid_variables, capture_spec_entries, require_launches,
                                taken_names)
from ..source.model import (Kernel, TransformParamError, append_dict_item, append_element, code, expr,
                             fresh_name, int_value, positional, refuse, rewrite, stmt, times)
from .base import Plan, Transform

PARAM = "GROUP_SIZE_M"
SWEEP = (8, 4, 16)


def new_grid(k: Kernel, grid: cst.BaseExpression, line: int) -> cst.BaseExpression:
    """The launch's 2-D grid ``(m, n)`` (or ``(m, n, 1)``) as the 1-D ``(m * n,)``; refuses any other grid."""
    if isinstance(grid, (cst.Tuple, cst.List)):
        els = [e.value for e in grid.elements]
        if len(els) == 3 and int_value(els[2]) == 1:
            els = els[:2]
        if len(els) == 2:
            prod = times(els[0], els[1])
            return cst.Tuple([cst.Element(prod, comma=cst.Comma())])
    refuse(f"the grid of the launch at line {line} is `{code(grid)}`, not a 2-D tuple")


@dataclass(frozen=True)
class GroupMSwizzle(Transform):
    """A 2-D tile grid made a 1-D grid with a GROUP_SIZE_M swizzle: the kernel, its launches and its CAPTURE_SPECS
    rewritten together."""
    name: str = "group_m_swizzle"
    playbook_id: str = "I"
    summary: str = "2-D grid -> 1-D grid with GROUP_SIZE_M swizzle (kernel + launch + CAPTURE_SPECS)"
    PARAMS: ClassVar[dict[str, Any]] = {"group_size_m": 8}

    def _plan(self, k: Kernel, params) -> Plan:
        g = params["group_size_m"]
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            raise TransformParamError(f"{self.name}: group_size_m must be a positive integer, got {g!r}")
        if PARAM in k.param_names:
            refuse(f"already applied: {k.func.name.value} has a {PARAM} parameter")
        calls = bid_calls(k)
        if 2 in calls:
            refuse(f"{k.name} uses ct.bid(2): a 3-D grid")
        if 1 not in calls:
            refuse(f"{k.name} does not use ct.bid(1): not a 2-D grid kernel")
        if 0 not in calls:
            refuse(f"{k.name} uses ct.bid(1) but not ct.bid(0)")
        if k.calls("num_blocks"):
            refuse(f"{k.name} uses ct.num_blocks (line {k.line(k.calls('num_blocks')[0])}): it depends on "
                   f"the grid shape, which this rewrite changes")
        if any(k.in_loop(c, stop=k.func) for axis in (0, 1) for c in calls[axis]):
            refuse(f"{k.name} reads ct.bid inside a loop (a persistent kernel?); not a plain 2-D grid")
        vars_ = bid_variables(k, calls, (0, 1))
        ext_m, _ = axis_extent(k, 0, vars_[0][0], calls[0])
        ext_n, _ = axis_extent(k, 1, vars_[1][0], calls[1])
        sites = require_launches(k, "the swizzle")
        for s in sites:
            if s.args is None:
                refuse(f"the arguments of the launch at line {s.line} are not a literal tuple")
            if len(s.args) != len(k.param_names):
                refuse(f"the launch at line {s.line} passes {len(s.args)} arguments; "
                       f"{k.func.name.value} takes {len(k.param_names)}")
        grids = {id(s): new_grid(k, s.grid, s.line) for s in sites}

        taken = taken_names(k)
        names = {}
        for key, base in (("bid", "bid"), ("m", "num_bid_m"), ("n", "num_bid_n"),
                          ("in_group", "num_bid_in_group"), ("group", "group_id"),
                          ("first", "first_bid_m"), ("size", "group_size_m"),
                          ("bm", "bid_m"), ("bn", "bid_n")):
            if key == "bm" and vars_[0][0]:
                names[key] = vars_[0][0]
                continue
            if key == "bn" and vars_[1][0]:
                names[key] = vars_[1][0]
                continue
            names[key] = fresh_name(taken, base)
            taken.add(names[key])
        n = names
        prologue_text = [
            f"{n['bid']} = {k.ct.ref('bid')}(0)",
            f"{n['m']} = {ext_m}",
            f"{n['n']} = {ext_n}",
            f"{n['in_group']} = {PARAM} * {n['n']}",
            f"{n['group']} = {n['bid']} // {n['in_group']}",
            f"{n['first']} = {n['group']} * {PARAM}",
            # max(..., 1): a block past the last tile (grid larger than the tiles) must not
            # divide by zero; it computes an out-of-range tile, which loads pad and stores clip
            f"{n['size']} = max(min({n['m']} - {n['first']}, {PARAM}), 1)",
            f"{n['bm']} = {n['first']} + ({n['bid']} % {n['in_group']}) % {n['size']}",
            f"{n['bn']} = ({n['bid']} % {n['in_group']}) // {n['size']}",
        ]
        prologue = [stmt(t) for t in prologue_text]
        removed = [s for _, s in vars_.values() if s is not None]
        lead = [line for s in removed for line in s.leading_lines]
        comment = cst.EmptyLine(comment=cst.Comment(
            f"# {PARAM} swizzle: blocks walk {PARAM} rows of tiles at a time (L2 reuse)"))
        prologue[0] = prologue[0].with_changes(leading_lines=[*lead, comment])

        edits: dict = {}
        for axis, key in ((0, "bm"), (1, "bn")):
            for c in calls[axis]:
                if vars_[axis][1] is not None and c is vars_[axis][1].body[0].value:
                    continue
                edits[c] = lambda node, v=n[key]: cst.Name(v)
        for s in removed:
            edits[s] = lambda node: cst.RemoveFromParent()
        _, skip = k.body_statements()

        def edit_func(f: cst.FunctionDef) -> cst.FunctionDef:
            body = list(f.body.body)
            body = body[:skip] + prologue + body[skip:]
            new_param = cst.Param(name=cst.Name(PARAM), annotation=cst.Annotation(
                expr(f"{k.ct.ref('Constant')}[int]")))
            params_ = f.params.with_changes(params=_append_param(f.params.params, new_param))
            return f.with_changes(body=f.body.with_changes(body=body), params=params_)
        edits[k.func] = edit_func

        for s in sites:
            target = s.grid_binding.value if s.grid_binding is not None else positional(s.call)[1].value
            new = grids[id(s)]
            edits[target] = lambda node, new=new: new.with_changes(lpar=node.lpar, rpar=node.rpar) \
                if node.lpar and not new.lpar else new
            edits[s.args_node] = lambda node: append_element(node, cst.Integer(str(g)))
        specs = capture_spec_entries(k)
        for e in specs:
            edits[e.dict_node] = lambda node: append_dict_item(node, PARAM, cst.Integer(str(g)))
        module = rewrite(k.module, edits)
        desc = (f"{PARAM}={g} swizzle: 1-D grid, (bm, bn) from ct.bid(0) in groups of {PARAM} rows; "
                f"{len(sites)} launch(es) updated (line {', '.join(str(s.line) for s in sites)})")
        notes = [f"grid extents from {ext_m} and {ext_n}"]
        if specs:
            notes.append("CAPTURE_SPECS entries updated: " + ", ".join(e.kernel for e in specs))
        return Plan(description=desc, params={"group_size_m": g}, module=module, notes=notes)

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """The swept group sizes (8, 4, 16) that apply."""
        out = [{"group_size_m": v} for v in SWEEP]
        return [c for c in out if self.applicable(source, kernel_name, **c)[0]]


def _append_param(params, new: cst.Param):
    items = list(params)
    if items and isinstance(items[-1].comma, cst.Comma):
        last = items[-1]
        sep = items[-2].comma if len(items) > 1 and isinstance(items[-2].comma, cst.Comma) \
            else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        new = new.with_changes(comma=last.comma)
        items[-1] = last.with_changes(comma=sep)
    items.append(new)
    return items
