"""Stage 2b -- the structural TileIR differ.

* ``graph``    -- networkx multigraph per entry, canonical names, structural hashes
* ``match``    -- SSA-name-independent op matching (exact anchors, propagation, similarity)
* ``delta``    -- attribute vs topology deltas, per-region op counts
* ``semantic`` -- the deltas named in kernel-author terms
* ``cubin``    -- resource / remark / SASS-mix deltas of two capture folders
* ``core``     -- ``diff_modules`` / ``diff_paths`` -> ``DiffResult``
* ``output``   -- rich, JSON and self-contained HTML renderers
"""
from .core import diff_modules, diff_paths, diff_texts, load_input
from .model import Change, DiffResult, StructDelta

__all__ = ["diff_modules", "diff_paths", "diff_texts", "load_input", "Change", "DiffResult", "StructDelta"]
