"""group_m_swizzle: 2-D grid -> grouped 1-D grid (playbook I)."""
from __future__ import annotations

import numpy as np
import pytest

from cutile_diag.transforms import GroupMSwizzle

from .tf_support import emulated, entry_symbol, example_source, op_counts

T = GroupMSwizzle()


@pytest.fixture(scope="module")
def swizzled():
    return T.apply(example_source("matmul"), "matmul")


@pytest.mark.parametrize("kernel", ["matmul", "matmul_f32"])
def test_compiles_with_one_block_id_and_the_group_math(compiler, swizzled, kernel):
    base = compiler.tileir(example_source("matmul"), kernel)
    new = compiler.tileir(swizzled.new_source, kernel)
    b, n = op_counts(base), op_counts(new)
    assert (b["get_tile_block_id"], n["get_tile_block_id"]) == (2, 1)
    assert b["divi"] == 0 and n["divi"] >= 2 and n["remi"] >= 2 and n["mini"] >= 1
    assert n["get_index_space_shape"] == b["get_index_space_shape"] + 2   # num_bid_m, num_bid_n
    assert entry_symbol(new) == entry_symbol(base) + "_I8"
    # the mma and its loads are untouched
    assert (n["mmaf"], n["load_view_tko"], n["store_view_tko"]) == (1, 2, 1)


def test_host_side(swizzled):
    src = swizzled.new_source
    assert "ct.launch(stream, (ct.cdiv(m, tm) * ct.cdiv(n, tn),), matmul, (A, B, C, tm, tn, tk, 8))" in src
    assert '"matmul": {**_F16, "TM": 128, "TN": 128, "TK": 64, "GROUP_SIZE_M": 8},' in src
    assert '"matmul_f32": {**_F32, "TM": 64, "TN": 64, "TK": 32, "GROUP_SIZE_M": 8},' in src
    assert "TK: ct.Constant[int], GROUP_SIZE_M: ct.Constant[int]):" in src
    # the tuned kernel and its launch are not touched
    def tuned(text):
        return text.split("@ct.kernel\ndef matmul_tuned")[1].split("\n\n\n")[0]
    assert tuned(src) == tuned(example_source("matmul"))
    assert "ct.launch(stream, (min(sms, tiles),), matmul_tuned, (A, B, C, tm, tn, tk, group_size_m))" in src


@pytest.mark.parametrize("group", [2, 8])
def test_every_output_tile_once_on_the_emulator(emu_dir, group):
    import torch
    src = example_source("matmul")
    new = T.apply(src, "matmul", group_size_m=group).new_source
    # 3 x 5 output tiles: with group 2 the last group is a single row (the clamp)
    a = torch.randn(384, 192)
    b = torch.randn(192, 640)
    outs = []
    for s in (src, new):
        c = torch.full((384, 640), float("nan"))
        mod = emulated(emu_dir, s, "matmul")
        mod.launch(a, b, c, stream=object())
        outs.append((c.numpy().copy(), mod.ct.launches))
    np.testing.assert_array_equal(outs[1][0], outs[0][0])
    assert outs[0][1] == [("matmul", (3, 5, 1))] and outs[1][1] == [("matmul", (15, 1, 1))]


def test_extra_blocks_are_harmless(emu_dir):
    """A grid larger than the tile count (the launcher's formula disagreeing with the kernel's
    arrays) must not divide by zero in the group math; the extra blocks only clip."""
    import torch
    new = T.apply(example_source("matmul"), "matmul", group_size_m=2).new_source
    new = new.replace("(ct.cdiv(m, tm) * ct.cdiv(n, tn),)", "(ct.cdiv(m, tm) * ct.cdiv(n, tn) + 7,)")
    a, b = torch.randn(384, 64), torch.randn(64, 640)
    c = torch.zeros(384, 640)
    mod = emulated(emu_dir, new, "matmul")
    mod.launch(a, b, c, stream=object())
    assert mod.ct.launches == [("matmul", (22, 1, 1))]
    np.testing.assert_allclose(c.numpy(), (a @ b).numpy(), rtol=1e-4, atol=1e-4)


def test_block_order_is_grouped(emu_dir):
    """Consecutive blocks walk down a group of rows before moving right."""
    src = T.apply(example_source("matmul"), "matmul", group_size_m=2).new_source
    mod = emulated(emu_dir, src, "matmul")
    order = []
    real_store = mod.ct.store

    def spy(array, index, tile, **kw):
        order.append(tuple(index))
        real_store(array, index, tile, **kw)
    mod.ct.store = spy
    import torch
    mod.launch(torch.zeros(384, 64), torch.zeros(64, 640), torch.zeros(384, 640), stream=object())
    assert order[:6] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert order[10:] == [(2, 0), (2, 1), (2, 2), (2, 3), (2, 4)]
    assert sorted(order) == [(m, n) for m in range(3) for n in range(5)]


def test_refusals(swizzled):
    ok, why = T.applicable(swizzled.new_source, "matmul")
    assert not ok and why.startswith("already applied")
    ok, why = T.applicable(example_source("matmul"), "matmul_tuned")
    assert not ok and why.startswith("already applied")
    ok, why = T.applicable(example_source("vector_add"), "vector_add")
    assert not ok and "not a 2-D grid" in why
    three_d = example_source("matmul").replace("bn = ct.bid(1)", "bn = ct.bid(1) + ct.bid(2)")
    ok, why = T.applicable(three_d, "matmul")
    assert not ok and "3-D grid" in why
    no_extent = example_source("matmul").replace("shape=(TM, TK))", "shape=(TM, 64))").replace(
        "shape=(TK, TN))", "shape=(64, TN))")
    ok, why = T.applicable(no_extent, "matmul")
    assert ok   # literal dims are fine
    hidden = example_source("matmul").replace("a = ct.load(A, index=(bm, k)", "a = ct.load(A, index=(bm + 0, k)")
    ok, why = T.applicable(hidden, "matmul")
    assert not ok and "extent of grid axis 0" in why
    grid_name = example_source("matmul").replace(
        "ct.launch(stream, (ct.cdiv(m, tm), ct.cdiv(n, tn)), matmul,",
        "grid = (ct.cdiv(m, tm), ct.cdiv(n, tn), 1)\n        ct.launch(stream, grid, matmul,")
    res = T.apply(grid_name, "matmul")
    assert "grid = (ct.cdiv(m, tm) * ct.cdiv(n, tn),)" in res.new_source
    with pytest.raises(Exception):
        T.apply(example_source("matmul"), "matmul", group_size_m=0)


def test_candidates():
    assert T.candidates(example_source("matmul"), "matmul") == [
        {"group_size_m": 8}, {"group_size_m": 4}, {"group_size_m": 16}]
