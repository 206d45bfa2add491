"""Playbook C: kernel-level hints — ``occupancy``, ``num_ctas``, ``num_worker_warps``.

``kernel_hints`` writes them into the ``@ct.kernel(...)`` decorator (a bare
``@ct.kernel`` becomes a call) — what the loop commits once a value has won.  Its twin
``replace_hints`` sweeps the same knobs without touching the source.

A knob the host code sets over the decorator (an autotuned wrapper's ``replace_hints`` or
its search's ``hints_fn``, ``analysis.hint_overrides``) is refused: the decorator value
would compile to the same kernel, an iteration spent on nothing.

Values are checked like cuTile's ``CompilerOptions`` does (occupancy 1..32, num_ctas a
power of two ≤ 16, num_worker_warps a power of two ≤ 32, opt_level 0..3).  Sweeps follow
TileGym: occupancy {1, 2, 4, 8}, num_ctas {2, 4} (clusters, sm_90+), num_worker_warps
{4, 8} (the only values cuTile 1.7.0 compiles).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from ..source.model import (Kernel, TransformParamError, code, expr, kwarg, literal_value, refuse, rewrite,
                             set_kwargs)
from .base import Plan, Transform
from ..source.analysis import ALL_HINTS, hint_overrides

KNOBS = ("occupancy", "num_ctas", "num_worker_warps", "opt_level")
SWEEPS: dict[str, tuple[int, ...]] = {"occupancy": (1, 2, 4, 8), "num_ctas": (2, 4),
                                      "num_worker_warps": (4, 8)}


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def check_hints(who: str, params: dict[str, Any]) -> dict[str, int]:
    """The requested (non-None) knobs, validated; at least one is required."""
    hints = {n: v for n, v in params.items() if n in KNOBS and v is not None}
    if not hints:
        raise TransformParamError(f"{who}: give at least one of {', '.join(KNOBS)}")
    for n, v in hints.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise TransformParamError(f"{who}: {n} must be an integer, got {v!r}")
        ok = {"occupancy": 1 <= v <= 32, "num_ctas": _pow2(v) and v <= 16,
              "num_worker_warps": _pow2(v) and v <= 32, "opt_level": 0 <= v <= 3}[n]
        if not ok:
            rule = {"occupancy": "in 1..32", "num_ctas": "a power of two in 1..16",
                    "num_worker_warps": "a power of two in 1..32", "opt_level": "in 0..3"}[n]
            raise TransformParamError(f"{who}: {n} must be {rule}, got {v}")
    return hints


def decorator_hints(k: Kernel) -> dict[str, Any]:
    """Knobs the decorator sets: literal ints as values, anything else (ByTarget) as text."""
    d = k.decorator.decorator
    out: dict[str, Any] = {}
    if isinstance(d, cst.Call):
        for n in KNOBS:
            a = kwarg(d, n)
            if a is not None:
                v = literal_value(a.value)
                out[n] = v if isinstance(v, int) and not isinstance(v, bool) else code(a.value)
    return out


def refuse_overridden(k: Kernel, hints: dict[str, Any]) -> dict[str, Any]:
    """The requested hints the host code does not override; refuses when none is left, since
    an overridden decorator value (autotuned kernels: the wrapper's replace_hints or the
    search's hints_fn) compiles to the same kernel and would spend an iteration on nothing."""
    over = hint_overrides(k)
    lost = {n: over.get(n) or over[ALL_HINTS] for n in hints if n in over or ALL_HINTS in over}
    if lost and len(lost) == len(hints):
        where = "; ".join(f"{n} by {what} at line {line}" for n, (line, what) in lost.items())
        refuse(f"the launch wrapper overrides {', '.join(lost)} ({where}), so a decorator value "
               f"is a no-op; change {'it' if len(lost) == 1 else 'them'} in the autotune search space")
    return {n: v for n, v in hints.items() if n not in lost}


def _sweep_candidates(t: Transform, source: str, kernel_name: str,
                      overwrite: bool = False) -> list[dict[str, Any]]:
    out = [{knob: v, **({"overwrite": True} if overwrite else {})}
           for knob, vals in SWEEPS.items() for v in vals]
    return [c for c in out if t.applicable(source, kernel_name, **c)[0]]


def _why_none(t: Transform, source: str, kernel_name: str, **extra) -> str:
    """Why no sweep value applies: the distinct refusals (already set, overridden by the wrapper)."""
    whys = [t.applicable(source, kernel_name, **{knob: v}, **extra)[1] for knob, vals in SWEEPS.items() for v in vals]
    return "; ".join(dict.fromkeys(whys)) or "every candidate value is already set"


def _describe(hints: dict[str, int]) -> str:
    return ", ".join(f"{n}={v}" for n, v in hints.items())


@dataclass(frozen=True)
class KernelHints(Transform):
    """``occupancy`` / ``num_ctas`` / ``num_worker_warps`` written into the ``@ct.kernel(...)`` decorator; a value it
    already sets is replaced only with ``overwrite=True``."""
    name: str = "kernel_hints"
    playbook_id: str = "C"
    summary: str = "occupancy / num_ctas / num_worker_warps in the @ct.kernel(...) decorator"
    PARAMS: ClassVar[dict[str, Any]] = {**{n: None for n in KNOBS}, "overwrite": False}
    REQUIRES_PARAMS: ClassVar[bool] = True

    def _plan(self, k: Kernel, params) -> Plan:
        asked = check_hints(self.name, params)
        hints = refuse_overridden(k, asked)
        current = decorator_hints(k)
        todo, same, blocked = {}, [], []
        for n, v in hints.items():
            if n in current:
                if current[n] == v:
                    same.append(n)
                    continue
                if not params["overwrite"]:
                    blocked.append(f"{n}={current[n]}")
                    continue
            todo[n] = v
        if blocked and not todo:
            refuse(f"the decorator already sets {', '.join(blocked)}; pass overwrite=True to replace")
        if not todo:
            refuse(f"already applied: the decorator sets {_describe({n: hints[n] for n in same})}")

        def edit(dec: cst.Decorator) -> cst.Decorator:
            d = dec.decorator
            call = d if isinstance(d, cst.Call) else cst.Call(func=d, args=[])
            return dec.with_changes(decorator=set_kwargs(call, [(n, expr(str(v))) for n, v in todo.items()]))
        notes = [f"left {', '.join(blocked)} as the decorator sets it"] if blocked else []
        if len(hints) < len(asked):
            notes.append(f"left out {', '.join(sorted(set(asked) - set(hints)))}: the launch wrapper overrides it")
        return Plan(description=f"@{k.ct.prefix}.kernel({_describe(todo)}) on {k.func.name.value}",
                    params=dict(todo), module=rewrite(k.module, {k.decorator: edit}), notes=notes)

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """One candidate per swept value of each knob, overwriting what the decorator sets."""
        # a sweep moves a knob the decorator may already set: overwrite is implied
        return _sweep_candidates(self, source, kernel_name, overwrite=True)

    def _why_no_candidates(self, source: str, kernel_name: str) -> str:
        return _why_none(self, source, kernel_name, overwrite=True)
