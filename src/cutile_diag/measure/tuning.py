"""Autotuning held equal across measurement processes.

A kernel that autotunes with ``cuda.tile.tune.exhaustive_search`` picks its configuration anew in every
process (TileGym's matmul does, and ignores ``TILEGYM_DISABLE_AUTOTUNE``).  Two workers of the *same*
version then often run different configurations: on an H100, TileGym's matmul 8192³ bf16 measured
against an identical copy came out 3.3 % faster in 12 of 12 A/A decisions of one sitting, 1.8 % in
another, 0.1 % slower in a third — each worker's search, not the code, decided.

``TuningPins`` replaces ``exhaustive_search`` in a worker before the workload imports the kernel's module
(TileGym binds it at import: ``from cuda.tile.tune import exhaustive_search``).  Every search is named by
its kernel and its ordinal (``_matmul_kernel#0``: the n-th search of that kernel in the process) and
recorded with its pick and a digest of its search space.  A worker handed the picks of an earlier one (the
loop's baseline) narrows each search whose space is unchanged to that pick, so a comparison measures the
code and not two searches; a search whose space changed (a transform widened or re-tiled it) searches as
before, and says so.
"""
from __future__ import annotations

import hashlib
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable


FIRST = "the first worker searches"     # a search with nothing to hold: not a "searched again"


def _kernel_name(kernel: Any) -> str:
    fn = getattr(kernel, "_pyfunc", None) or kernel
    return getattr(fn, "__name__", None) or type(kernel).__name__


def space_digest(space: list) -> str:
    """The identity of a search space: its configurations' reprs, in order."""
    return hashlib.sha256("\n".join(map(repr, space)).encode()).hexdigest()[:16]


@dataclass
class TuningPins:
    """The searches of one process: ``given`` the picks to hold (``{name: {"pick", "space"}}``, an earlier
    worker's ``made``), ``made`` what this process's searches chose, ``pinned`` / ``searched`` which were held and
    which searched (with why)."""
    given: dict[str, dict] = field(default_factory=dict)
    made: dict[str, dict] = field(default_factory=dict)
    pinned: list[str] = field(default_factory=list)
    searched: dict[str, str] = field(default_factory=dict)
    _count: Counter = field(default_factory=Counter)
    _original: Callable | None = None

    def install(self) -> bool:
        """Put ``search`` in place of ``cuda.tile.tune.exhaustive_search`` (False when cuTile has none)."""
        try:
            import cuda.tile.tune as tune
            from cuda.tile.tune import _tune
        except ImportError:
            return False
        current = tune.exhaustive_search
        earlier = getattr(current, "__self__", None)       # pins installed before in this process
        self._original = earlier._original if isinstance(earlier, TuningPins) else current
        tune.exhaustive_search = _tune.exhaustive_search = self.search
        # modules that bound the name at their import, before this (``from cuda.tile.tune import ...``)
        for mod in list(sys.modules.values()):
            try:
                bound = mod is not tune and mod is not _tune and getattr(mod, "exhaustive_search", None) is current
            except Exception:                    # a lazy module whose attribute lookup itself fails
                continue
            if bound:
                mod.exhaustive_search = self.search
        return True

    def search(self, search_space, stream, grid_fn, kernel, args_fn, hints_fn=None, **kwargs):
        """``exhaustive_search`` over ``search_space``, or over the one pick ``given`` holds for this search when
        its space is the one that pick came from."""
        kname = _kernel_name(kernel)
        name = f"{kname}#{self._count[kname]}"
        self._count[kname] += 1
        space = list(search_space)
        digest = space_digest(space)
        held = self.given.get(name)
        if held is None:
            self.searched[name] = "no earlier pick" if self.given else FIRST
        elif held.get("space") != digest:
            self.searched[name] = "its search space changed"
        else:
            hit = [c for c in space if repr(c) == held.get("pick")]
            if hit:
                space = hit[:1]
                self.pinned.append(name)
            else:
                self.searched[name] = "the earlier pick is not in its space"
        result = self._original(space, stream, grid_fn, kernel, args_fn, hints_fn, **kwargs)
        self.made[name] = {"pick": repr(result.best.config), "space": digest}
        if name in self.pinned:
            print(f"cutile-diag: autotune {name} held at {held['pick']}", file=sys.stderr)
        return result

    def report(self) -> dict:
        """The JSON a worker's load reply carries."""
        again = {k: why for k, why in self.searched.items() if why != FIRST}
        return {"made": dict(self.made), "pinned": list(self.pinned), "searched": dict(self.searched),
                "searched_again": again}
