"""rows_per_block: one-row-per-block row kernels move ROWS rows per tile; grid / ROWS."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cutile_diag.transforms import PersistentGrid, RowsPerBlock, TmaZeroPadding

from .tf_support import emulated, example_source, op_lines

R = RowsPerBlock()
SRC = (Path(__file__).parent / "fixtures" / "row_kernels.py").read_text()


def test_softmax_rows_per_tile_and_wrapper(compiler):
    src = example_source("softmax")
    assert R.candidates(src, "softmax") == [{"rows": 2}, {"rows": 4}, {"rows": 8}, {"rows": 16}]
    res = R.apply(src, "softmax", rows=8)
    new = res.new_source
    assert "def softmax(X, Y, TILE_N: ct.Constant[int], ROWS: ct.Constant[int] = 8):" in new
    assert "shape=(ROWS, TILE_N)" in new
    assert "ct.launch(stream, (ct.cdiv(X.shape[0], 8),), softmax, (X, Y, tile_n, 8))" in new
    assert '"TILE_N": 1024, "ROWS": 8}' in new
    assert "tile<8x1024xf16>" in op_lines(compiler.tileir(new, "softmax"), "load_view_tko")[0]
    # capture specs without ROWS (a fixed --capture-arg list) still bind: the default is the value
    no_spec = new.replace(', "ROWS": 8}', "}")
    assert "tile<8x1024xf16>" in op_lines(compiler.tileir(no_spec, "softmax"), "load_view_tko")[0]
    ok, why = R.applicable(new, "softmax", rows=2)
    assert not ok and "already loads `(ROWS, TILE_N)` rows per tile" in why


def test_three_pass_norm_accumulators_follow(compiler):
    new = R.apply(SRC, "layer_norm_rows", rows=4).new_source
    assert new.count("acc = ct.zeros((ROWS, TILE), dtype=ct.float32)") == 2
    text = compiler.tileir(new, "layer_norm_rows")
    assert all("tile<4x1024xf16>" in ln for ln in op_lines(text, "load_view_tko") if "f16" in ln)


def test_persistent_kernel_keeps_its_grid(compiler):
    src = PersistentGrid().apply(SRC, "layer_norm_rows").new_source
    res = R.apply(src, "layer_norm_rows", rows=2)
    assert "persistent loop bound follows the tile" in res.description
    assert "ct.num_tiles(X, axis=0, shape=(ROWS, TILE))" in res.new_source
    assert "(min(x.shape[0], num_sms * 4),)" in res.new_source
    assert "tile<2x1024xf16>" in op_lines(compiler.tileir(res.new_source, "layer_norm_rows"), "load_view_tko")[0]


def test_refusals():
    ok, why = R.applicable(SRC, "rms_norm_rows")
    assert not ok and "the row id `row` is used at line 27 other than as a tile index" in why
    ok, why = R.applicable(SRC.replace("m = ct.max(x.astype(ct.float32), axis=1, keepdims=True)",
                                       "m = ct.max(x.astype(ct.float32), axis=1, keepdims=False)"), "row_max")
    assert not ok and "not over axis 1 with keepdims=True" in why
    ok, why = R.applicable(SRC, "bias_rows")
    assert not ok
    with pytest.raises(Exception, match="power of two"):
        R.apply(SRC, "row_max", rows=3)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("kernel, rows", [("layer_norm_rows", 4), ("row_max", 2), ("softmax", 4)])
def test_same_result_with_a_ragged_last_row_tile(emu_dir, kernel, rows):
    import torch
    torch.manual_seed(0)
    x = torch.randn(9, 300) * 2            # 9 rows: the last row tile is partial
    w, b = torch.randn(300), torch.randn(300)
    src = example_source("softmax") if kernel == "softmax" else SRC
    outs = []
    for s in (src, R.apply(src, kernel, rows=rows).new_source):
        mod = emulated(emu_dir, s, "rpb")
        if kernel == "layer_norm_rows":
            outs.append(mod.layer_norm(x, w, b, 1e-5, 128, stream=object()).numpy())
        elif kernel == "row_max":
            y = torch.zeros(9, 1)
            mod.launch_row_max(x, y, stream=object())
            outs.append(y.numpy())
        else:
            y = torch.zeros(9, 300)
            mod.launch(x, y, stream=object())
            outs.append(y.numpy())
        grid = mod.ct.launches[-1][1]
    assert grid == (-(-9 // rows), 1, 1)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-6)


def test_composes_with_zero_padding(compiler):
    src = TmaZeroPadding().apply(SRC, "row_max").new_source
    new = R.apply(src, "row_max", rows=4).new_source
    assert "tile<4x1024xf16>" in op_lines(compiler.tileir(new, "row_max"), "load_view_tko")[0]


def test_tilegym_style_persistent_softmax(compiler, emu_dir, one_sm):
    """pid = ct.bid(0); for row in range(pid, N_ROWS, num_programs): the bound counts rows, so it
    becomes ct.cdiv(N_ROWS, ROWS); the kernel is launched through a local alias."""
    import torch
    src = TmaZeroPadding().apply(SRC, "softmax_tma_rows").new_source
    new = R.apply(src, "softmax_tma_rows", rows=4).new_source
    assert "for row_idx in range(pid, ct.cdiv(N_ROWS, ROWS), num_programs):" in new
    assert "ct.launch(stream, grid, kernel, (out, x, n_rows, n_cols, _np2(n_cols), 4))" in new
    assert "tile<4x1024xf16>" in op_lines(compiler.tileir(new, "softmax_tma_rows"), "load_view_tko")[0]
    x = torch.randn(9, 300)
    outs = [emulated(emu_dir, s, "tma").softmax_tma(x, stream=object()).numpy() for s in (SRC, new)]
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(outs[0], torch.softmax(x, 1).numpy(), rtol=1e-5, atol=1e-6)
