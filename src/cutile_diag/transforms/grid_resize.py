"""Playbook Y: the grid of a kernel that is persistent already, sized to the resident slots.

A grid-stride kernel (``for t in range(ct.bid(0), n, ct.num_blocks(0))``) runs correctly on any
grid, and its wrapper usually sizes that grid from the SM count: ``(min(n, sms * 2),)``,
``(min(m, sms * blocks_per_sm),)`` with ``blocks_per_sm=2`` a parameter default, or just
``(sms,)``.  A light kernel keeps 8-16 blocks resident per SM, so 1-2 per SM leave most slots,
and the bytes they would keep in flight, idle (the persistent_rows example: 20 % of the H200's
measured ceiling).  The rewrite changes the blocks per SM where the wrapper writes them: the
integer literal multiplying the SM count, the integer default of the wrapper parameter that
does, or (no factor) ``sms`` -> ``sms * K``.  ``num_sms`` is any wrapper local bound once to an
expression reading ``multi_processor_count``.
Refusals: no ``ct.num_blocks`` in the kernel (a stride passed from the wrapper would have to
change with the grid), an autotuned launch, a grid without exactly one SM-count term, launches
that disagree on the current factor, a factor that is already the one asked for.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import libcst as cst

from ..source.analysis import assignments, require_launches, single_value
from ..source.model import (Kernel, TransformNotApplicable, TransformParamError, code, expr, find_all, int_value,
                             load, refuse, rewrite)
from .base import Plan, Transform

SWEEP = (4, 8, 16)


@dataclass
class _Factor:
    """Where one launch's blocks per SM are written, and their current value."""
    line: int
    value: int
    node: cst.CSTNode          # the Integer to replace, or the bare SM-count Name
    kind: str                  # literal | default | bare
    where: str


def _sm_names(binds) -> set[str]:
    return {n for n in binds if (v := single_value(binds, n)) is not None and "multi_processor_count" in code(v)}


def _factors(k: Kernel) -> list[_Factor]:
    if not k.calls("num_blocks"):
        refuse(f"{k.name} does not stride over ct.num_blocks(0): its grid cannot change on its own "
               "(not persistent, or a stride passed from the wrapper)")
    out = []
    for s in require_launches(k, "a grid resize"):
        if s.func is None or s.grid is None:
            refuse(f"the launch at line {s.line} is not inside a host function with a readable grid")
        binds = assignments(s.func)
        sms = _sm_names(binds)
        if not sms:
            refuse(f"the wrapper {s.function}() does not read the SM count (multi_processor_count)")
        g = s.grid
        els = [e.value for e in g.elements] if isinstance(g, (cst.Tuple, cst.List)) else None
        if els is None or not (len(els) == 1 or all(int_value(e) == 1 for e in els[1:])):
            refuse(f"the grid of the launch at line {s.line} is `{code(g)}`, not a 1-D tuple")
        e0 = els[0]
        if isinstance(e0, cst.Name) and single_value(binds, e0.value) is not None:
            e0 = single_value(binds, e0.value)          # grid = (grid_size,) with grid_size = min(...)
        uses = find_all(e0, lambda n: isinstance(n, cst.Name) and n.value in sms)
        if len(uses) != 1:
            refuse(f"the grid at line {s.line} (`{code(e0)}`) reads the SM count {len(uses)} times, not once")
        use = uses[0]
        mul = next((b for b in find_all(e0, lambda n: isinstance(n, cst.BinaryOperation)
                                        and isinstance(n.operator, cst.Multiply))
                    if b.left is use or b.right is use), None)
        other = None if mul is None else (mul.right if mul.left is use else mul.left)
        line = k.line(s.grid_binding) if s.grid_binding is not None else s.line
        if mul is None:
            out.append(_Factor(line, 1, use, "bare", f"`{code(e0)}`"))
        elif int_value(other) is not None:
            out.append(_Factor(line, int_value(other), other, "literal", f"`{code(mul)}`"))
        elif isinstance(other, cst.Name):
            param = next((p for p in s.func.params.params if p.name.value == other.value), None)
            if param is not None and int_value(param.default) is not None \
                    and len(binds.get(other.value, [])) == 1:
                out.append(_Factor(line, int_value(param.default), param.default, "default",
                                   f"`{code(mul)}` with {other.value}={int_value(param.default)} by default"))
            elif int_value(single_value(binds, other.value)) is not None:
                v = single_value(binds, other.value)
                out.append(_Factor(line, int_value(v), v, "literal", f"`{code(mul)}` with {other.value} = {code(v)}"))
            else:
                refuse(f"the SM count at line {line} is multiplied by `{code(other)}`, which is not a literal "
                       "or a parameter's integer default")
        else:
            refuse(f"the SM count at line {line} is multiplied by `{code(other)}`, not an integer")
    if len({f.value for f in out}) > 1:
        refuse("the launches use different blocks per SM: " + ", ".join(f"{f.value} (line {f.line})" for f in out))
    return out


@dataclass(frozen=True)
class GridResize(Transform):
    """The blocks per SM of a persistent kernel's SM-count grid, set where the wrapper writes them (``blocks_per_sm``,
    required)."""
    name: str = "grid_resize"
    playbook_id: str = "Y"
    summary: str = "a persistent kernel's SM-count grid: blocks per SM where the wrapper writes them"
    PARAMS: ClassVar[dict[str, Any]] = {"blocks_per_sm": None}
    REQUIRES_PARAMS: ClassVar[bool] = True

    def _plan(self, k: Kernel, params) -> Plan:
        bps = params["blocks_per_sm"]
        if isinstance(bps, bool) or not isinstance(bps, int) or not 1 <= bps <= 64:
            raise TransformParamError(f"{self.name}: blocks_per_sm must be an integer in 1..64, got {bps!r}")
        facs = _factors(k)
        if facs[0].value == bps:
            refuse(f"already {bps} block(s) per SM ({facs[0].where}, line {facs[0].line})")
        edits: dict = {}
        for f in facs:
            if f.kind == "bare":
                edits[f.node] = lambda node: expr(f"{node.value} * {bps}")
            else:
                edits[f.node] = lambda node: cst.Integer(str(bps))
        desc = (f"blocks per SM {facs[0].value} -> {bps}: " + "; ".join(f"{f.where} (line {f.line})" for f in facs))
        return Plan(description=desc, params={"blocks_per_sm": bps}, module=rewrite(k.module, edits))

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """The swept blocks per SM above the current value; [] when the kernel is not persistent."""
        try:
            cur = _factors(load(source, kernel_name))[0].value
        except TransformNotApplicable:
            return []
        return [{"blocks_per_sm": v} for v in SWEEP if v > cur]

    def candidates_for(self, source: str, kernel_name: str, facts: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The resident blocks per SM of the compiled kernel first (a full wave), then half of it,
        then the sweep: only settings above the current one."""
        try:
            cur = _factors(load(source, kernel_name))[0].value
        except TransformNotApplicable:
            return []
        resident = facts.get("cubin.resident_ctas")
        first = [resident, resident // 2] if isinstance(resident, int) and not isinstance(resident, bool) \
            and 1 <= resident <= 64 else []
        return [{"blocks_per_sm": v} for v in dict.fromkeys([*first, *SWEEP]) if cur < v <= 64]

    def _why_no_candidates(self, source: str, kernel_name: str) -> str:
        try:
            cur = _factors(load(source, kernel_name))[0].value
        except TransformNotApplicable as e:
            return e.reason
        return f"already {cur} blocks per SM, the largest setting tried"
