"""Playbook H (part 2): approximate division, ``rounding_mode=ct.RoundingMode.APPROX``.

Float32 ``/`` becomes ``ct.truediv(a, b, rounding_mode=ct.RoundingMode.APPROX)`` (one
MUFU.RCP + multiply instead of a full-precision division) and float32 ``ct.truediv``
calls without a rounding mode gain it.  With ``ops`` the same rounding can be asked for
``sqrt``, ``tanh`` (MUFU.TANH) and ``exp``; APPROX is float32-only, so only provably
float32 ops are touched.  Calls with an explicit ``rounding_mode`` are left alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...source.analysis import DtypeInference
from ...source.model import (Kernel, TransformParamError, code, expr, kwarg, lines_text, refuse, rewrite,
                             set_kwargs)
from .base import Plan, Transform
from .flush_to_zero import DIV, div_to_truediv, divisions

APPROX_OPS = ("truediv", "sqrt", "tanh", "exp")


@dataclass(frozen=True)
class ApproxDiv(Transform):
    name: str = "approx_div"
    playbook_id: str = "H"
    summary: str = "float32 division with rounding_mode=APPROX (`/` -> ct.truediv)"
    PARAMS: ClassVar[dict[str, Any]] = {"ops": ("truediv", DIV)}

    def _plan(self, k: Kernel, params) -> Plan:
        ops = tuple(params["ops"] or ("truediv", DIV))
        bad = [o for o in ops if o not in APPROX_OPS + (DIV,)]
        if bad:
            raise TransformParamError(f"approx_div: no APPROX rounding for {', '.join(bad)}",
                                      hint="ops: " + ", ".join(APPROX_OPS + (DIV,)))
        approx = k.ct.ref("RoundingMode.APPROX")
        types = DtypeInference(k)
        edits, done, skipped, already, explicit = {}, {}, {}, [], []
        for c in k.calls(*[o for o in ops if o != DIV]):
            m = k.ct.called(c)
            have = kwarg(c, "rounding_mode")
            if have is not None:
                (already if code(have.value).endswith("RoundingMode.APPROX") else explicit).append(k.line(c))
                continue
            if not types.is_f32(c):
                skipped.setdefault(f"ct.{m}", []).append(k.line(c))
                continue
            edits[c] = lambda n: set_kwargs(n, [("rounding_mode", expr(approx))])
            done.setdefault(f"ct.{m}", []).append(k.line(c))
        if DIV in ops:
            for d in divisions(k):
                if not types.is_f32(d):
                    skipped.setdefault("/", []).append(k.line(d))
                    continue
                edits[d] = lambda n: div_to_truediv(k, n, [("rounding_mode", approx)])
                done.setdefault("/ -> ct.truediv", []).append(k.line(d))
        notes = []
        if skipped:
            notes.append("not provably float32, left alone: " + "; ".join(
                f"{op} ({lines_text(ls)})" for op, ls in skipped.items()))
        if explicit:
            notes.append(f"rounding_mode set explicitly, left alone: {lines_text(explicit)}")
        if not edits:
            if already:
                refuse(f"already applied: rounding_mode=APPROX at {lines_text(already)}")
            if skipped:
                refuse("no division is provably float32 (APPROX is float32-only): "
                       + notes[0].split(": ", 1)[1])
            if explicit:
                refuse(f"every division sets rounding_mode explicitly ({lines_text(explicit)})")
            refuse(f"{k.name} has no float division ({', '.join(ops)})")
        desc = "rounding_mode=APPROX on " + "; ".join(f"{op} ({lines_text(ls)})" for op, ls in done.items())
        return Plan(description=desc, params={"ops": list(ops)}, module=rewrite(k.module, edits), notes=notes)
