"""Two-pass row normalisation (layer norm without affine) written with 2-D gathers/scatters.

NAIVE on purpose, in the style of library row kernels that address rows through pointer
gathers: each program owns one row; both passes build the index tuple from a broadcast row
index (``ct.full((TILE_N,), row)``) and ``off + ct.arange(TILE_N)`` columns, masked at the row
end with ``padding_value=0``.  Every index is affine (one contiguous tile per step), so
tile-indexed ``ct.load`` / ``ct.store`` would do.  No CAPTURE_SPECS: captures come from a run
of the workload (``examples:row_norm``).
"""
import cuda.tile as ct


@ct.kernel
def row_norm(X, Y, Mean, Rstd, N, EPS: ct.Constant[float], TILE_N: ct.Constant[int]):
    row = ct.bid(0)
    rows = ct.full((TILE_N,), row, dtype=ct.int32)
    cols = ct.arange(TILE_N, dtype=ct.int32)
    acc = ct.full((TILE_N,), 0.0, dtype=ct.float32)
    acc2 = ct.full((TILE_N,), 0.0, dtype=ct.float32)
    for j in range(ct.cdiv(N, TILE_N)):
        off = j * TILE_N + cols
        x = ct.astype(ct.gather(X, (rows, off), mask=off < N, padding_value=0.0), ct.float32)
        acc += x
        acc2 += x * x
    mean = ct.sum(acc, axis=0) / N
    var = ct.sum(acc2, axis=0) / N - mean * mean
    rstd = ct.rsqrt(var + EPS)
    ct.scatter(Mean, row, mean)
    ct.scatter(Rstd, row, rstd)
    for j in range(ct.cdiv(N, TILE_N)):
        off = j * TILE_N + cols
        x = ct.astype(ct.gather(X, (rows, off), mask=off < N, padding_value=0.0), ct.float32)
        ct.scatter(Y, (rows, off), ct.astype((x - mean) * rstd, Y.dtype), mask=off < N)


def launch(x, y, mean, rstd, eps=1e-5, tile_n=1024, stream=None):
    import torch
    stream = stream or torch.cuda.current_stream()
    m, n = x.shape
    assert y.shape == x.shape, "y must have x's shape"
    ct.launch(stream, (m,), row_norm, (x, y, mean, rstd, n, eps, tile_n))
    return y
