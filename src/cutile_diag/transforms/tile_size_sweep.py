"""Playbook G: change the kernel's tile-size constants where the host chooses them.

Tile sizes are ``ct.Constant[int]`` parameters used in tile shapes.  Their values live on
the host: the ``ct.launch(stream, grid, kernel, args)`` argument for that parameter is
traced to where the number is written — a literal in the call, a default of the launch
wrapper's parameter (``def launch(..., tile=1024)``), a local or module constant — and
that literal is changed.  The kernel's ``CAPTURE_SPECS`` entry (AOT capture) changes too.
The grid formula normally reads the same variable, so it follows.  Refusals: the value
is computed at the launch site (``tile_n = 1 << ...``), the same literal also appears in
the grid, the launch goes through autotune, or no launch is in the file.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from ..source.analysis import LaunchSite, capture_spec_entries, require_launches
from ..source.model import (Kernel, TransformError, TransformNotApplicable, TransformParamError, code, find_all,
                             int_value, kwarg, load, module_bindings, positional, refuse, rewrite)
from .base import Plan, Transform

_SHAPE_ARG = {"load": 2, "full": 0, "zeros": 0, "ones": 0, "arange": 0, "num_tiles": 2}
MIN_TILE, MAX_TILE = 16, 16384


def _shape(k: Kernel, c: cst.Call) -> cst.BaseExpression | None:
    """The tile-shape argument of a load/full/arange/num_tiles call, or None where it is not given."""
    shape = kwarg(c, "shape") or kwarg(c, "size")
    if shape is not None:
        return shape.value
    i, pos = _SHAPE_ARG[k.ct.called(c)], positional(c)
    return pos[i].value if len(pos) > i else None


def tile_params(k: Kernel) -> list[str]:
    """Integer constants that appear in a tile shape (load/full/arange/num_tiles)."""
    consts = {n for n, t in k.constant_params().items() if t == "int"}
    used: set[str] = set()
    for c in k.calls(*_SHAPE_ARG):
        node = _shape(k, c)
        if node is not None:
            used |= {n.value for n in find_all(node, lambda x: isinstance(x, cst.Name))} & consts
    return [n for n in k.param_names if n in used]


@dataclass
class ValueSite:
    """Where a tile size's value is written down: the integer literal to replace, its value and a description of the
    place."""
    node: cst.CSTNode        # the Integer literal to replace
    value: int
    where: str


def _trace(k: Kernel, site: LaunchSite, pname: str, e: cst.BaseExpression) -> ValueSite:
    """Where the value passed for ``pname`` at ``site`` is written down."""
    v = int_value(e)
    if isinstance(e, cst.Integer):
        if any(int_value(n) == v for n in find_all(site.grid, lambda x: isinstance(x, cst.Integer))):
            refuse(f"the launch at line {site.line} passes {pname}={v} as a literal and its grid also "
                   f"contains {v}; changing one without the other is ambiguous")
        return ValueSite(e, v, f"literal in the launch at line {site.line}")
    if not isinstance(e, cst.Name):
        refuse(f"{pname} is passed as `{code(e)}` at line {site.line}; not a name or a literal")
    name = e.value
    binds = site.binds.get(name, [])
    if len(binds) == 1:
        b = binds[0]
        if isinstance(b.node, cst.Param):
            if b.node.default is not None and isinstance(b.node.default, cst.Integer):
                return ValueSite(b.node.default, int_value(b.node.default),
                                 f"default of parameter `{name}` of {site.func.name.value}() "
                                 f"(line {k.line(b.node)})")
            refuse(f"{pname} comes from parameter `{name}` of "
                   f"{site.func.name.value if site.func else 'the caller'}, which has no integer default")
        if isinstance(b.value, cst.Integer):
            return ValueSite(b.value, int_value(b.value), f"`{name} = {b.value.value}` (line {k.line(b.node)})")
        refuse(f"{pname} comes from `{name}`, computed at line {k.line(b.node)} "
               f"(`{code(b.value) if b.value is not None else name}`); not a constant to sweep")
    if len(binds) > 1:
        refuse(f"{pname} comes from `{name}`, which is assigned {len(binds)} times in "
               f"{site.func.name.value if site.func else 'the module'} (e.g. line {k.line(binds[-1].node)}); "
               f"it is computed at the launch site")
    mb = module_bindings(k.module).get(name, [])
    if len(mb) == 1 and isinstance(mb[0].value, cst.Integer):
        return ValueSite(mb[0].value, int_value(mb[0].value),
                         f"module constant `{name}` (line {k.line(mb[0].node)})")
    refuse(f"{pname} comes from `{name}`, whose value cannot be found in this file")


def value_sites(k: Kernel, pname: str) -> tuple[list[ValueSite], list[str]]:
    """Every place the value of constant ``pname`` is written (launches, CAPTURE_SPECS)."""
    idx = k.param_names.index(pname)
    sites: list[ValueSite] = []
    notes: list[str] = []
    for s in require_launches(k, "a tile-size change"):
        if s.args is None:
            refuse(f"the arguments of the launch at line {s.line} are not a literal tuple")
        if len(s.args) != len(k.param_names):
            refuse(f"the launch at line {s.line} passes {len(s.args)} arguments; "
                   f"{k.func.name.value} takes {len(k.param_names)}")
        vs = _trace(k, s, pname, s.args[idx])
        if not any(x.node is vs.node for x in sites):
            sites.append(vs)
        # who else reads the same variable: a wrapper default may feed several launches
        e = s.args[idx]
        if isinstance(e, cst.Name) and s.func is not None:
            for other in find_all(s.func, lambda n: isinstance(n, cst.Call) and k.ct.called(n) == "launch"):
                if other is s.call:
                    continue
                pos = positional(other)
                if len(pos) >= 4 and e.value in {n.value for n in find_all(pos[3].value,
                                                                           lambda x: isinstance(x, cst.Name))}:
                    notes.append(f"`{e.value}` also feeds the launch of {code(pos[2].value)} at line "
                                 f"{k.line(other)}")
    for entry in capture_spec_entries(k):
        if entry.kernel != k.name:
            continue
        el = entry.items.get(pname)
        if el is not None and isinstance(el.value, cst.Integer):
            sites.append(ValueSite(el.value, int_value(el.value), f"CAPTURE_SPECS[{entry.kernel!r}]"))
        elif el is not None:
            notes.append(f"CAPTURE_SPECS[{entry.kernel!r}][{pname!r}] is not a literal; left alone")
    return sites, notes


@dataclass(frozen=True)
class TileSizeSweep(Transform):
    """Parameters are the kernel's constant names: ``apply(src, "matmul", TM=64)``."""
    name: str = "tile_size_sweep"
    playbook_id: str = "G"
    summary: str = "change tile-size constants at the launch site and in CAPTURE_SPECS"
    PARAMS: ClassVar[dict[str, Any]] = {}
    REQUIRES_PARAMS: ClassVar[bool] = True

    def _check_params(self, params):
        return dict(params)       # validated against the kernel in _plan

    def _plan(self, k: Kernel, params) -> Plan:
        if not params:
            raise TransformParamError(f"{self.name}: give new values, e.g. {{'TILE': 2048}}",
                                      hint="tile constants of " + k.name + ": " + (", ".join(tile_params(k)) or "none"))
        consts = {n for n, t in k.constant_params().items() if t == "int"}
        tiles = set(tile_params(k))
        for n, v in params.items():
            if n not in consts:
                raise TransformParamError(f"{self.name}: {n} is not an integer ct.Constant of {k.name}",
                                          hint="integer constants: " + (", ".join(sorted(consts)) or "none"))
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise TransformParamError(f"{self.name}: {n} must be a positive integer, got {v!r}")
            if n in tiles and v & (v - 1):
                raise TransformParamError(f"{self.name}: {n} is a tile dimension and must be a power "
                                          f"of two, got {v}")
        edits: dict = {}
        parts, notes, same = [], [], []
        for n, v in params.items():
            sites, ns = value_sites(k, n)
            notes += ns
            changed = [s for s in sites if s.value != v]
            if not changed:
                same.append(f"{n}={v}")
                continue
            for s in changed:
                edits[s.node] = lambda node, v=v: node.with_changes(value=str(v))
            olds = sorted({s.value for s in changed})
            parts.append(f"{n}: {'/'.join(map(str, olds))} -> {v} (" + "; ".join(s.where for s in changed) + ")")
        if not edits:
            refuse(f"already applied: {', '.join(same)}")
        return Plan(description="; ".join(parts), params=dict(params), module=rewrite(k.module, edits),
                    notes=notes)

    def survey(self, source: str, kernel_name: str) -> tuple[dict[str, int], dict[str, str]]:
        """Tile constants -> value at the first launch site, and -> why not sweepable."""
        k = load(source, kernel_name)
        values, reasons = {}, {}
        tps = tile_params(k)
        if not tps:
            reasons[""] = f"{kernel_name} has no integer ct.Constant used in a tile shape"
        for n in tps:
            try:
                sites, _ = value_sites(k, n)
            except TransformNotApplicable as e:
                reasons[n] = e.reason
                continue
            if sites:
                values[n] = sites[0].value
            else:
                reasons[n] = f"no place in this file sets {n}"
        return values, reasons

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """Each host-chosen tile size doubled and halved (within MIN_TILE..MAX_TILE), one change per candidate, those
        that apply."""
        try:
            cur, _ = self.survey(source, kernel_name)
        except TransformNotApplicable:
            return []
        out = []
        for n, v in cur.items():
            for new in (v * 2, v // 2):
                if MIN_TILE <= new <= MAX_TILE and new != v:
                    out.append({n: new})
        return [c for c in out if self.applicable(source, kernel_name, **c)[0]]

    def _why_no_candidates(self, source: str, kernel_name: str) -> str:
        cur, reasons = self.survey(source, kernel_name)
        if reasons:
            return "; ".join(reasons.values())
        return f"no tile size within {MIN_TILE}..{MAX_TILE} left to try ({cur})"


_BROADCASTS = ("reshape", "expand_dims", "broadcast_to", "permute", "transpose")


def largest_tile(source: str, kernel_name: str) -> int | None:
    """The largest tile the kernel body shapes, in elements, with the host's tile constants substituted (the source's
    view of ``ir.max_tile_elems``); None when a shape is not a product of literals and host-set constants, or when
    1-D index vectors are broadcast into more dimensions (``arange(T)[:, None]``), where no single shape says the
    tile's size."""
    try:
        k = load(source, kernel_name)
        values, _ = TileSizeSweep().survey(source, kernel_name)
    except TransformError:      # not parseable, no such kernel, no launch in the file
        return None

    def size(node: cst.BaseExpression) -> int | None:
        if isinstance(node, cst.Tuple):
            dims = [size(e.value) for e in node.elements]
            return math.prod(dims) if dims and None not in dims else None
        if isinstance(node, cst.Integer):
            return int_value(node)
        if isinstance(node, cst.Name):
            return values.get(node.value)
        return None

    if k.calls(*_BROADCASTS) or find_all(k.func.body, lambda n: isinstance(n, cst.Subscript) and any(
            isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name) and e.slice.value.value == "None"
            for e in n.slice)):
        return None
    best = 0
    for c in k.calls(*_SHAPE_ARG):
        node = _shape(k, c)
        if node is None:
            continue
        n = size(node)
        if n is None:
            return None
        best = max(best, n)
    return best or None
