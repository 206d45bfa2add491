"""Multi-pass normalisation kernels (written for these tests, in the styles real libraries use):
each program normalises one row that is too long for one tile, so it walks the row in
column tiles several times.  The re-reads of ``x`` are what the redundant-load check must find.

* ``rms_two_pass_load``   — pass 1 sums x^2 with ``ct.load``; pass 2 loads the same tiles again
  to scale them (one re-read).
* ``layer_norm_three_pass_gather`` — mean, variance and output passes, each gathering the row
  with ``ct.gather`` and broadcast row indices (two re-reads).
* ``scaled_norm_two_pass_gather`` — 1-D offsets with a scalar row in the index tuple, a
  ``ct.cdiv`` trip count and per-load hints; pass 2 also gathers the weight (read once).
* ``rms_one_pass`` — the whole row in one tile: read once, nothing to report.
* ``two_arrays_two_pass`` — pass 2 loads a *different* array (``y``): not a re-read.
"""
import cuda.tile as ct


@ct.kernel
def rms_two_pass_load(x, w, out, N: ct.Constant[int], TN: ct.Constant[int]):
    row = ct.bid(0)
    acc = ct.full((1, TN), 0.0, dtype=ct.float32)
    for j in range(N // TN):
        t = ct.load(x, index=(row, j), shape=(1, TN)).astype(ct.float32)
        acc = acc + t * t
    rstd = ct.rsqrt(ct.sum(acc, axis=1, keepdims=True) / N + 1e-6)
    for j in range(N // TN):
        t = ct.load(x, index=(row, j), shape=(1, TN)).astype(ct.float32)
        g = ct.load(w, index=(j,), shape=(TN,)).astype(ct.float32)
        ct.store(out, index=(row, j), tile=(t * rstd * g).astype(out.dtype))


@ct.kernel
def layer_norm_three_pass_gather(x, out, N: ct.Constant[int], TN: ct.Constant[int]):
    row = ct.bid(0)
    rows = ct.full((1, TN), row, dtype=ct.int32)
    total = ct.full((1, TN), 0.0, dtype=ct.float32)
    for j in range(N // TN):
        cols = (j * TN + ct.arange(TN, dtype=ct.int32)).reshape((1, TN))
        total = total + ct.gather(x, (rows, cols)).astype(ct.float32)
    mean = ct.sum(total, axis=1, keepdims=True) / N
    sq = ct.full((1, TN), 0.0, dtype=ct.float32)
    for j in range(N // TN):
        cols = (j * TN + ct.arange(TN, dtype=ct.int32)).reshape((1, TN))
        d = ct.gather(x, (rows, cols)).astype(ct.float32) - mean
        sq = sq + d * d
    rstd = ct.rsqrt(ct.sum(sq, axis=1, keepdims=True) / N + 1e-5)
    for j in range(N // TN):
        cols = (j * TN + ct.arange(TN, dtype=ct.int32)).reshape((1, TN))
        d = ct.gather(x, (rows, cols)).astype(ct.float32) - mean
        ct.scatter(out, (rows, cols), (d * rstd).astype(out.dtype))


@ct.kernel
def scaled_norm_two_pass_gather(x, w, out, N: ct.Constant[int], EPS: ct.Constant[float],
                                TILE: ct.Constant[int]):
    row = ct.bid(0)
    acc = ct.full((TILE,), 0.0, dtype=ct.float32)
    n_tiles = ct.cdiv(N, TILE)
    lanes = ct.arange(TILE, dtype=ct.int32)
    for j in range(0, n_tiles):
        cols = j * TILE + lanes
        v = ct.gather(x, (row, cols), latency=2).astype(ct.float32)
        acc += v * v
    scale = ct.rsqrt(ct.sum(acc, axis=0, keepdims=False) / N + EPS)
    for j in range(0, n_tiles):
        cols = j * TILE + lanes
        g = ct.gather(w, cols, latency=2).astype(ct.float32)
        v = ct.gather(x, (row, cols), latency=2).astype(ct.float32)
        ct.scatter(out, (row, cols), (v * scale * g).astype(out.dtype))


@ct.kernel
def rms_one_pass(x, out, N: ct.Constant[int]):
    row = ct.bid(0)
    t = ct.load(x, index=(row, 0), shape=(1, N)).astype(ct.float32)
    rstd = ct.rsqrt(ct.sum(t * t, axis=1, keepdims=True) / N + 1e-6)
    ct.store(out, index=(row, 0), tile=(t * rstd).astype(out.dtype))


@ct.kernel
def two_arrays_two_pass(x, y, out, N: ct.Constant[int], TN: ct.Constant[int]):
    row = ct.bid(0)
    acc = ct.full((1, TN), 0.0, dtype=ct.float32)
    for j in range(N // TN):
        acc = acc + ct.load(x, index=(row, j), shape=(1, TN)).astype(ct.float32)
    s = ct.sum(acc, axis=1, keepdims=True)
    for j in range(N // TN):
        t = ct.load(y, index=(row, j), shape=(1, TN)).astype(ct.float32)
        ct.store(out, index=(row, j), tile=(t * s).astype(out.dtype))


_ROWS = {"x": "bf16[4096,4096]", "out": "bf16[4096,4096]"}
CAPTURE_SPECS = {
    "rms_two_pass_load": {**_ROWS, "w": "bf16[4096]", "N": 4096, "TN": 1024},
    "layer_norm_three_pass_gather": {**_ROWS, "N": 4096, "TN": 1024},
    "scaled_norm_two_pass_gather": {**_ROWS, "w": "bf16[4096]", "N": 4096, "EPS": 1e-6, "TILE": 2048},
    "rms_one_pass": {**_ROWS, "N": 4096},
    "two_arrays_two_pass": {**_ROWS, "y": "bf16[4096,4096]", "N": 4096, "TN": 1024},
}
