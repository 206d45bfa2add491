"""read_once: two- and three-pass row kernels load the row once when it fits one tile."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cutile_diag.transforms import GatherToLoad, ReadOnce

from .tf_support import emulated, op_counts

R = ReadOnce()
SRC = (Path(__file__).parent / "fixtures" / "row_kernels.py").read_text()
LN_SPEC = '"N": 1000, "EPS": 1e-5, "TILE": 1024'


@pytest.fixture(scope="module")
def three_pass():
    return R.apply(SRC, "layer_norm_rows")


def test_three_pass_norm_loads_the_row_once_when_it_fits(compiler, three_pass):
    assert three_pass.description.startswith("the pass loops at lines 109, 114, 120 load X once when "
                                             "ct.cdiv(N, TILE) == 1")
    new = three_pass.new_source
    assert "    if num_tiles == 1:\n" in new and new.count("x_tile = ct.load(X, index=(row, j)") == 1
    assert new.count("        xt = x_tile\n") == 3
    # cuTile resolves the branch at compile time: 3 X loads + W + B -> 1 X load + W + B
    assert op_counts(compiler.tileir(SRC, "layer_norm_rows"))["load_view_tko"] == 5
    assert op_counts(compiler.tileir(new, "layer_norm_rows"))["load_view_tko"] == 3
    # a row longer than the tile compiles the original passes
    longer = new.replace(LN_SPEC, LN_SPEC.replace("1024", "256"))
    assert op_counts(compiler.tileir(longer, "layer_norm_rows"))["load_view_tko"] == 5


def test_two_pass_norm_after_gather_to_load(compiler):
    src = GatherToLoad().apply(SRC, "rms_norm_rows").new_source
    res = R.apply(src, "rms_norm_rows")
    assert "load x once" in res.description
    fits = res.new_source.replace('"N": 1000, "EPS": 1e-6, "TILE": 256', '"N": 1000, "EPS": 1e-6, "TILE": 1024')
    before = src.replace(
        '"N": 1000, "EPS": 1e-6, "TILE": 256', '"N": 1000, "EPS": 1e-6, "TILE": 1024')
    assert op_counts(compiler.tileir(before, "rms_norm_rows"))["load_view_tko"] == 3
    assert op_counts(compiler.tileir(fits, "rms_norm_rows"))["load_view_tko"] == 2


@pytest.mark.parametrize("cols, tile", [(300, 512), (300, 128), (512, 512)])
def test_same_result_one_pass_and_several(emu_dir, three_pass, cols, tile):
    import torch
    torch.manual_seed(0)
    x, w, b = torch.randn(4, cols) * 3 + 1, torch.randn(cols), torch.randn(cols)
    outs = [emulated(emu_dir, s, "ln").layer_norm(x, w, b, 1e-5, tile, stream=object()).numpy()
            for s in (SRC, three_pass.new_source)]
    np.testing.assert_array_equal(outs[1], outs[0])
    ref = torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5)
    np.testing.assert_allclose(outs[0], ref.numpy(), rtol=1e-4, atol=1e-4)


def test_gathered_rows_are_read_once_without_tile_loads_first(compiler, emu_dir):
    """A gather re-read in every pass (its index computed in the pass the same way from the loop
    variable) is gathered once on the one-pass path: W measured without A, beside A+W."""
    res = R.apply(SRC, "rms_norm_rows")
    assert "load x once when ct.cdiv(N, TILE) == 1" in res.description
    new = res.new_source
    assert new.count("x_tile = ct.gather(x, (row, offs)") == 1
    fast = new.split("if num_tiles == 1:")[1].split("else:")[0]
    assert fast.index("offs = j * TILE + offsets") < fast.index("x_tile = ct.gather")
    fits = '"N": 1000, "EPS": 1e-6, "TILE": 1024'
    ops = [op_counts(compiler.tileir(s.replace('"N": 1000, "EPS": 1e-6, "TILE": 256', fits), "rms_norm_rows"))
           for s in (SRC, new)]
    # the row fits one tile: x and w gathered once each (3 -> 2 pointer loads), no pass loops left
    assert (ops[0]["load_ptr_tko"], ops[1]["load_ptr_tko"]) == (3, 2) and ops[1]["for"] == 0
    import torch
    torch.manual_seed(0)
    for cols, tile in ((300, 512), (700, 256)):
        x, w = torch.randn(4, cols, dtype=torch.float16), torch.randn(cols, dtype=torch.float16)
        outs = [emulated(emu_dir, s, "rms").rms_norm(x, w, 1e-6, tile, stream=object())[0].float().numpy()
                for s in (SRC, new)]
        np.testing.assert_array_equal(outs[1], outs[0])
    # an index the passes compute differently is not the same gather: refused, with the reason
    other = SRC.replace("        offs = j * TILE + offsets\n        wj", "        offs = offsets + j * TILE\n        wj")
    ok, why = R.applicable(other, "rms_norm_rows")
    assert not ok and "computed inside the pass other than the same way in every pass" in why


def test_refusals_say_why_not(three_pass):
    # a pass count known only at run time: the one-pass path is a run-time branch
    runtime = R.apply(SRC.replace("    num_tiles = ct.cdiv(N, TILE)\n    acc = ct.zeros",
                                  "    num_tiles = ct.cdiv(X.shape[1], TILE)\n    acc = ct.zeros"),
                      "layer_norm_rows")
    assert "once when ct.cdiv(X.shape[1], TILE) == 1 (extent <= tile): a run-time branch" in runtime.description
    ok, why = R.applicable(SRC.replace("    rstd = ct.rsqrt(ct.sum(acc, axis=1, keepdims=True) / N + EPS)\n",
                                       "    rstd = ct.rsqrt(ct.sum(acc, axis=1, keepdims=True) / N + EPS)\n"
                                       "    num_tiles = num_tiles - 1\n"), "layer_norm_rows")
    assert not ok and "pass count `num_tiles`" in why and "depends on num_tiles, assigned between" in why
    ok, why = R.applicable(SRC.replace("        acc += d * d\n", "        acc += d * d\n"
                                       "        ct.store(X, index=(row, j), tile=xt)\n"), "layer_norm_rows")
    assert not ok and "X is written between its loads" in why
    ok, why = R.applicable(three_pass.new_source, "layer_norm_rows")
    assert not ok and "no two consecutive pass loops" in why
    ok, why = R.applicable(SRC, "row_max")
    assert not ok
