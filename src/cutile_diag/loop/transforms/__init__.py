"""Transforms the optimisation loop applies by itself (playbook items A–I and the additions).

Each transform is a frozen dataclass with ``name``, ``playbook_id`` and ``summary`` and

* ``applicable(source, kernel_name, **params) -> (bool, reason)`` — refuses, with a
  one-line reason, when the rewrite does not apply, is ambiguous, or is already done;
* ``apply(source, kernel_name, **params)`` -> ``TransformResult`` (new source,
  description, changed lines, params) for source transforms, ``HintsResult`` (a
  ``replace_hints`` dict) for hint transforms; raises ``TransformNotApplicable``;
* ``candidates(source, kernel_name) -> list[dict]`` — parameter sets worth measuring.

Source transforms are libcst rewrites: untouched code keeps its formatting and comments,
and applying a transform to its own output is refused (idempotent).

    >>> from cutile_diag.loop.transforms import get
    >>> res = get("latency_hints").apply(source, "matmul")
"""
from __future__ import annotations

from .approx_div import ApproxDiv
from ...source.model import TransformError, TransformNotApplicable, TransformParamError
from .base import HintTransform, HintsResult, Transform, TransformResult
from .exp_to_exp2 import ExpToExp2
from .flush_to_zero import FlushToZero
from .gather_to_load import GatherToLoad
from .grid_resize import GridResize
from .joint_sweep import JointSweep
from .group_m_swizzle import GroupMSwizzle
from .kernel_hints import KernelHints
from .latency_hints import LatencyHints
from .persistent_grid import PersistentGrid
from .read_once import ReadOnce
from .replace_hints import ReplaceHints
from .rows_per_block import RowsPerBlock
from .store_allow_tma import StoreAllowTmaFalse
from .tf32_guard import Tf32Guard
from .tile_size_sweep import TileSizeSweep
from .tma_padding import TmaZeroPadding

# in playbook order (A..I), the order `candidates_for` reports them in
_ALL: tuple[Transform, ...] = (
    GatherToLoad(),
    PersistentGrid(),
    GridResize(),
    KernelHints(),
    ReplaceHints(),
    Tf32Guard(),
    LatencyHints(),
    StoreAllowTmaFalse(),
    TileSizeSweep(),
    FlushToZero(),
    ApproxDiv(),
    ExpToExp2(),
    GroupMSwizzle(),
    TmaZeroPadding(),
    ReadOnce(),
    RowsPerBlock(),
    JointSweep(),
)
TRANSFORMS: dict[str, Transform] = {t.name: t for t in _ALL}


class UnknownTransformError(TransformError):
    """No transform has that name."""


def get(name: str) -> Transform:
    try:
        return TRANSFORMS[name]
    except KeyError:
        raise UnknownTransformError(f"no transform named '{name}'",
                                    hint="known: " + ", ".join(sorted(TRANSFORMS))) from None


def names() -> list[str]:
    return list(TRANSFORMS)


def by_playbook(playbook_id: str) -> list[Transform]:
    """Transforms implementing a playbook item (``"H"`` -> flush_to_zero, approx_div, exp_to_exp2)."""
    return [t for t in _ALL if t.playbook_id == playbook_id.upper()]


def applicability(source: str, kernel_name: str) -> list[tuple[Transform, bool, str]]:
    """Every transform's verdict on a kernel, in playbook order."""
    return [(t, *t.applicable(source, kernel_name)) for t in _ALL]


__all__ = ["TRANSFORMS", "Transform", "HintTransform", "TransformResult", "HintsResult",
           "TransformError", "TransformNotApplicable", "TransformParamError", "UnknownTransformError",
           "get", "names", "by_playbook", "applicability",
           "ApproxDiv", "ExpToExp2", "FlushToZero", "GatherToLoad", "GroupMSwizzle", "KernelHints",
           "LatencyHints", "PersistentGrid", "ReadOnce", "ReplaceHints", "StoreAllowTmaFalse", "Tf32Guard",
           "TileSizeSweep", "TmaZeroPadding", "ReadOnce", "RowsPerBlock", "JointSweep"]
