"""Playbook H (part 3): ``ct.exp(x)`` -> ``ct.exp2(x * LOG2E)``.

``ct.exp`` is fixed to FULL rounding and takes no flush_to_zero; ``exp2`` maps straight to
MUFU.EX2 and accepts FTZ, so the respelling is the usual first step of a softmax-style
speed-up.  ``LOG2E`` is added as a module constant after the imports (an existing
``LOG2E`` with the same value is reused; a different one makes the constant take a fresh
name).  Calls with an explicit ``rounding_mode`` are left alone: exp2 has none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from ..source.model import (Kernel, all_names, expr, fresh_name, kwarg, lines_text, literal_value,
                             module_bindings, positional, refuse, rewrite, stmt, times)
from .base import Plan, Transform

LOG2E = 1.4426950408889634   # log2(e), so exp(x) == exp2(x * LOG2E)

def scaled(arg: cst.BaseExpression, const: str) -> cst.BinaryOperation:
    """``arg * const``, the exponent's argument scaled by the named constant."""
    return times(arg, cst.Name(const))


def _insert_index(module: cst.Module) -> int:
    """Index in ``module.body`` after the docstring and the leading imports."""
    idx = 0
    for i, s in enumerate(module.body):
        if isinstance(s, cst.SimpleStatementLine) and all(
                isinstance(x, (cst.Import, cst.ImportFrom)) or
                (i == 0 and isinstance(x, cst.Expr) and isinstance(x.value, (cst.SimpleString, cst.ConcatenatedString)))
                for x in s.body):
            idx = i + 1
        else:
            break
    return idx


@dataclass(frozen=True)
class ExpToExp2(Transform):
    """``ct.exp(x)`` -> ``ct.exp2(x * LOG2E)``, with a module-level LOG2E (reused when one of the same value exists).
    ``ct.exp(x)`` -> ``ct.exp2(x * LOG2E)``, with a module-level LOG2E (reused when one of the same value exists)."""
    name: str = "exp_to_exp2"
    playbook_id: str = "H"
    summary: str = "ct.exp(x) -> ct.exp2(x * LOG2E)"
    PARAMS: ClassVar[dict[str, Any]] = {}

    def _plan(self, k: Kernel, params) -> Plan:
        exps = k.calls("exp")
        if not exps:
            if k.calls("exp2"):
                refuse(f"already applied: {k.name} uses ct.exp2 and no ct.exp")
            refuse(f"{k.name} has no ct.exp")
        todo, explicit = [], []
        for c in exps:
            if kwarg(c, "rounding_mode") is not None or len(positional(c)) != 1 or len(c.args) != 1:
                explicit.append(k.line(c))
            else:
                todo.append(c)
        if not todo:
            refuse(f"every ct.exp has extra arguments (rounding_mode) that exp2 does not take "
                   f"({lines_text(explicit)})")
        # the module constant: reuse a LOG2E of the same value, else pick a free name
        binds = module_bindings(k.module)
        const, add_const = "LOG2E", True
        existing = binds.get("LOG2E", [])
        if existing:
            v = literal_value(existing[0].value) if len(existing) == 1 and existing[0].value is not None else None
            if isinstance(v, float) and math.isclose(v, LOG2E, rel_tol=1e-12):
                add_const = False
            else:
                const = fresh_name(all_names(k.module), "LOG2E")
        if add_const and const in all_names(k.func):
            const = fresh_name(all_names(k.module), "LOG2E")
        exp2 = k.ct.ref("exp2")
        edits: dict = {}
        for c in todo:
            edits[c] = lambda n: n.with_changes(func=expr(exp2),
                                                args=[n.args[0].with_changes(value=scaled(n.args[0].value, const))])
        if add_const:
            idx = _insert_index(k.module)
            anchor = k.module.body[idx] if idx < len(k.module.body) else None
            new = stmt(f"{const} = {LOG2E!r}  # log2(e): exp(x) == exp2(x * {const})")
            if anchor is None:
                module = rewrite(k.module, edits)
                module = module.with_changes(body=[*module.body, new])
            else:
                # keep the blank lines that separated the imports from what follows
                edits[anchor] = lambda n, new=new: cst.FlattenSentinel([
                    new.with_changes(leading_lines=[cst.EmptyLine()]), n])
                module = rewrite(k.module, edits)
        else:
            module = rewrite(k.module, edits)
        lines = [k.line(c) for c in todo]
        desc = f"ct.exp -> ct.exp2(x * {const}) ({lines_text(lines)})"
        notes = [f"left ct.exp with rounding_mode alone ({lines_text(explicit)})"] if explicit else []
        if add_const:
            notes.append(f"added module constant {const} = {LOG2E!r}")
        return Plan(description=desc, params={"constant": const}, module=module, notes=notes)
