"""Playbook E: ``latency=N`` on the kernel's loads, stores, gathers and scatters.

``latency`` (1..10) tells tileiras how much DRAM traffic to expect from an op and so how
deep to prefetch.  Defaults by role follow TileGym's catalog and wiki: loads in the main
loop 10, other loads (prologue/epilogue) 3, stores 3, gathers/scatters 1.  A kernel
without a loop around its loads has only main-loop loads.  Calls that already carry a
``latency=`` are left alone unless ``overwrite=True``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from ..source.model import (Kernel, TransformParamError, expr, int_value, kwarg, lines_text, refuse, rewrite,
                             set_kwargs)
from .base import Plan, Transform

ROLES = ("main_load", "load", "store", "gather", "scatter")
ROLE_DEFAULTS = {"main_load": 10, "load": 3, "store": 3, "gather": 1, "scatter": 1}
ROLE_WORDS = {"main_load": "main-loop load", "load": "other load", "store": "store",
              "gather": "gather", "scatter": "scatter"}
_MEMBERS = {"load": "load", "load_advanced_indexing": "load", "store": "store",
            "store_advanced_indexing": "store", "gather": "gather", "scatter": "scatter"}
SWEEP = (1, 2, 3, 6, 10)


def memory_calls(k: Kernel) -> list[tuple[cst.Call, str]]:
    """(call, role) for every load/store/gather/scatter in the kernel body."""
    calls = k.calls(*_MEMBERS)
    loads = [c for c in calls if _MEMBERS[k.ct.called(c)] == "load"]
    any_loop_load = any(k.in_loop(c, stop=k.func) for c in loads)
    out = []
    for c in calls:
        kind = _MEMBERS[k.ct.called(c)]
        if kind == "load":
            role = "main_load" if (k.in_loop(c, stop=k.func) or not any_loop_load) else "load"
        else:
            role = kind
        out.append((c, role))
    return out


def _check_latency(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10:
        raise TransformParamError(f"latency_hints: {what} must be an integer in 1..10, got {v!r}")
    return v


@dataclass(frozen=True)
class LatencyHints(Transform):
    """``latency=N`` on the kernel's loads, stores, gathers and scatters, per role (defaults per role, ``latency`` for
    all, ``values`` per role)."""
    name: str = "latency_hints"
    playbook_id: str = "E"
    summary: str = "latency=N on loads/stores/gathers/scatters that lack it"
    PARAMS: ClassVar[dict[str, Any]] = {"latency": None, "roles": None, "values": None,
                                        "overwrite": False}

    def _values(self, params) -> tuple[dict[str, int], tuple[str, ...]]:
        roles = tuple(params["roles"] or ROLES)
        bad = [r for r in roles if r not in ROLES]
        if bad:
            raise TransformParamError(f"latency_hints: unknown role(s) {', '.join(bad)}",
                                      hint="roles: " + ", ".join(ROLES))
        values = dict(ROLE_DEFAULTS)
        for r, v in (params["values"] or {}).items():
            if r not in ROLES:
                raise TransformParamError(f"latency_hints: unknown role '{r}' in values",
                                          hint="roles: " + ", ".join(ROLES))
            values[r] = _check_latency(v, f"values[{r!r}]")
        if params["latency"] is not None:
            lat = _check_latency(params["latency"], "latency")
            values.update({r: lat for r in roles})
        return {r: values[r] for r in roles}, roles

    def _plan(self, k: Kernel, params) -> Plan:
        values, roles = self._values(params)
        overwrite = bool(params["overwrite"])
        found = memory_calls(k)
        if not found:
            refuse(f"{k.name} has no ct.load / ct.store / ct.gather / ct.scatter")
        selected = [(c, r) for c, r in found if r in roles]
        if not selected:
            refuse(f"{k.name} has no {' / '.join(ROLE_WORDS[r] for r in roles)}")
        edits, done, kept = {}, {}, []
        for c, role in selected:
            want = values[role]
            have = kwarg(c, "latency")
            if have is not None:
                cur = int_value(have.value)
                if cur == want or not overwrite:
                    kept.append(c)
                    continue
            edits[c] = lambda node, want=want: set_kwargs(node, [("latency", expr(str(want)))])
            done.setdefault((role, want), []).append(k.line(c))
        if not edits:
            refuse(f"already applied: every selected call carries latency= ({lines_text(k.line(c) for c in kept)})"
                   + ("" if overwrite else "; pass overwrite=True to change existing values"))
        parts = []
        for (role, want), lines in done.items():
            n = len(lines)
            parts.append(f"latency={want} on {n} {ROLE_WORDS[role]}{'s' if n > 1 else ''} ({lines_text(lines)})")
        notes = []
        if kept:
            notes.append(f"left {len(kept)} call(s) with an existing latency= alone ({lines_text(k.line(c) for c in kept)})")
        return Plan(description="; ".join(parts), params={"values": values, "overwrite": overwrite},
                    module=rewrite(k.module, edits), notes=notes)

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """The role defaults, then swept latencies on the main load and on stores, those that apply."""
        out: list[dict[str, Any]] = [{}]
        out += [{"roles": ["main_load"], "latency": v} for v in SWEEP]
        out += [{"roles": ["store"], "latency": v} for v in (1, 3)]
        return [c for c in out if self.applicable(source, kernel_name, **c)[0]]
