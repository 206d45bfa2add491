"""Element-wise vector add, c = a + b, over 1-D arrays.

``vector_add`` is NAIVE on purpose: one tile per block (grid = number of tiles, so a
16M-element input launches 16 384 blocks), no latency hints, default store path.
``vector_add_persistent`` is the grid-stride variant: a fixed grid of
``#SMs x occupancy`` blocks loops over all tiles.
"""
import cuda.tile as ct


@ct.kernel
def vector_add(a, b, c, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    ta = ct.load(a, index=(bid,), shape=(TILE,))
    tb = ct.load(b, index=(bid,), shape=(TILE,))
    ct.store(c, index=(bid,), tile=ta + tb)


@ct.kernel
def vector_add_persistent(a, b, c, TILE: ct.Constant[int]):
    num_tiles = ct.num_tiles(a, axis=0, shape=(TILE,))
    for t in range(ct.bid(0), num_tiles, ct.num_blocks(0)):
        ta = ct.load(a, index=(t,), shape=(TILE,))
        tb = ct.load(b, index=(t,), shape=(TILE,))
        ct.store(c, index=(t,), tile=ta + tb)


CAPTURE_SPECS = {
    "vector_add": {"a": "f32[16777216]", "b": "f32[16777216]", "c": "f32[16777216]", "TILE": 1024},
    "vector_add_persistent": {"a": "f32[16777216]", "b": "f32[16777216]", "c": "f32[16777216]",
                              "TILE": 1024},
}


def launch(a, b, c, tile: int = 1024, persistent: bool = False, stream=None):
    """Host wrapper: launches on torch tensors."""
    import torch
    n_tiles = ct.cdiv(a.shape[0], tile)
    stream = stream or torch.cuda.current_stream()
    if persistent:
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        grid = (min(n_tiles, sms * 4),)
        ct.launch(stream, grid, vector_add_persistent, (a, b, c, tile))
    else:
        ct.launch(stream, (n_tiles,), vector_add, (a, b, c, tile))
    return c
