"""Playbook F: ``allow_tma=False`` on the kernel's ``ct.store`` calls.

Routing stores through plain global stores instead of TMA often wins 10–30 % on
row/elementwise kernels and sometimes loses: the loop always measures it.  A store that
already says ``allow_tma=...`` is a deliberate choice and is left alone unless
``overwrite=True``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .base import Kernel, Plan, Transform, expr, kwarg, lines_text, literal_value, refuse, rewrite, set_kwargs

_STORES = ("store", "store_advanced_indexing")


@dataclass(frozen=True)
class StoreAllowTmaFalse(Transform):
    name: str = "store_allow_tma_false"
    playbook_id: str = "F"
    summary: str = "allow_tma=False on ct.store calls"
    PARAMS: ClassVar[dict[str, Any]] = {"overwrite": False}

    def _plan(self, k: Kernel, params) -> Plan:
        stores = k.calls(*_STORES)
        if not stores:
            refuse(f"{k.name} has no ct.store")
        edits, lines, already, explicit = {}, [], [], []
        for c in stores:
            have = kwarg(c, "allow_tma")
            if have is not None:
                if literal_value(have.value) is False:
                    already.append(k.line(c))
                    continue
                if not params["overwrite"]:
                    explicit.append(k.line(c))
                    continue
            edits[c] = lambda n: set_kwargs(n, [("allow_tma", expr("False"))])
            lines.append(k.line(c))
        if not edits:
            if explicit:
                refuse(f"the store(s) at {lines_text(explicit)} set allow_tma explicitly; "
                       f"pass overwrite=True to replace it"
                       + (f" (already False at {lines_text(already)})" if already else ""))
            refuse(f"already applied: every ct.store has allow_tma=False ({lines_text(already)})")
        n = len(lines)
        return Plan(description=f"allow_tma=False on {n} store{'s' if n > 1 else ''} ({lines_text(lines)})",
                    params={"overwrite": bool(params["overwrite"])}, module=rewrite(k.module, edits))
