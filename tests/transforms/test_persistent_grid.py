"""persistent_grid: grid-stride loop over tiles (playbook B)."""
from __future__ import annotations

import numpy as np
import pytest

from cutile_diag.transforms import GatherToLoad, GroupMSwizzle, PersistentGrid, Tf32Guard

from .tf_support import emulated, example_source, op_counts, op_lines

T = PersistentGrid()


def _is_grid_stride(text: str) -> bool:
    fors = op_lines(text, "for")
    return op_counts(text)["get_num_tile_blocks"] == 1 and any(" in (%blockId_x to " in f for f in fors)


@pytest.mark.parametrize("kernel", ["vector_add", "softmax"])
def test_outer_grid_stride_loop(compiler, kernel):
    src = example_source(kernel)
    res = T.apply(src, kernel)
    base, new = compiler.tileir(src, kernel), compiler.tileir(res.new_source, kernel)
    assert not _is_grid_stride(base) and _is_grid_stride(new)
    assert op_counts(new)["get_index_space_shape"] == op_counts(base)["get_index_space_shape"] + 1
    # the per-tile work is unchanged
    for op in ("load_view_tko", "store_view_tko", "addf", "divf", "exp"):
        assert op_counts(new)[op] == op_counts(base)[op]


def test_vector_add_source(compiler):
    res = T.apply(example_source("vector_add"), "vector_add")
    src = res.new_source
    assert ("    num_tiles = ct.num_tiles(a, axis=0, shape=(TILE,))\n"
            "    for bid in range(ct.bid(0), num_tiles, ct.num_blocks(0)):\n"
            "        ta = ct.load(a, index=(bid,), shape=(TILE,))\n") in src
    assert ("        num_sms = torch.cuda.get_device_properties(a.device).multi_processor_count\n"
            "        ct.launch(stream, (min(n_tiles, num_sms * 4),), vector_add, (a, b, c, tile))") in src


@pytest.mark.parametrize("kernel, make_inputs", [
    ("vector_add", lambda torch: ((torch.randn(9 * 1024 + 5), torch.randn(9 * 1024 + 5)), (9 * 1024 + 5,), 10)),
    ("softmax", lambda torch: ((torch.randn(37, 1000, dtype=torch.float16),), (37, 1000), 37)),
])
def test_same_output_with_striding_blocks(emu_dir, one_sm, kernel, make_inputs):
    import torch
    ins, out_shape, n_tiles = make_inputs(torch)
    src = example_source(kernel)
    outs = []
    for s in (src, T.apply(src, kernel, blocks_per_sm=3).new_source):
        out = torch.zeros(out_shape, dtype=ins[0].dtype)
        mod = emulated(emu_dir, s, kernel)
        mod.launch(*ins, out, stream=object())
        outs.append((out.float().numpy().copy(), mod.ct.launches[0][1]))
    np.testing.assert_array_equal(outs[1][0], outs[0][0])
    assert outs[0][1] == (n_tiles, 1, 1) and outs[1][1] == (3, 1, 1)   # 1 SM x 3 blocks


def test_planted_wrong_stride_is_caught(emu_dir, one_sm):
    """The emulator check can fail: a loop that steps by one block's worth misses tiles."""
    import torch
    good = T.apply(example_source("vector_add"), "vector_add").new_source
    bad = good.replace("range(ct.bid(0), num_tiles, ct.num_blocks(0))", "range(ct.bid(0), num_tiles, 8)")
    a, b = torch.randn(12 * 1024), torch.randn(12 * 1024)
    c = torch.zeros(12 * 1024)
    emulated(emu_dir, bad, "vector_add").launch(a, b, c, stream=object())
    assert not np.array_equal(c.numpy(), (a + b).numpy())


def test_chain_gather_to_load_then_persistent(compiler, emu_dir, one_sm):
    import torch
    src = GatherToLoad().apply(example_source("gather_scale"), "gather_scale").new_source
    res = T.apply(src, "gather_scale")
    assert _is_grid_stride(compiler.tileir(res.new_source, "gather_scale"))
    x = torch.randn(7 * 1024 + 3)
    y = torch.zeros_like(x)
    emulated(emu_dir, res.new_source, "gather_scale").launch(x, y, stream=object())
    np.testing.assert_array_equal(y.numpy(), (x * 2 + 1).numpy())


def test_chain_tf32_swizzle_persistent_matmul(compiler, emu_dir, one_sm):
    import torch
    s = Tf32Guard().apply(example_source("matmul"), "matmul").new_source
    s = GroupMSwizzle().apply(s, "matmul", group_size_m=2).new_source
    res = T.apply(s, "matmul")
    assert "num_tiles = num_bid_m * num_bid_n" in res.new_source
    # the grid extents stay outside the loop, the swizzle comment with them
    head = res.new_source.split("    for bid in range(ct.bid(0), num_tiles, ct.num_blocks(0)):")[0]
    assert "num_bid_in_group = GROUP_SIZE_M * num_bid_n" in head and "# GROUP_SIZE_M swizzle" in head
    for kernel in ("matmul", "matmul_f32"):
        text = compiler.tileir(res.new_source, kernel)
        assert _is_grid_stride(text) and op_counts(text)["mmaf"] == 1
    a, b = torch.randn(384, 128), torch.randn(128, 640)
    c = torch.zeros(384, 640)
    mod = emulated(emu_dir, res.new_source, "matmul")
    mod.launch(a, b, c, stream=object())
    assert mod.ct.launches == [("matmul", (4, 1, 1))]
    np.testing.assert_allclose(c.numpy(), (a @ b).numpy(), rtol=1e-4, atol=1e-4)


