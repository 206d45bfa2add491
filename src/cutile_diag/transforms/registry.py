"""The registry of transforms: every transform by name, in playbook order.

The one list of what the loop can apply; the playbook checks its entries' ``transform``
names against ``names()``.
"""
from __future__ import annotations

from .approx_div import ApproxDiv
from ..source.model import TransformError
from .base import Transform
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
    """The transform called ``name``; ``UnknownTransformError`` (with the known names) otherwise."""
    try:
        return TRANSFORMS[name]
    except KeyError:
        raise UnknownTransformError(f"no transform named '{name}'",
                                    hint="known: " + ", ".join(sorted(TRANSFORMS))) from None


def names() -> list[str]:
    """Every transform's name, in playbook order."""
    return list(TRANSFORMS)


def by_playbook(playbook_id: str) -> list[Transform]:
    """Transforms implementing a playbook item (``"H"`` -> flush_to_zero, approx_div, exp_to_exp2)."""
    return [t for t in _ALL if t.playbook_id == playbook_id.upper()]


def applicability(source: str, kernel_name: str) -> list[tuple[Transform, bool, str]]:
    """Every transform's verdict on a kernel, in playbook order."""
    return [(t, *t.applicable(source, kernel_name)) for t in _ALL]
