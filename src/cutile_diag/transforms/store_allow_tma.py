"""Playbook F: ``allow_tma=False`` on the kernel's ``ct.store`` calls (and, with ``loads=True``,
on its tile ``ct.load`` calls too).

Routing stores through plain global stores instead of TMA often wins 10–30 % on
row/elementwise kernels and sometimes loses: the loop always measures it.  With TMA on any
load or store of a kernel without mma, tileiras on sm_90 warp-specialises it (256 threads,
``setmaxnreg``, 255 registers at launch: one resident block per SM), which starves a
one-row-per-block kernel; ``loads=True`` takes every tile load and store off TMA so the kernel
keeps 128 threads and its real register count.  A call that already says ``allow_tma=...`` is
a deliberate choice and is left alone unless ``overwrite=True``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..source.model import (Kernel, TransformNotApplicable, expr, kwarg, lines_text, literal_value, refuse,
                             rewrite, set_kwargs)
from .base import Plan, Transform

_STORES = ("store", "store_advanced_indexing")
_LOADS = ("load", "load_advanced_indexing")


@dataclass(frozen=True)
class StoreAllowTmaFalse(Transform):
    """``allow_tma=False`` on the kernel's ``ct.store`` calls (``loads=True``: on its ``ct.load`` calls too)."""
    name: str = "store_allow_tma_false"
    playbook_id: str = "F"
    summary: str = "allow_tma=False on ct.store calls (loads=True: and on ct.load calls)"
    PARAMS: ClassVar[dict[str, Any]] = {"overwrite": False, "loads": False}

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """Stores alone, then stores and loads; a setting that rewrites nothing new is dropped."""
        out, seen = [], set()
        for p in ({}, {"loads": True}):
            try:
                new = self.apply(source, kernel_name, **p).new_source
            except TransformNotApplicable:
                continue
            if new not in seen:
                seen.add(new)
                out.append(p)
        return out

    def _plan(self, k: Kernel, params) -> Plan:
        kinds = _STORES + (_LOADS if params["loads"] else ())
        calls = k.calls(*kinds)
        if not calls:
            refuse(f"{k.name} has no ct.store" + (" or ct.load" if params["loads"] else ""))
        edits, lines, already, explicit = {}, {"store": [], "load": []}, [], []
        for c in calls:
            have = kwarg(c, "allow_tma")
            if have is not None:
                if literal_value(have.value) is False:
                    already.append(k.line(c))
                    continue
                if not params["overwrite"]:
                    explicit.append(k.line(c))
                    continue
            edits[c] = lambda n: set_kwargs(n, [("allow_tma", expr("False"))])
            lines["load" if k.ct.called(c) in _LOADS else "store"].append(k.line(c))
        what = "ct.store" + (" / ct.load" if params["loads"] else "")
        if not edits:
            if explicit:
                refuse(f"the {what} call(s) at {lines_text(explicit)} set allow_tma explicitly; "
                       f"pass overwrite=True to replace it"
                       + (f" (already False at {lines_text(already)})" if already else ""))
            refuse(f"already applied: every {what} has allow_tma=False ({lines_text(already)})")
        parts = []
        for kind in ("store", "load"):
            n = len(lines[kind])
            if n:
                parts.append(f"{n} {kind}{'s' if n > 1 else ''} ({lines_text(lines[kind])})")
        desc = "allow_tma=False on " + " and ".join(parts)
        out = {"overwrite": bool(params["overwrite"])}
        if params["loads"]:
            out["loads"] = True
            desc += " (no TMA anywhere: no warp specialisation, the kernel keeps its register count)"
        return Plan(description=desc, params=out, module=rewrite(k.module, edits))
