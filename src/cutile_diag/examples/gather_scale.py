"""Element-wise y = 2 * x + 1 written with ``ct.gather`` / ``ct.scatter``.

NAIVE on purpose: the indices are one contiguous block per tile (``bid * TILE + arange``),
so a tile-indexed ``ct.load`` / ``ct.store`` (TMA-eligible) would do; the gather/scatter
form issues per-element pointer loads (``load_ptr_tko``) instead.
"""
import cuda.tile as ct


@ct.kernel
def gather_scale(x, y, TILE: ct.Constant[int]):
    idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    v = ct.gather(x, idx)
    ct.scatter(y, idx, v * 2.0 + 1.0)


CAPTURE_SPECS = {
    "gather_scale": {"x": "f32[16777216]", "y": "f32[16777216]", "TILE": 1024},
}


def launch(x, y, tile=1024, stream=None):
    import torch
    stream = stream or torch.cuda.current_stream()
    ct.launch(stream, (ct.cdiv(x.shape[0], tile),), gather_scale, (x, y, tile))
    return y