def test_blocks_per_sm_follows_the_decorator_and_comments_stay():
    src = example_source("vector_add").replace(
        "@ct.kernel\ndef vector_add(", "@ct.kernel(occupancy=2)\ndef vector_add(").replace(
        "    bid = ct.bid(0)\n", "    # one tile per block\n    bid = ct.bid(0)\n")
    res = T.apply(src, "vector_add")
    assert "(min(n_tiles, num_sms * 2),)" in res.new_source and res.params == {"blocks_per_sm": 2}
    assert "    for bid in range(ct.bid(0), num_tiles, ct.num_blocks(0)):\n        # one tile per block\n" \
        "        ta = ct.load(" in res.new_source


def test_refusals():
    ok, why = T.applicable(example_source("vector_add"), "vector_add_persistent")
    assert not ok and why.startswith("already applied")
    done = T.apply(example_source("vector_add"), "vector_add").new_source
    ok, why = T.applicable(done, "vector_add")
    assert not ok and why.startswith("already applied")
    ok, why = T.applicable(example_source("matmul"), "matmul")
    assert not ok and "not a 1-D grid" in why
    # a tile-shaped gather tells the extent; a strided one does not
    ok, why = T.applicable(example_source("gather_scale"), "gather_scale")
    assert ok and "num_tiles = ct.cdiv(x.shape[0], TILE)" in why
    strided = example_source("gather_scale").replace("ct.arange(TILE, dtype=ct.int32)",
                                                     "ct.arange(TILE, dtype=ct.int32) * 2")
    ok, why = T.applicable(strided, "gather_scale")
    assert not ok and "extent of grid axis 0" in why
    early = example_source("softmax").replace("    row = ct.bid(0)\n", "    row = ct.bid(0)\n    if row > 4:\n"
                                               "        return\n")
    ok, why = T.applicable(early, "softmax")
    assert not ok and "returns early" in why


def test_candidates():
    assert T.candidates(example_source("vector_add"), "vector_add") == [
        {}, {"blocks_per_sm": 1}, {"blocks_per_sm": 2}, {"blocks_per_sm": 4}, {"blocks_per_sm": 8}]
    assert T.candidates(example_source("matmul"), "matmul") == []


def test_the_loops_sweep_starts_at_the_blocks_the_kernel_keeps_resident():
    """With the capture's resident blocks per SM the sweep is a full wave, half of it, then the
    default: on the H200 a grid of 4 blocks per SM made 16-resident row kernels 23-97 % slower."""
    src = example_source("softmax")
    plain = T.candidates(src, "softmax")
    assert T.candidates_for(src, "softmax", {}) == plain
    assert T.candidates_for(src, "softmax", {"cubin.resident_ctas": 16})[:3] == [
        {"blocks_per_sm": 16}, {"blocks_per_sm": 8}, {}]
    # a kernel at one resident block: one per SM first, the default (4) right after, no repeats
    one = T.candidates_for(src, "softmax", {"cubin.resident_ctas": 1})
    assert one[:2] == [{"blocks_per_sm": 1}, {}] and len(one) == len({str(p) for p in one})
    # the decorator's occupancy is the default: resident 2 -> [2, 1, {}] with {} = occupancy 8
    hinted = src.replace("@ct.kernel\n", "@ct.kernel(occupancy=8)\n", 1)
    assert T.candidates_for(hinted, "softmax", {"cubin.resident_ctas": 2})[:3] == [
        {"blocks_per_sm": 2}, {"blocks_per_sm": 1}, {}]
    assert T.candidates_for(src, "softmax", {"cubin.resident_ctas": True}) == plain       # not a count


def test_choose_hands_the_diagnosis_evidence_to_the_transform():
    from cutile_diag.loop.backends import Version
    from cutile_diag.loop.choose import choose
    from cutile_diag.loop.diagnosis import LoopDiagnosis, Rec
    from cutile_diag.transforms import TRANSFORMS
    a = Version("baseline", {"softmax.py": example_source("softmax")}, "c0")
    d = LoopDiagnosis(bottleneck="memory-bound", recommendations=[Rec(id="B", name="B", transform="persistent_grid")],
                      evidence=[{"key": "cubin.resident_ctas", "value": 16, "source": "sm_90"}])
    choice, _, _ = choose(d, a, kernel_file="softmax.py", kernel="softmax", transforms=TRANSFORMS,
                          attempted=set(), max_sweep=3)
    assert [c.params for c in choice.candidates] == [{"blocks_per_sm": 16}, {"blocks_per_sm": 8}, {}]
    assert "num_sms * 16" in choice.candidates[0].version.files["softmax.py"]
