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

from ..source.model import (Kernel, TransformParamError, code, lines_text, refuse, rewrite)
from .base import Plan, Transform
from .flush_to_zero import DIV, f32_kwarg_edits

APPROX_OPS = ("truediv", "sqrt", "tanh", "exp")


@dataclass(frozen=True)
class ApproxDiv(Transform):
    """``rounding_mode=APPROX`` on the kernel's provably float32 divisions (``/`` becomes ``ct.truediv``); ``ops``
    picks which."""
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
        r = f32_kwarg_edits(k, ops, "rounding_mode", approx,
                            lambda v: code(v).endswith("RoundingMode.APPROX"))
        edits, done, skipped, already, explicit, notes = (r.edits, r.done, r.skipped, r.already, r.explicit,
                                                          r.notes)
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
