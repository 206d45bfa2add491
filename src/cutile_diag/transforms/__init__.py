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

    >>> from cutile_diag.transforms import get
    >>> res = get("latency_hints").apply(source, "matmul")
"""
from __future__ import annotations

from ..source.model import TransformError, TransformNotApplicable, TransformParamError
from .approx_div import ApproxDiv
from .base import HintTransform, HintsResult, Transform, TransformResult
from .exp_to_exp2 import ExpToExp2
from .flush_to_zero import FlushToZero
from .gather_to_load import GatherToLoad
from .grid_resize import GridResize
from .group_m_swizzle import GroupMSwizzle
from .joint_sweep import JointSweep
from .kernel_hints import KernelHints
from .latency_hints import LatencyHints
from .persistent_grid import PersistentGrid
from .read_once import ReadOnce
from .registry import TRANSFORMS, UnknownTransformError, applicability, by_playbook, get, names
from .replace_hints import ReplaceHints
from .rows_per_block import RowsPerBlock
from .store_allow_tma import StoreAllowTmaFalse
from .tf32_guard import Tf32Guard
from .tile_size_sweep import TileSizeSweep
from .tma_padding import TmaZeroPadding

__all__ = ["TRANSFORMS", "Transform", "HintTransform", "TransformResult", "HintsResult",
           "TransformError", "TransformNotApplicable", "TransformParamError", "UnknownTransformError",
           "get", "names", "by_playbook", "applicability",
           "ApproxDiv", "ExpToExp2", "FlushToZero", "GatherToLoad", "GroupMSwizzle", "KernelHints",
           "LatencyHints", "PersistentGrid", "ReadOnce", "ReplaceHints", "StoreAllowTmaFalse", "Tf32Guard",
           "TileSizeSweep", "TmaZeroPadding", "RowsPerBlock", "JointSweep", "GridResize"]
