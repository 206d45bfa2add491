"""cuTile kernel objects that a timed call makes anew on every call, held for the measuring process's life.

A wrapper that calls ``kernel.replace_hints(...)`` on each launch (TileGym's persistent layer norm) gets a new
kernel object each time, with its own JIT cache: it recompiles (~40 ms of host time per call on an H200), and
when the object dies its library is unloaded.  Inside a CUDA-graph capture that unload is an illegal call and
cuTile aborts the process (``~CudaLibrary ... CHECK FAILED``, seen on an H100 in session 24); after a capture it
would leave the graph pointing at unloaded code.  ``hold_replaced_kernels`` makes ``replace_hints`` return one
kernel object per (kernel, hints), kept alive: the same compiled code the wrapper asked for, compiled once —
the GPU work timed is unchanged, and only the host's repeated recompiles go."""
from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
_HELD: dict[tuple, Any] = {}      # (kernel, hints) -> the kernel it gave (kernels hash by identity)
_INSTALLED = False


def hold_replaced_kernels() -> bool:
    """Install the memo on ``cuda.tile.kernel.replace_hints`` once per process; False when cuTile is absent."""
    global _INSTALLED
    if _INSTALLED:
        return True
    try:
        from cuda.tile import kernel
    except Exception:              # no cuTile here (a torch-only workload): nothing makes kernels
        return False
    original = kernel.replace_hints

    def replace_hints(self, **hints):
        key = (self, tuple(sorted((k, repr(v)) for k, v in hints.items())))
        with _LOCK:
            if key not in _HELD:
                _HELD[key] = original(self, **hints)
            return _HELD[key]

    replace_hints.__doc__ = original.__doc__
    replace_hints.__wrapped__ = original
    kernel.replace_hints = replace_hints
    _INSTALLED = True
    return True
