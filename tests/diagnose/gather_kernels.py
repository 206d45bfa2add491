"""Row kernels that read through 2-D gathers (never launched; captured ahead of time).

* ``rows_affine`` — broadcast row index (``ct.full``) and ``off + ct.arange`` columns, masked,
  ``padding_value=0``: tile-shaped, A applies;
* ``rows_from_memory`` — the same loop, but the row index is read from ``Idx`` (an embedding /
  paged lookup) for the read and the write: real gathers, A must never be offered.
"""
import cuda.tile as ct


@ct.kernel
def rows_affine(X, Y, N, TILE_N: ct.Constant[int]):
    row = ct.bid(0)
    rows = ct.full((TILE_N,), row, dtype=ct.int32)
    for j in range(ct.cdiv(N, TILE_N)):
        off = j * TILE_N + ct.arange(TILE_N, dtype=ct.int32)
        x = ct.gather(X, (rows, off), mask=off < N, padding_value=0.0)
        ct.scatter(Y, (rows, off), x * 2.0, mask=off < N)


@ct.kernel
def rows_from_memory(X, Idx, Y, N, TILE_N: ct.Constant[int]):
    row = ct.bid(0)
    src = ct.gather(Idx, ct.full((TILE_N,), row, dtype=ct.int32))
    for j in range(ct.cdiv(N, TILE_N)):
        off = j * TILE_N + ct.arange(TILE_N, dtype=ct.int32)
        x = ct.gather(X, (src, off), mask=off < N, padding_value=0.0)
        ct.scatter(Y, (src, off), x * 2.0, mask=off < N)


@ct.kernel
def rows_two_pass_weighted(X, W, Y, Rstd, N: ct.Constant[int], EPS: ct.Constant[float], TILE_N: ct.Constant[int]):
    """Two sibling loops (the disassembler reuses SSA names across them), a scalar row index in
    the tuple, and a weight row read by every program."""
    row = ct.bid(0)
    cols = ct.arange(TILE_N, dtype=ct.int32)
    acc = ct.full((TILE_N,), 0.0, dtype=ct.float32)
    for j in range(ct.cdiv(N, TILE_N)):
        x = ct.astype(ct.gather(X, (row, j * TILE_N + cols), latency=1), ct.float32)
        acc += x * x
    rstd = ct.rsqrt(ct.sum(acc, axis=0) / N + EPS)
    ct.scatter(Rstd, row, rstd)
    for j in range(ct.cdiv(N, TILE_N)):
        w = ct.astype(ct.gather(W, j * TILE_N + cols, latency=1), ct.float32)
        x = ct.astype(ct.gather(X, (row, j * TILE_N + cols), latency=1), ct.float32)
        ct.scatter(Y, (row, j * TILE_N + cols), ct.astype(x * rstd * w, Y.dtype), latency=1)
