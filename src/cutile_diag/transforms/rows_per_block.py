"""Rows per block: a one-row-per-block row kernel processes R rows per tile.

Row kernels over short rows (norms, softmax, activations) launched one block per row move
a small tile per block; with ``shape=(R, T)`` each block moves R rows (more bytes in
flight per block, 1/R as many blocks).  The row id indexes row *tiles* after the rewrite::

    row = ct.bid(0)
    x = ct.load(X, index=(row, j), shape=(1, T), ...)    ->   shape=(ROWS, T)
    acc = ct.zeros((1, T), dtype=...)                      ->   ct.zeros((ROWS, T), ...)
    ct.launch(stream, (M,), kernel, (..., T))              ->   (ct.cdiv(M, R),), (..., T, R)

with ``ROWS: ct.Constant[int]`` appended to the kernel's parameters (and its
``CAPTURE_SPECS`` entry).  A persistent kernel (``for row in range(ct.bid(0), n,
ct.num_blocks(0))`` with ``n = ct.num_tiles(X, axis=0, shape=(1, T))``) keeps its grid:
``n`` follows the new shape.  Refused, with the reason: the row id used other than as the
first index of 2-D tile loads/stores (gathers, scalar stores, arithmetic), reductions
that are not ``axis=1, keepdims=True``, reshapes, mma, a row tile that is not ``(1, T)``.
``rows`` is swept over ``SWEEP``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from ..source.analysis import (assignments, bid_calls, capture_spec_entries, reaching_value, require_launches,
                                taken_names)
from ..source.model import (Kernel, TransformParamError, append_dict_item, append_element, code, expr,
                             find_all, fresh_name, int_value, kwarg, literal_value, positional, refuse, rewrite)
from .base import Plan, Transform
from .group_m_swizzle import _append_param

SWEEP = (2, 4, 8, 16)
_REDUCE = {"sum", "max", "min", "prod", "argmax", "argmin", "mean"}
_SHAPED = {"zeros": 0, "ones": 0, "full": 0}


@dataclass(frozen=True)
class RowsPerBlock(Transform):
    """A one-row-per-block row kernel made to process ``rows`` rows per tile (shape ``(ROWS, T)``), its grid divided
    by ``rows``."""
    name: str = "rows_per_block"
    playbook_id: str = "X"
    summary: str = "one-row-per-block row kernel -> ROWS rows per tile (shape=(ROWS, T)), grid / ROWS"
    PARAMS: ClassVar[dict[str, Any]] = {"rows": 4}
    ENABLED_BY: ClassVar[tuple[str, ...]] = ("gather_to_load", "tma_zero_padding")

    def _plan(self, k: Kernel, params) -> Plan:
        r = params["rows"]
        if isinstance(r, bool) or not isinstance(r, int) or not 2 <= r <= 256 or r & (r - 1):
            raise TransformParamError(f"{self.name}: rows must be a power of two in 2..256, got {r!r}")
        calls = bid_calls(k)
        if set(calls) - {0} or 0 not in calls:
            refuse(f"{k.name} does not use a 1-D grid over rows (ct.bid(0) only)")
        binds = assignments(k.func)
        row, persistent = self._row_var(k, calls[0], binds)
        uses = [n for n in find_all(k.func.body, lambda x: isinstance(x, cst.Name) and x.value == row)]
        ok_uses: set[int] = set()
        tiles: list[cst.Call] = []
        for c in k.calls("load", "store"):
            pos = positional(c)
            idx = kwarg(c, "index") or (pos[1] if len(pos) > 1 else None)
            if idx is None or not isinstance(idx.value, cst.Tuple):
                continue
            els = [e.value for e in idx.value.elements]
            if not any(isinstance(e, cst.Name) and e.value == row for e in els):
                continue
            where = f"ct.{k.ct.called(c)} at line {k.line(c)}"
            if len(els) != 2 or not (isinstance(els[0], cst.Name) and els[0].value == row):
                refuse(f"{where} indexes with the row id other than as the first of two tile indices")
            if k.ct.called(c) == "load":
                shape = kwarg(c, "shape") or (pos[2] if len(pos) > 2 else None)
                if shape is None or not isinstance(shape.value, cst.Tuple) or len(shape.value.elements) != 2:
                    refuse(f"{where}: the tile shape is not a literal 2-tuple")
                if int_value(shape.value.elements[0].value) != 1:
                    refuse(f"{where} already loads `{code(shape.value)}` rows per tile")
                tiles.append(shape.value)
            ok_uses.add(id(els[0]))
        loop_uses = {id(n) for f in find_all(k.func.body, lambda x: isinstance(x, cst.For)) for n in [f.target]
                     if isinstance(f.target, cst.Name) and f.target.value == row}
        for n in uses:
            if id(n) not in ok_uses and id(n) not in loop_uses and not _is_bind(k, n):
                refuse(f"the row id `{row}` is used at line {k.line(n)} other than as a tile index "
                       f"(`{code(k.statement_of(n)).strip()[:60]}`): a row tile would change its meaning")
        if not tiles:
            refuse(f"{k.name} has no ct.load of a (1, T) row tile indexed by the row id")
        for c in k.calls(*_REDUCE):
            ax = kwarg(c, "axis") or (positional(c)[1] if len(positional(c)) > 1 else None)
            kd = kwarg(c, "keepdims") or (positional(c)[2] if len(positional(c)) > 2 else None)
            if ax is None or int_value(ax.value) not in (1, -1) or kd is None or literal_value(kd.value) is not True:
                refuse(f"the reduction at line {k.line(c)} is not over axis 1 with keepdims=True, so "
                       f"it would mix or drop the rows of a row tile")
        for bad in ("reshape", "mma", "gather", "scatter", "permute", "transpose"):
            if k.calls(bad):
                refuse(f"ct.{bad} at line {k.line(k.calls(bad)[0])}: its shapes assume one row per tile")

        taken = taken_names(k)
        pname = fresh_name(taken, "ROWS")
        edits: dict = {}
        for t in tiles:
            edits[t] = lambda node: node.with_changes(elements=[node.elements[0].with_changes(
                value=cst.Name(pname)), *node.elements[1:]])
        for c in k.calls(*_SHAPED):
            shp = positional(c)[0].value if positional(c) else None
            if isinstance(shp, cst.Tuple) and len(shp.elements) == 2 and int_value(shp.elements[0].value) == 1:
                edits[shp] = lambda node: node.with_changes(elements=[node.elements[0].with_changes(
                    value=cst.Name(pname)), *node.elements[1:]])
        if persistent is not None:
            # the loop walked row tiles of one row, so its bound counts rows: it becomes the
            # number of ROWS-row tiles (ct.num_tiles(..., shape=(1, T)) follows the shape edit)
            n = persistent
            nv = reaching_value(k, n.value, k.func.body) if isinstance(n, cst.Name) else n
            nshape = kwarg(nv, "shape") if isinstance(nv, cst.Call) and k.ct.called(nv) == "num_tiles" else None
            if nshape is not None and isinstance(nshape.value, cst.Tuple) \
                    and int_value(nshape.value.elements[0].value) == 1:
                edits[nshape.value] = lambda node: node.with_changes(elements=[node.elements[0].with_changes(
                    value=cst.Name(pname)), *node.elements[1:]])
            else:
                edits[n] = lambda node: expr(f"{k.ct.ref('cdiv')}({code(node)}, {pname})")

        def edit_func(f: cst.FunctionDef) -> cst.FunctionDef:
            # a default: capture specs given on the command line (no CAPTURE_SPECS) still bind
            new_param = cst.Param(name=cst.Name(pname), annotation=cst.Annotation(
                expr(f"{k.ct.ref('Constant')}[int]")), default=cst.Integer(str(r)),
                equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(" "),
                                      whitespace_after=cst.SimpleWhitespace(" ")))
            return f.with_changes(params=f.params.with_changes(params=_append_param(f.params.params, new_param)))
        edits[k.func] = edit_func

        sites = require_launches(k, "rows per block")
        for s in sites:
            if s.args_node is None or s.args is None:
                refuse(f"the arguments of the launch at line {s.line} are not a literal tuple")
            edits[s.args_node] = lambda node: append_element(node, cst.Integer(str(r)))
            if persistent is None:
                g = s.grid
                els = [e.value for e in g.elements] if isinstance(g, (cst.Tuple, cst.List)) else None
                if els is None or not (len(els) == 1 or all(int_value(e) == 1 for e in els[1:])):
                    refuse(f"the grid of the launch at line {s.line} is `{code(g)}`, not a 1-D tuple")
                target = s.grid_binding.value if s.grid_binding is not None else positional(s.call)[1].value
                new = expr(f"({k.ct.ref('cdiv')}({code(els[0])}, {r}),)")
                edits[target] = lambda node, new=new: new
        for e in capture_spec_entries(k):
            edits[e.dict_node] = lambda node: append_dict_item(node, pname, cst.Integer(str(r)))
        desc = (f"{r} rows per block: row tiles of shape ({pname}, ...) with {pname}={r}"
                + ("; the persistent loop bound follows the tile" if persistent is not None else
                   f"; grid divided by {r} at line {', '.join(str(s.line) for s in sites)}"))
        return Plan(description=desc, params={"rows": r}, module=rewrite(k.module, edits))

    def _row_var(self, k: Kernel, calls, binds) -> tuple[str, cst.BaseExpression | None]:
        """The row-id variable and, for a persistent kernel, its loop's bound."""
        for c in calls:
            parent = k.parent(k.parent(c)) if k.parent(c) is not None else None
            st = k.statement_of(c)
            if isinstance(st, cst.SimpleStatementLine) and isinstance(st.body[0], cst.Assign) \
                    and st.body[0].value is c and isinstance(st.body[0].targets[0].target, cst.Name):
                name = st.body[0].targets[0].target.value
                if len(binds.get(name, [])) == 1 and not any(
                        isinstance(f.iter, cst.Call) and f.iter.args and code(f.iter.args[0].value) == name
                        for f in find_all(k.func.body, lambda x: isinstance(x, cst.For))):
                    return name, None
            if isinstance(st, cst.For) and isinstance(st.target, cst.Name) and isinstance(st.iter, cst.Call):
                args = [a.value for a in st.iter.args]
                if len(args) == 3 and args[0] is c and self._is_num_blocks(k, args[2], st):
                    return st.target.value, args[1]
            # TileGym style: pid = ct.bid(0); for row in range(pid, N_ROWS, num_programs)
            if isinstance(st, cst.SimpleStatementLine) and isinstance(st.body[0], cst.Assign) \
                    and isinstance(st.body[0].targets[0].target, cst.Name):
                pid = st.body[0].targets[0].target.value
                for f in find_all(k.func.body, lambda x: isinstance(x, cst.For)):
                    if not (isinstance(f.target, cst.Name) and isinstance(f.iter, cst.Call)):
                        continue
                    args = [a.value for a in f.iter.args]
                    if len(args) == 3 and isinstance(args[0], cst.Name) and args[0].value == pid \
                            and self._is_num_blocks(k, args[2], f):
                        return f.target.value, args[1]
            del parent
        refuse(f"{k.name} does not bind its row id once (`row = ct.bid(0)` or a grid-stride loop)")

    @staticmethod
    def _is_num_blocks(k: Kernel, node: cst.BaseExpression, at: cst.CSTNode) -> bool:
        if isinstance(node, cst.Name):
            node = reaching_value(k, node.value, at) or node
        return isinstance(node, cst.Call) and k.ct.called(node) == "num_blocks"

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """The swept row counts (2, 4, 8, 16) that apply."""
        return [{"rows": v} for v in SWEEP if self.applicable(source, kernel_name, rows=v)[0]]

    def _why_no_candidates(self, source: str, kernel_name: str) -> str:
        return self.applicable(source, kernel_name, rows=SWEEP[0])[1]

    REQUIRES_PARAMS: ClassVar[bool] = True


def _is_bind(k: Kernel, n: cst.Name) -> bool:
    """``n`` is the target of an assignment."""
    p = k.parent(n)
    return isinstance(p, cst.AssignTarget)
