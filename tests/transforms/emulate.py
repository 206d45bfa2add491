"""A numpy stand-in for the part of ``cuda.tile`` the example kernels use.

No GPU here, so the *semantics* of a rewrite (which tiles a block touches, in which order
the grid is walked, what padding does at the edges) is checked by running the original
and the rewritten module on the CPU: the module is imported for real (``@ct.kernel`` needs
the real decorator), then its global ``ct`` is swapped for this emulator, and the host
wrapper is called with torch CPU tensors.  ``ct.launch`` runs the kernel's Python body
once per tile block.  Numerics are plain numpy (tfloat32 = float32, FTZ/APPROX ignored),
so index/grid transforms must reproduce the output bit for bit, numeric ones closely.
"""
from __future__ import annotations

import hashlib
import importlib.util
import itertools
import sys
import types
from pathlib import Path

import numpy as np


def _cdiv(a, b):
    return -(-int(a) // int(b))


class _State:
    bid = (0, 0, 0)
    grid = (1, 1, 1)


def _pad(mode, dtype):
    name = str(getattr(mode, "name", mode)).upper()
    if not np.issubdtype(dtype, np.floating):
        return 0
    return {"ZERO": 0.0, "NEG_ZERO": -0.0, "NEG_INF": -np.inf, "POS_INF": np.inf}.get(name, np.nan)


def make_ct():
    """A fresh emulator module; ``.launches`` records (kernel name, grid) per launch."""
    import cuda.tile as real
    ct = types.ModuleType("emulated_cuda_tile")
    st = _State()
    ct.launches = []
    ct.PaddingMode, ct.RoundingMode = real.PaddingMode, real.RoundingMode
    ct.Constant = real.Constant
    for name, dt in (("float16", np.float16), ("float32", np.float32), ("float64", np.float64),
                     ("tfloat32", np.float32), ("int32", np.int32), ("int64", np.int64),
                     ("int16", np.int16), ("int8", np.int8), ("bool_", np.bool_)):
        setattr(ct, name, dt)
    ct.cdiv = _cdiv
    ct.bid = lambda axis: st.bid[axis]
    ct.num_blocks = lambda axis: st.grid[axis]
    ct.num_tiles = lambda array, axis, shape, order="C": _cdiv(array.shape[axis], shape[axis])

    def load(array, index, shape, *, order="C", padding_mode=None, check_bounds=True, latency=None,
             allow_tma=None, **_):
        assert order == "C", "emulator: only C order"
        out = np.full(shape, _pad(padding_mode, array.dtype), dtype=array.dtype)
        src, dst = [], []
        for d, (i, s) in enumerate(zip(index, shape)):
            start = int(i) * s
            stop = min(start + s, array.shape[d])
            if start >= stop:
                return out
            src.append(slice(start, stop))
            dst.append(slice(0, stop - start))
        out[tuple(dst)] = array[tuple(src)]
        return out

    def store(array, index, tile, *, order="C", check_bounds=True, latency=None, allow_tma=None, **_):
        tile = np.asarray(tile)
        src, dst = [], []
        for d, (i, s) in enumerate(zip(index, tile.shape)):
            start = int(i) * s
            stop = min(start + s, array.shape[d])
            if start >= stop:
                return
            dst.append(slice(start, stop))
            src.append(slice(0, stop - start))
        array[tuple(dst)] = tile[tuple(src)].astype(array.dtype)

    def _lanes(array, indices, mask):
        """Broadcast index arrays (one per dim; a tuple for N-D) and the in-bounds lanes."""
        comps = indices if isinstance(indices, tuple) else (indices,)
        comps = np.broadcast_arrays(*[np.asarray(c) for c in comps])
        ok = np.ones(comps[0].shape, dtype=bool)
        for d, c in enumerate(comps):
            ok &= (c >= 0) & (c < array.shape[d])
        if mask is not None:
            ok &= np.broadcast_to(np.asarray(mask), ok.shape)
        return comps, ok

    def gather(array, indices, *, mask=None, padding_value=0, check_bounds=True, latency=None):
        comps, ok = _lanes(array, indices, mask)
        out = np.full(ok.shape, padding_value, dtype=array.dtype)
        out[ok] = array[tuple(c[ok] for c in comps)]
        return out[()] if out.ndim == 0 else out

    def scatter(array, indices, value, *, mask=None, check_bounds=True, latency=None):
        comps, ok = _lanes(array, indices, mask)
        val = np.broadcast_to(np.asarray(value), ok.shape)
        array[tuple(c[ok] for c in comps)] = val[ok].astype(array.dtype)

    def reduction(fn):
        def f(x, axis=None, *, keepdims=False, **_):
            x = np.asarray(x)
            return fn(x, axis=axis, keepdims=keepdims).astype(x.dtype)
        return f

    def unary(fn):
        def f(x, **_):
            return fn(np.asarray(x))
        return f

    ct.load, ct.store, ct.gather, ct.scatter = load, store, gather, scatter
    ct.arange = lambda size, *, dtype, start=0, step=1: np.arange(start, start + size * step, step, dtype=dtype)
    ct.full = lambda shape, fill_value, dtype: np.full(shape, fill_value, dtype=dtype)
    ct.zeros = lambda shape, dtype: np.zeros(shape, dtype=dtype)
    ct.ones = lambda shape, dtype: np.ones(shape, dtype=dtype)
    ct.astype = lambda x, dtype, **_: np.asarray(x).astype(dtype)
    ct.mma = lambda x, y, acc, **_: acc + (x.astype(np.float64) @ y.astype(np.float64)).astype(acc.dtype)
    ct.sum, ct.max, ct.min = reduction(np.sum), reduction(np.max), reduction(np.min)
    ct.exp, ct.exp2, ct.sqrt, ct.log = unary(np.exp), unary(np.exp2), unary(np.sqrt), unary(np.log)
    ct.rsqrt = unary(lambda x: 1 / np.sqrt(x))
    ct.truediv = lambda x, y, **_: np.asarray(x) / y
    ct.maximum = lambda x, y, **_: np.maximum(x, y)
    ct.reshape = lambda x, shape: np.reshape(np.asarray(x), shape)
    ct.where = lambda c, x, y: np.where(c, x, y)
    ct.expand_dims = lambda x, axis: np.expand_dims(np.asarray(x), axis)
    ct.num_blocks = lambda axis: st.grid[axis]
    ct.minimum = lambda x, y, **_: np.minimum(x, y)

    def launch(stream, grid, kernel, args):
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        assert all(g >= 1 for g in grid), f"empty grid {grid}"
        ct.launches.append((kernel._pyfunc.__name__, grid))
        st.grid = grid
        np_args = [a.numpy() if hasattr(a, "numpy") else a for a in args]
        for z, y, x in itertools.product(range(grid[2]), range(grid[1]), range(grid[0])):
            st.bid = (x, y, z)
            kernel._pyfunc(*np_args)

    ct.launch = launch
    return ct


def load_emulated(path: Path):
    """Import ``path`` as a fresh module running on the emulator."""
    digest = hashlib.sha1(path.read_bytes()).hexdigest()[:10]
    name = f"_emulated_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    mod.ct = make_ct()
    return mod
