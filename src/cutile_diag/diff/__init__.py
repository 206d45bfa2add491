"""Stage 2b -- the structural TileIR differ.

* ``graph``    -- a networkx MultiDiGraph per entry, canonical names, structural hashes;
                  ``load_graph(path_or_capture, entry=None)`` gives it without the CLI
* ``match``    -- SSA-name-independent op matching (exact anchors, propagation,
                  Weisfeiler-Lehman signatures, similarity)
* ``delta``    -- attribute vs topology deltas, per-region op counts
* ``semantic`` -- the deltas named in kernel-author terms
* ``impact``   -- each change's impact slice (the ops its values reach, up to the stores)
* ``export``   -- the diff as one GraphML graph, changed and impacted nodes marked
* ``cubin``    -- resource / remark / SASS-mix deltas of two capture folders
* ``core``     -- ``diff_modules`` / ``diff_paths`` -> ``DiffResult``
* ``output``   -- rich, JSON and self-contained HTML renderers
"""
from .core import diff_modules, diff_paths, diff_texts, load_graph, load_input
from .impact import Impact, value_flow
from .model import Change, DiffResult, StructDelta

__all__ = ["diff_modules", "diff_paths", "diff_texts", "load_graph", "load_input", "value_flow", "Change",
           "DiffResult", "Impact", "StructDelta"]
