"""Playbook C, hint-only: a ``kernel.replace_hints(...)`` dict instead of a source edit.

The loop sweeps occupancy / num_ctas / num_worker_warps with this (each hint set is its
own compiled kernel; build the hinted kernel once with ``HintsResult.apply_to``), then
commits the winner with ``kernel_hints``.  Values are validated like ``kernel_hints``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..source.model import Kernel, refuse
from .base import HintTransform, Plan
from .kernel_hints import (KNOBS, _describe, _sweep_candidates, _why_none, check_hints, decorator_hints,
                           refuse_overridden)


@dataclass(frozen=True)
class ReplaceHints(HintTransform):
    """The kernel hints as a ``kernel.replace_hints(...)`` dict instead of a source edit (the hint-only form of
    ``kernel_hints``)."""
    name: str = "replace_hints"
    playbook_id: str = "C"
    summary: str = "kernel.replace_hints(...) dict for occupancy / num_ctas / num_worker_warps sweeps"
    PARAMS: ClassVar[dict[str, Any]] = {n: None for n in KNOBS}
    REQUIRES_PARAMS: ClassVar[bool] = True

    def _plan(self, k: Kernel, params) -> Plan:
        hints = refuse_overridden(k, check_hints(self.name, params))
        current = decorator_hints(k)
        if all(current.get(n) == v for n, v in hints.items()):
            refuse(f"already applied: the decorator sets {_describe(hints)}")
        return Plan(description=f"{k.func.name.value}.replace_hints({_describe(hints)})",
                    params=dict(hints), hints=dict(hints))

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """One candidate per swept value of each knob, those that apply."""
        return _sweep_candidates(self, source, kernel_name)

    def _why_no_candidates(self, source: str, kernel_name: str) -> str:
        return _why_none(self, source, kernel_name)
