"""tma_zero_padding (playbook P) and gather_to_load's -inf-padded gathers: TMA-eligible
loads whose padded lanes are restored by ct.where; proven by tileiras remarks."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cutile_diag.transforms import GatherToLoad, TmaZeroPadding
from cutile_diag.toolchain import have_tool

from .tf_support import emulated, example_source, op_counts, op_lines

P = TmaZeroPadding()
SRC = (Path(__file__).parent / "fixtures" / "row_kernels.py").read_text()


def test_neg_inf_load_becomes_zero_load_and_where(compiler):
    res = P.apply(SRC, "row_max")
    assert res.description == ("NEG_INF padding -> ZERO on the ct.load at line 85; padded lanes masked "
                               "with ct.where (line 85)")
    assert ("x = ct.where((ct.arange(TILE_N, dtype=ct.int32) < X.shape[1])[None, :], ct.load(X, index=(row, 0), "
            "shape=(1, TILE_N), padding_mode=ct.PaddingMode.ZERO), -math.inf)") in res.new_source
    assert res.new_source.count("import math\n") == 1           # the file already imports it
    before, after = compiler.tileir(SRC, "row_max"), compiler.tileir(res.new_source, "row_max")
    assert "padding_value = neg_inf" in op_lines(before, "load_view_tko")[0]
    assert "padding_value = zero" in op_lines(after, "load_view_tko")[0]
    assert op_counts(after)["select"] == op_counts(before)["select"] + 1


def test_import_math_added_and_refusals():
    res = P.apply(example_source("softmax"), "softmax")
    assert "\nimport math\nimport cuda.tile as ct\n" in res.new_source
    ok, why = P.applicable(res.new_source, "softmax")
    assert not ok and "already pads with ZERO" in why
    ok, why = P.applicable(SRC, "bias_rows")
    assert not ok and "has no ct.load" in why


def test_no_mask_when_the_tile_is_the_extent_at_every_launch():
    src = SRC.replace("(X, Y, _np2(X.shape[1]))", "(X, Y, X.shape[1])")
    res = P.apply(src, "row_max")
    body = res.new_source.split("def row_max")[1].split("@ct.kernel")[0]
    assert "no mask needed" in res.description and "ct.where" not in body
    assert "x = ct.load(X, index=(row, 0), shape=(1, TILE_N), padding_mode=ct.PaddingMode.ZERO)" in res.new_source


def test_tilegym_style_softmax_gather(compiler):
    new = GatherToLoad().apply(SRC, "softmax_rows").new_source
    assert ("row = ct.where((ct.arange(TILE, dtype=ct.int32) < inp.shape[1]), ct.reshape(ct.load(inp, "
            "index=(row_idx, 0), shape=(1, TILE), padding_mode=ct.PaddingMode.ZERO, check_bounds=check_bound), "
            "(TILE,)), -math.inf)") in new
    text = compiler.tileir(new, "softmax_rows")
    assert op_counts(text)["load_ptr_tko"] == 0 and op_counts(text)["store_ptr_tko"] == 0


@pytest.mark.parametrize("kernel, fn", [("row_max", "launch_row_max"), ("softmax_rows", "softmax")])
def test_same_result_on_ragged_rows(emu_dir, kernel, fn):
    import torch
    torch.manual_seed(0)
    x = -torch.rand(5, 300) - 1.0          # all negative: a zero-padded max would be wrong
    new = (P if kernel == "row_max" else GatherToLoad()).apply(SRC, kernel).new_source
    outs = []
    for src in (SRC, new):
        mod = emulated(emu_dir, src, "rows")
        if kernel == "row_max":
            y = torch.zeros(5, 1)
            mod.launch_row_max(x, y, stream=object())
        else:
            y = mod.softmax(x, stream=object())
        outs.append(y.numpy().copy())
    np.testing.assert_array_equal(outs[1], outs[0])
    ref = x.max(1, keepdim=True).values if kernel == "row_max" else torch.softmax(x, 1)
    np.testing.assert_allclose(outs[0], ref.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not have_tool("tileiras"), reason="tileiras not installed")
def test_tileiras_selects_tma_after(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    from cutile_diag.capture.aot import capture_aot
    from cutile_diag.transforms.tma_padding import tma_remark_messages
    remarks = {}
    for tag, src in (("before", SRC), ("after", P.apply(SRC, "row_max").new_source)):
        path = tmp_path / f"{tag}.py"
        path.write_text(src)
        remarks[tag] = capture_aot(f"{path}::row_max", out_dir=tmp_path / tag).remarks("sm_90")
    failed = [r for r in remarks["before"] if r.name == "RemarkMemoryTmaLoadFailed"]
    assert failed and "TMA only supports zero padding" in failed[0].reasons
    assert not [r for r in remarks["after"] if r.name == "RemarkMemoryTmaLoadFailed"]
    assert any(r.instruction == "TMA Load instruction" for r in remarks["after"])
    # the store's stride remark, named precisely
    msgs = tma_remark_messages(P.apply(SRC, "row_max").new_source, "row_max", remarks["after"])
    assert msgs == ["ct.store to Y at line 87: no TMA (stride not 16-byte aligned): every stride of Y but the "
                    "last must be a multiple of 16 bytes (pad Y's rows, or keep this access off TMA)"]
    before = tma_remark_messages(SRC, "row_max", remarks["before"])
    assert before[0] == ("ct.load of X at line 85: no TMA (TMA only supports zero padding): pad with ZERO and "
                         "mask the padded lanes (transform tma_zero_padding)")
