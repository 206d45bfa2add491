"""Row-wise log-sum-exp whose row load pads with NEG_INF.

NAIVE on purpose, as library row reductions often are: one program per row, the whole row
loaded as one (1, TILE_N) tile padded with ``NEG_INF`` so that the lanes past the row end
drop out of the max and the exp-sum.  NEG_INF padding keeps the load off TMA (tileiras only
pads with zeros in hardware), and ``exp`` is not ``exp2``.  No CAPTURE_SPECS: captures come
from a run of the workload (``examples:row_lse``).
"""
import cuda.tile as ct


@ct.kernel
def row_lse(X, Out, TILE_N: ct.Constant[int]):
    row = ct.bid(0)
    x = ct.astype(ct.load(X, index=(row, 0), shape=(1, TILE_N), padding_mode=ct.PaddingMode.NEG_INF),
                  ct.float32)
    m = ct.max(x, axis=1)
    s = ct.sum(ct.exp(x - m.reshape((1, 1))), axis=1)
    ct.store(Out, index=(row,), tile=m + ct.log(s))


def launch(x, out, stream=None):
    import torch
    stream = stream or torch.cuda.current_stream()
    m, n = x.shape
    tile_n = 1 << (n - 1).bit_length()
    ct.launch(stream, (m,), row_lse, (x, out, tile_n))
    return out
