"""A version's files without writing them: imports and ``linecache`` read given texts for given paths.

The loop's compile children and a sweep's measuring workers load a candidate's files at the
worktree's paths while the disk still holds the kept version (several load at once).  cuTile's
bytecode then carries the same file names as the measuring worker's JIT (debug locations are part
of the bytecode, and the bytecode is part of cuTile's cache key).  ``text`` answers which text a
path was given in this process, so a reader (the replay's version check) never judges by the disk.
"""
from __future__ import annotations

import linecache
import os
from typing import Mapping

_TEXTS: dict[str, str] = {}     # path (as given, and real) -> text, for this process
_READ: set[str] = set()         # the real paths an import read from _TEXTS


def install(overrides: Mapping[str, str]) -> set[str]:
    """Imports and ``linecache`` read ``overrides[path]`` for these paths instead of the disk, from now on in this
    process.  Returns the set that collects the (real) paths an import did read from any override of the process."""
    from importlib.machinery import SourceFileLoader
    texts = {os.path.realpath(p): t for p, t in overrides.items()}
    texts.update(overrides)
    # the loader is patched once, by the first call with texts; later ones add texts
    if texts and not getattr(SourceFileLoader.get_data, "overrides", False):
        get_data, path_stats = SourceFileLoader.get_data, SourceFileLoader.path_stats

        def _data(self, path):
            t = text(path)
            if t is None:
                return get_data(self, path)
            _READ.add(os.path.realpath(path))
            return t.encode()

        def _stats(self, path):
            if text(path) is not None:   # no stale .pyc of the worktree's version: compile the text
                raise OSError("source supplied by the compile job")
            return path_stats(self, path)

        _data.overrides = True
        SourceFileLoader.get_data, SourceFileLoader.path_stats = _data, _stats
    _TEXTS.update(texts)
    for p, t in texts.items():      # mtime None: linecache.checkcache leaves the entry alone
        linecache.cache[p] = (len(t), None, t.splitlines(True), p)
    return _READ


def text(path) -> str | None:
    """The text ``install`` gave for ``path`` (or its real path) in this process; None when the disk is read."""
    if not isinstance(path, str) or not _TEXTS:
        return None
    t = _TEXTS.get(path)
    return t if t is not None else _TEXTS.get(os.path.realpath(path))
