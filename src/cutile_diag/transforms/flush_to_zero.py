"""Playbook H (part 1): ``flush_to_zero=True`` on the float32 ops that take it.

Ops: ``exp2 rsqrt sqrt truediv`` and the reductions / binary ops ``sum prod cumsum
cumprod max min maximum minimum add sub mul`` (``ct.exp`` has no FTZ: see exp_to_exp2).
A ``/`` between float32 tiles becomes ``ct.truediv(a, b, flush_to_zero=True)``.
cuTile rejects FTZ on anything but float32 at compile time, so an op is only touched
when its dtype is provably float32 (``DtypeInference``); ops on loads of unknown dtype are
skipped and reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import libcst as cst

from ..source.analysis import DtypeInference
from ..source.model import (Kernel, TransformParamError, expr, find_all, kwarg, lines_text, literal_value,
                             refuse, rewrite, set_kwargs)
from .base import Plan, Transform

FTZ_OPS = ("exp2", "rsqrt", "sqrt", "truediv", "sum", "prod", "cumsum", "cumprod", "max", "min",
           "maximum", "minimum", "add", "sub", "mul")
DIV = "/"


def divisions(k: Kernel) -> list[cst.BinaryOperation]:
    """Every ``a / b`` in the kernel's body."""
    return find_all(k.func.body, lambda n: isinstance(n, cst.BinaryOperation)
                    and isinstance(n.operator, cst.Divide))


def div_to_truediv(k: Kernel, node: cst.BinaryOperation, kwargs: list[tuple[str, str]]) -> cst.Call:
    """``a / b`` -> ``ct.truediv(a, b, **kwargs)`` (parentheses of the operation kept)."""
    call = cst.Call(func=expr(k.ct.ref("truediv")),
                    args=[cst.Arg(node.left), cst.Arg(node.right)],
                    lpar=node.lpar, rpar=node.rpar)
    return set_kwargs(call, [(n, expr(v)) for n, v in kwargs])


def _names(ops) -> str:
    return ", ".join(ops)


@dataclass
class F32Edits:
    """The edits of a float32-only keyword (FTZ, APPROX) and what was left alone, by op."""
    edits: dict = field(default_factory=dict)
    done: dict[str, list[int]] = field(default_factory=dict)
    skipped: dict[str, list[int]] = field(default_factory=dict)
    already: list[int] = field(default_factory=list)
    explicit: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def f32_kwarg_edits(k: Kernel, ops, kw: str, value: str, applied: Callable[[cst.BaseExpression], bool]) -> F32Edits:
    """``kw=value`` on the provably float32 ``ct`` calls of ``ops``, and float32 ``/`` (when ``DIV``
    is in ``ops``) -> ``ct.truediv(a, b, kw=value)``; a call that already has ``kw`` is left alone
    (``already`` when ``applied`` says it holds the value, else ``explicit``)."""
    types = DtypeInference(k)
    r = F32Edits()
    for c in k.calls(*[o for o in ops if o != DIV]):
        m = k.ct.called(c)
        have = kwarg(c, kw)
        if have is not None:
            (r.already if applied(have.value) else r.explicit).append(k.line(c))
            continue
        if not types.is_f32(c):
            r.skipped.setdefault(f"ct.{m}", []).append(k.line(c))
            continue
        r.edits[c] = lambda n: set_kwargs(n, [(kw, expr(value))])
        r.done.setdefault(f"ct.{m}", []).append(k.line(c))
    if DIV in ops:
        for d in divisions(k):
            if not types.is_f32(d):
                r.skipped.setdefault("/", []).append(k.line(d))
                continue
            r.edits[d] = lambda n: div_to_truediv(k, n, [(kw, value)])
            r.done.setdefault("/ -> ct.truediv", []).append(k.line(d))
    if r.skipped:
        r.notes.append("not provably float32, left alone: " + "; ".join(
            f"{op} ({lines_text(ls)})" for op, ls in r.skipped.items()))
    if r.explicit:
        r.notes.append(f"{kw} set explicitly, left alone: {lines_text(r.explicit)}")
    return r


@dataclass(frozen=True)
class FlushToZero(Transform):
    """``flush_to_zero=True`` on the kernel's provably float32 ops that take it (``ops`` picks which; ``/`` becomes
    ``ct.truediv``)."""
    name: str = "flush_to_zero"
    playbook_id: str = "H"
    summary: str = "flush_to_zero=True on float32 exp2/rsqrt/sqrt/div/reductions; `/` -> ct.truediv"
    PARAMS: ClassVar[dict[str, Any]] = {"ops": None}

    def _plan(self, k: Kernel, params) -> Plan:
        ops = tuple(params["ops"] or FTZ_OPS + (DIV,))
        bad = [o for o in ops if o not in FTZ_OPS + (DIV,)]
        if bad:
            raise TransformParamError(f"flush_to_zero: cannot flush {', '.join(bad)}",
                                      hint="ops: " + ", ".join(FTZ_OPS + (DIV,)))
        r = f32_kwarg_edits(k, ops, "flush_to_zero", "True", lambda v: literal_value(v) is True)
        edits, done, skipped, already, notes = r.edits, r.done, r.skipped, r.already, r.notes
        if not edits:
            if already:
                refuse(f"already applied: flush_to_zero=True at {lines_text(already)}"
                       + (f"; {notes[0]}" if skipped else ""))
            if skipped:
                refuse("no op is provably float32 (FTZ is float32-only): " + notes[0].split(": ", 1)[1])
            refuse(f"{k.name} has no op that takes flush_to_zero ({_names(ops)})")
        desc = "flush_to_zero=True on " + "; ".join(f"{op} ({lines_text(ls)})" for op, ls in done.items())
        return Plan(description=desc, params={"ops": list(ops)}, module=rewrite(k.module, edits),
                    notes=notes)
