"""Playbook D: cast ``ct.mma`` operands to TF32 when the inputs are float32.

``ct.mma`` never casts: float32 operands run on FMA units (remark "Failure", 1 024 FFMA
per tile) instead of tensor cores.  The guard is dtype-conditional so that the same
kernel stays correct (and unchanged in IR) for f16/bf16 inputs::

    mma_dtype = ct.tfloat32 if A.dtype == ct.float32 else A.dtype
    ...
    acc = ct.mma(a.astype(mma_dtype), b.astype(mma_dtype), acc)

``A`` is the kernel array the first operand is loaded from (traced through single
assignments); the guard line goes at the top of the kernel body.  Operands that are
already cast, or provably not float32, make the transform refuse.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from ..source.analysis import DtypeInference, assignments, single_value, taken_names
from ..source.model import (Kernel, code, find_all, fresh_name, insert_in_body, lines_text, positional, refuse,
                             rewrite, stmt)
from .base import Plan, Transform


def _source_array(k: Kernel, node: cst.BaseExpression, binds, params: set[str], depth: int = 0) -> str | None:
    """The kernel parameter an operand is loaded from (``a = ct.load(A, ...)`` -> ``A``)."""
    if depth > 8:
        return None
    if isinstance(node, cst.Name):
        if node.value in params and len(binds.get(node.value, [])) == 1:
            return None      # a parameter used directly as an operand: not a tile
        v = single_value(binds, node.value)
        return _source_array(k, v, binds, params, depth + 1) if v is not None else None
    if isinstance(node, cst.Call):
        m = k.ct.called(node)
        if m in ("load", "load_advanced_indexing", "gather"):
            pos = positional(node)
            if pos and isinstance(pos[0].value, cst.Name) and pos[0].value.value in params \
                    and len(binds.get(pos[0].value.value, [])) == 1:
                return pos[0].value.value
            return None
        if m in ("transpose", "permute", "reshape") and positional(node):
            return _source_array(k, positional(node)[0].value, binds, params, depth + 1)
    return None


def _already_cast(k: Kernel, node: cst.BaseExpression, binds) -> bool:
    """The operand (or its single definition) ends in an astype / ct.astype."""
    seen = 0
    while isinstance(node, cst.Name) and seen < 8:
        v = single_value(binds, node.value)
        if v is None:
            return False
        node, seen = v, seen + 1
    if isinstance(node, cst.Call):
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "astype" \
                and k.ct.member(node.func) is None:
            return True
        return k.ct.called(node) == "astype"
    return False


@dataclass(frozen=True)
class Tf32Guard(Transform):
    """The operands of ``ct.mma`` cast to ``ct.tfloat32`` where the inputs are float32."""
    name: str = "tf32_guard"
    playbook_id: str = "D"
    summary: str = "cast ct.mma operands to ct.tfloat32 when the inputs are float32"
    PARAMS: ClassVar[dict[str, Any]] = {}

    def _plan(self, k: Kernel, params) -> Plan:
        mmas = k.calls("mma")
        if not mmas:
            refuse(f"{k.name} has no ct.mma")
        if "tfloat32" in {k.ct.member(n) for n in find_all(k.func.body, lambda n: isinstance(n, cst.Attribute))}:
            refuse(f"already applied: {k.name} already refers to ct.tfloat32")
        binds = assignments(k.func)
        params_ = set(k.param_names)
        types = DtypeInference(k)
        plans = []
        problems = []
        for c in mmas:
            pos = positional(c)
            if len(pos) < 2:
                problems.append(f"ct.mma at line {k.line(c)} has no two positional operands")
                continue
            x, y = pos[0].value, pos[1].value
            if _already_cast(k, x, binds) or _already_cast(k, y, binds):
                problems.append(f"the operands of ct.mma at line {k.line(c)} are already cast")
                continue
            tx, ty = types.dtype(x), types.dtype(y)
            if tx is not None and tx != "float32" or ty is not None and ty != "float32":
                problems.append(f"the operands of ct.mma at line {k.line(c)} are {tx or '?'} x {ty or '?'}, "
                                "not float32")
                continue
            arr = _source_array(k, x, binds, params_) or _source_array(k, y, binds, params_)
            if arr is None:
                problems.append(f"cannot tell which kernel array the operands of ct.mma at line "
                                f"{k.line(c)} come from ({code(x)}, {code(y)})")
                continue
            plans.append((c, arr))
        if not plans:
            refuse("; ".join(problems))
        taken = taken_names(k)
        var_for: dict[str, str] = {}
        guards = []
        for _, arr in plans:
            if arr not in var_for:
                var = fresh_name(taken, "mma_dtype" if not var_for else f"mma_dtype_{arr.lower()}")
                taken.add(var)
                var_for[arr] = var
                tf32, f32 = k.ct.ref("tfloat32"), k.ct.ref("float32")
                guards.append(stmt(f"{var} = {tf32} if {arr}.dtype == {f32} else {arr}.dtype"))
        edits: dict = {}
        for c, arr in plans:
            var = var_for[arr]

            def cast(n, var=var):
                args = list(n.args)
                for i in (0, 1):
                    v = args[i].value
                    if not isinstance(v, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not v.lpar:
                        v = v.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                    args[i] = args[i].with_changes(value=cst.Call(
                        func=cst.Attribute(value=v, attr=cst.Name("astype")), args=[cst.Arg(cst.Name(var))]))
                return n.with_changes(args=args)
            edits[c] = cast
        _, skip = k.body_statements()
        edits[k.func] = lambda f: insert_in_body(f, guards, after=skip)
        module = rewrite(k.module, edits)
        lines = [k.line(c) for c, _ in plans]
        desc = (f"TF32 guard: {', '.join(f'{v} from {a}.dtype' for a, v in var_for.items())}; "
                f"ct.mma operands cast ({lines_text(lines)})")
        return Plan(description=desc, params={}, module=module, notes=problems)
