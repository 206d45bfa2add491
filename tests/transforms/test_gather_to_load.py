"""gather_to_load: block-contiguous ct.gather/ct.scatter -> ct.load/ct.store (playbook A)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cutile_diag.transforms import GatherToLoad

from .tf_support import emulated, example_source, op_counts, op_lines

T = GatherToLoad()


@pytest.fixture(scope="module")
def converted():
    return T.apply(example_source("gather_scale"), "gather_scale")


def test_pointer_ops_become_view_ops(compiler, converted):
    base = op_counts(compiler.tileir(example_source("gather_scale"), "gather_scale"))
    text = compiler.tileir(converted.new_source, "gather_scale")
    new = op_counts(text)
    assert (base["load_ptr_tko"], base["store_ptr_tko"]) == (1, 1)
    assert (new["load_ptr_tko"], new["store_ptr_tko"], new["offset"], new["iota"]) == (0, 0, 0, 0)
    assert (new["load_view_tko"], new["store_view_tko"]) == (1, 1)
    assert "partition_view<tile=(1024), padding_value = zero," in op_lines(text, "load_view_tko")[0]
    assert new["get_tile_block_id"] == 1


def test_source_shape(converted):
    body = converted.new_source.split("def gather_scale(x, y, TILE: ct.Constant[int]):\n")[1].split("\n\n")[0]
    assert body.splitlines() == [
        "    bid = ct.bid(0)",
        "    v = ct.load(x, index=(bid,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)",
        "    ct.store(y, index=(bid,), tile=v * 2.0 + 1.0)"]


def test_same_result_with_a_ragged_tail(converted, emu_dir):
    import torch
    x = torch.randn(5000)            # 4 full tiles and a partial one
    outs = []
    for s in (example_source("gather_scale"), converted.new_source):
        y = torch.full((5000,), -7.0)
        emulated(emu_dir, s, "gather_scale").launch(x, y, stream=object())
        outs.append(y.numpy().copy())
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(outs[0], (x * 2 + 1).numpy())


def test_inline_index_and_latency_carry_over(compiler):
    src = example_source("gather_scale").replace(
        "    idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)\n    v = ct.gather(x, idx)\n",
        "    b = ct.bid(0)\n    v = ct.gather(x, ct.arange(TILE, dtype=ct.int32) + TILE * b, latency=2)\n"
        "    idx = b * TILE + ct.arange(TILE, dtype=ct.int32)\n")
    res = T.apply(src, "gather_scale")
    assert "v = ct.load(x, index=(b,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO, latency=2)" \
        in res.new_source
    assert "ct.store(y, index=(b,), tile=v * 2.0 + 1.0)" in res.new_source
    assert "idx =" not in res.new_source
    text = compiler.tileir(res.new_source, "gather_scale")
    assert "latency = 2" in op_lines(text, "load_view_tko")[0]


@pytest.mark.parametrize("old, new, reason", [
    ("v = ct.gather(x, idx)", "v = ct.gather(x, idx, mask=idx < 100)", "has a mask"),
    ("ct.arange(TILE, dtype=ct.int32)", "ct.arange(TILE, dtype=ct.int32) * 2", "is strided (non-affine"),
    ("ct.bid(0) * TILE +", "ct.bid(0) * 512 +", "offset `ct.bid(0) * 512` is not a multiple of the tile size"),
    ("ct.arange(TILE, dtype=ct.int32)", "ct.arange(TILE, dtype=ct.int32, start=1)", "starts at 1, not on a tile"),
])
def test_refusals(old, new, reason):
    src = example_source("gather_scale").replace(old, new)
    assert src != example_source("gather_scale")
    ok, why = T.applicable(src, "gather_scale")
    if "mask" in reason or "pads" in reason:
        # the scatter still converts; the gather is reported
        assert ok
        assert reason in T.apply(src, "gather_scale").notes[0]
    else:
        assert not ok and reason in why


def test_reassigned_block_refused_and_nothing_left():
    src = example_source("gather_scale").replace(
        "    idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)\n",
        "    b = ct.bid(0)\n    b = b + 1\n    idx = b * TILE + ct.arange(TILE, dtype=ct.int32)\n")
    ok, why = T.applicable(src, "gather_scale")
    assert not ok and "`b` is reassigned" in why
    done = T.apply(example_source("gather_scale"), "gather_scale").new_source
    ok, why = T.applicable(done, "gather_scale")
    assert not ok and "no ct.gather" in why


def test_non_zero_padding_becomes_zero_load_plus_where(compiler):
    src = example_source("gather_scale").replace("v = ct.gather(x, idx)", "v = ct.gather(x, idx, padding_value=1.0)")
    new = T.apply(src, "gather_scale").new_source
    assert ("v = ct.where((bid * TILE + ct.arange(TILE, dtype=ct.int32) < x.shape[0]), "
            "ct.load(x, index=(bid,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO), 1.0)") in new
    text = compiler.tileir(new, "gather_scale")
    assert "padding_value = zero" in op_lines(text, "load_view_tko")[0]
    assert op_counts(text)["load_ptr_tko"] == 0


def test_a_local_named_like_a_ct_function(compiler):
    """`bid = ct.bid(0)` (as library kernels write it): the attribute `ct.bid` is not the local."""
    src = example_source("gather_scale").replace(
        "    idx = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)\n",
        "    bid = ct.bid(0)\n    idx = bid * TILE + ct.arange(TILE, dtype=ct.int32)\n")
    new = T.apply(src, "gather_scale").new_source
    assert "v = ct.load(x, index=(bid,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)" in new
    assert op_counts(compiler.tileir(new, "gather_scale"))["load_view_tko"] == 1


def test_an_array_extent_in_a_row_index_is_not_a_memory_read(compiler):
    """`A.shape[0] - 1 - row` (rows in reverse): a shape is no data-dependent index."""
    rows = (Path(__file__).parent / "fixtures" / "row_kernels.py").read_text()
    src = rows.replace("    rr = ct.full((TILE,), row, dtype=ct.int32)\n",
                      "    rr = ct.full((TILE,), x.shape[0] - 1 - row, dtype=ct.int32)\n")
    res = T.apply(src, "scale_rows")
    assert "ct.load(x, index=(x.shape[0] - 1 - row, 0), shape=(1, TILE)" in res.new_source
    assert "ct.store(y, index=(x.shape[0] - 1 - row, 0)" in res.new_source
    assert op_counts(compiler.tileir(res.new_source, "scale_rows"))["load_view_tko"] == 1
