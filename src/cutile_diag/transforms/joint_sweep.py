"""Joint sweep: knobs that interact, searched together.

Occupancy, load latency, rows per block and the persistent grid size trade the same
resources (registers, bytes in flight, blocks per SM): the best occupancy for one row
tile is not the best for four, and a persistent grid sized for occupancy 2 is wrong at
occupancy 4.  One knob at a time stops at a local optimum.  This transform composes
the single-knob transforms (``rows_per_block`` -> ``persistent_grid`` -> ``kernel_hints``
-> ``latency_hints``) into one candidate per point of a small joint space; the loop's
sweep machinery screens every point cheaply (one round each, under its share of the
iteration budget) and confirms the best interleaved against the kept version.

Only knobs that apply to the kernel join the space; the points are ordered so that the
first ``max_points`` spread over it (every knob's values appear early) — the runner's
``--max-sweep`` cuts the list, the transform never exceeds ``max_points``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, ClassVar

from ..source.model import TransformNotApplicable, TransformParamError, load, parse_module, refuse
from .base import Plan, Transform
from .kernel_hints import KernelHints
from .latency_hints import LatencyHints
from .persistent_grid import PersistentGrid
from .rows_per_block import RowsPerBlock

# knob -> values tried jointly (None = leave as is)
SPACE: dict[str, tuple] = {"rows": (None, 2, 4), "blocks_per_sm": (None, 2, 4),
                           "occupancy": (None, 2, 4), "latency": (None, 2, 6)}
MAX_POINTS = 8

_STEPS = (("rows", RowsPerBlock(), lambda v: {"rows": v}),
          ("blocks_per_sm", PersistentGrid(), lambda v: {"blocks_per_sm": v}),
          ("occupancy", KernelHints(), lambda v: {"occupancy": v, "overwrite": True}),
          ("latency", LatencyHints(), lambda v: {"roles": ["main_load"], "latency": v, "overwrite": True}))


def _compose(source: str, kernel: str, point: dict[str, Any]) -> tuple[str, list[str]]:
    """Apply each set knob in order; the new source and what each step did."""
    done = []
    for knob, t, params in _STEPS:
        v = point.get(knob)
        if v is None:
            continue
        try:
            res = t.apply(source, kernel, **params(v))
        except TransformNotApplicable as e:
            refuse(f"{knob}={v}: {e.reason}")
        source = res.new_source
        done.append(f"{knob}={v}")
    return source, done


def _spread(points: list[tuple], n: int) -> list[tuple]:
    """``n`` points from the product, every value of every knob early: greedy max-min
    Hamming distance from the points chosen so far, starting from the first."""
    if len(points) <= n:
        return points
    chosen = [points[0]]
    rest = points[1:]
    while len(chosen) < n and rest:
        best = max(rest, key=lambda p: (min(sum(a != b for a, b in zip(p, c)) for c in chosen), -rest.index(p)))
        chosen.append(best)
        rest.remove(best)
    return chosen


@dataclass(frozen=True)
class JointSweep(Transform):
    """Points of the joint space of rows per block, persistent grid, kernel hints and latency, composed from the
    single-knob transforms (two knobs at least per point)."""
    name: str = "joint_sweep"
    playbook_id: str = "C"
    summary: str = "occupancy x latency x rows-per-block x persistent grid, searched jointly"
    PARAMS: ClassVar[dict[str, Any]] = {k: None for k in SPACE}
    REQUIRES_PARAMS: ClassVar[bool] = True

    def _run(self, source, kernel_name, params):
        params = self._check_params(dict(params))
        point = {k: v for k, v in params.items() if v is not None}
        if len(point) < 2:
            raise TransformParamError(f"{self.name}: a joint point sets at least two knobs, got {point or 'none'}")
        load(source, kernel_name)
        new, done = _compose(source, kernel_name, point)
        return Plan(description="joint point " + ", ".join(done), params=point, module=parse_module(new))

    def _knobs(self, source: str, kernel: str) -> dict[str, tuple]:
        """The knobs that apply to this kernel, with their joint values."""
        out = {}
        for knob, t, params in _STEPS:
            vals = [v for v in SPACE[knob] if v is None or t.applicable(source, kernel, **params(v))[0]]
            if len(vals) > 1:
                out[knob] = tuple(vals)
        return out

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """Up to MAX_POINTS joint points that move two knobs or more, spread over the space, most knobs moved first;
        knobs that exclude each other are dropped."""
        try:
            load(source, kernel_name)
        except TransformNotApplicable:
            return []
        knobs = self._knobs(source, kernel_name)
        if len(knobs) < 2:
            return []
        names = list(knobs)
        # points that move at least two knobs (single knobs are the single transforms' job)
        grid = [p for p in itertools.product(*(knobs[n] for n in names)) if sum(v is not None for v in p) >= 2]
        grid.sort(key=lambda p: sum(v is None for v in p))            # the most knobs moved first
        out = []
        for p in _spread(grid, MAX_POINTS * 2):
            point = {n: v for n, v in zip(names, p) if v is not None}
            try:
                _compose(source, kernel_name, point)
            except TransformNotApplicable:
                continue                                              # knobs that exclude each other
            out.append(point)
            if len(out) >= MAX_POINTS:
                break
        return out

    def _why_no_candidates(self, source: str, kernel_name: str) -> str:
        knobs = self._knobs(source, kernel_name)
        return (f"fewer than two interacting knobs apply ({', '.join(knobs) or 'none'}); "
                f"the single-knob transforms cover them")
