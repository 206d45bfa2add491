"""grid_resize (Y): a persistent kernel's SM-count grid gets more blocks per SM, where the
wrapper writes them: a parameter default, a literal, a local, or a bare SM count."""
from __future__ import annotations

import numpy as np
import pytest

from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag.transforms import GridResize, PersistentGrid

from .tf_support import emulated, example_source

Y = GridResize()
ROWS = (EXAMPLES_DIR / "persistent_rows.py").read_text()

# library style: the grid is min(SMs, row blocks) through a local, the stride is ct.num_blocks(0)
LIB = '''import cuda.tile as ct
import torch


@ct.kernel
def scale_rows(X, Y, n_rows, TILE: ct.Constant[int]):
    for row in range(ct.bid(0), n_rows, ct.num_blocks(0)):
        t = ct.load(X, index=(row, 0), shape=(1, TILE))
        ct.store(Y, index=(row, 0), tile=t * 2)


def scale(x, y, stream=None):
    NUM_SMS = torch.cuda.get_device_properties("cuda").multi_processor_count
    grid_size = min(NUM_SMS, x.shape[0])
    grid = (grid_size, 1, 1)
    ct.launch(stream, grid, scale_rows, (x, y, x.shape[0], 1 << (x.shape[1] - 1).bit_length()))
    return y


@ct.kernel
def scale_rows_strided(X, Y, n_rows, STRIDE: ct.Constant[int], TILE: ct.Constant[int]):
    for row in range(ct.bid(0), n_rows, STRIDE):
        t = ct.load(X, index=(row, 0), shape=(1, TILE))
        ct.store(Y, index=(row, 0), tile=t * 2)


def scale_strided(x, y, stream=None):
    sms = torch.cuda.get_device_properties("cuda").multi_processor_count
    ct.launch(stream, (sms,), scale_rows_strided, (x, y, x.shape[0], sms, 256))
    return y
'''


def test_the_wrapper_parameter_default_is_raised_and_the_sweep_starts_at_the_resident_blocks():
    assert Y.candidates(ROWS, "persistent_rows") == [{"blocks_per_sm": 4}, {"blocks_per_sm": 8},
                                                      {"blocks_per_sm": 16}]
    assert Y.candidates_for(ROWS, "persistent_rows", {"cubin.resident_ctas": 12}) == [
        {"blocks_per_sm": 12}, {"blocks_per_sm": 6}, {"blocks_per_sm": 4}, {"blocks_per_sm": 8},
        {"blocks_per_sm": 16}]
    res = Y.apply(ROWS, "persistent_rows", blocks_per_sm=8)
    assert "def launch(x, y, blocks_per_sm=8, stream=None):" in res.new_source
    assert res.new_source.replace("blocks_per_sm=8,", "blocks_per_sm=2,") == ROWS      # nothing else changed
    assert res.description.startswith("blocks per SM 2 -> 8: `sms * blocks_per_sm` with blocks_per_sm=2 by default")
    ok, why = Y.applicable(res.new_source, "persistent_rows", blocks_per_sm=8)
    assert not ok and why.startswith("already 8 block(s) per SM")


def test_a_literal_factor_and_the_transform_b_wrote():
    res = Y.apply(example_source("vector_add"), "vector_add_persistent", blocks_per_sm=16)
    assert "grid = (min(n_tiles, sms * 16),)" in res.new_source
    made = PersistentGrid().apply(example_source("vector_add"), "vector_add").new_source
    assert "num_sms * 4" in made
    assert "num_sms * 8" in Y.apply(made, "vector_add", blocks_per_sm=8).new_source


def test_a_bare_sm_count_through_locals(emu_dir, one_sm):
    import torch
    res = Y.apply(LIB, "scale_rows", blocks_per_sm=4)
    assert "grid_size = min(NUM_SMS * 4, x.shape[0])" in res.new_source
    x = torch.randn(9, 200)
    outs, grids = [], []
    for src in (LIB, res.new_source):
        mod = emulated(emu_dir, src, "scale")
        outs.append(mod.scale(x, torch.empty_like(x), stream=object()).numpy())
        grids.append([g for _, g in mod.ct.launches])
    assert grids == [[(1, 1, 1)], [(4, 1, 1)]]        # one SM: 1 block, then 4, striding over 9 rows
    np.testing.assert_array_equal(outs[1], outs[0])


def test_refusals():
    ok, why = Y.applicable(example_source("vector_add"), "vector_add", blocks_per_sm=8)
    assert not ok and "does not stride over ct.num_blocks(0)" in why
    ok, why = Y.applicable(LIB, "scale_rows_strided", blocks_per_sm=8)
    assert not ok and "stride passed from the wrapper" in why
    two = ROWS.replace("grid = (min(m, sms * blocks_per_sm),)", "grid = (min(m * sms, sms * blocks_per_sm),)")
    ok, why = Y.applicable(two, "persistent_rows", blocks_per_sm=8)
    assert not ok and "reads the SM count 2 times" in why
    opaque = ROWS.replace("sms * blocks_per_sm", "sms * len(y)")
    ok, why = Y.applicable(opaque, "persistent_rows", blocks_per_sm=8)
    assert not ok and "multiplied by `len(y)`" in why
    with pytest.raises(Exception, match="blocks_per_sm must be an integer"):
        Y.apply(ROWS, "persistent_rows", blocks_per_sm=0)
    assert Y.candidates(ROWS.replace("blocks_per_sm=2", "blocks_per_sm=16"), "persistent_rows") == []
