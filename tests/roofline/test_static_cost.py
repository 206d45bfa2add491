"""Static FLOP/byte counts from the TileIR of the example kernels, and the evaluator's limits."""
import pytest

from cutile_diag.ir_parsers.tileir import parse_tileir
from cutile_diag.roofline.static_cost import _grid_stride_total, count_entry, count_workload, cross_check
from cutile_diag.workloads import load_workload

pytest.importorskip("cuda.tile")

MB = 1e6


def _count(name, cfg, sms=132):
    wl = load_workload(f"examples:{name}")
    c = wl.config(cfg)
    return wl, c, count_workload(wl, c, sms)


def test_vector_add_counts_equal_the_minimum_traffic():
    wl, cfg, sc = _count("vector_add", "16M-f32")
    n = 1 << 24
    assert sc.grid == (n // 1024,) and sc.exact
    assert sc.bytes_loaded == 2 * n * 4 and sc.bytes_stored == n * 4
    assert sc.bytes_total == wl.bytes(cfg)
    assert sc.mma_flops == 0 and sc.other_flops == n            # one addf per element
    assert [m.access for m in sc.memory_ops] == ["view", "view", "view"]
    ratios, notes = cross_check(sc, wl.flops(cfg), wl.bytes(cfg))
    assert ratios["bytes"] == pytest.approx(1.0)


def test_persistent_grid_stride_loop_divides_the_work():
    wl, cfg, sc = _count("vector_add_persistent", "16M-f32", sms=132)
    assert sc.grid == (132 * 4,)
    assert sc.exact and sc.bytes_total == wl.bytes(cfg)
    assert any("grid-stride" in n for n in sc.notes)
    # the total does not depend on how many blocks share the loop
    _, _, sc2 = _count("vector_add_persistent", "16M-f32", sms=7)
    assert sc2.grid == (28,) and sc2.bytes_total == sc.bytes_total


def test_gemm_counts_mma_flops_and_the_reread_factor():
    wl, cfg, sc = _count("matmul", "4096-f16")
    m = n = k = 4096
    assert sc.grid == (32, 32) and sc.exact
    assert sc.mma_flops == 2 * m * n * k
    assert len(sc.mma_ops) == 1 and (sc.mma_ops[0].m, sc.mma_ops[0].n, sc.mma_ops[0].k) == (128, 128, 64)
    assert sc.mma_ops[0].execs == 64 * 32 * 32                  # K loop 4096/64, times the grid
    # every block reads a 128-row A panel and a 128-col B panel in full: K*(128+128)*2 bytes
    assert sc.bytes_loaded == 32 * 32 * k * (128 + 128) * 2
    assert sc.bytes_stored == m * n * 2
    ratios, notes = cross_check(sc, wl.flops(cfg), wl.bytes(cfg), wl.compute_unit(cfg))
    assert ratios["mma_flops"] == pytest.approx(1.0)
    assert ratios["bytes"] == pytest.approx((2 * 32 * 32 * k * 256 + m * n * 2) / wl.bytes(cfg))
    assert any("re-reads" in x for x in notes)


def test_tuned_gemm_same_work_on_a_persistent_grid():
    wl, cfg, sc = _count("matmul_tuned", "4096-f16")
    _, _, naive = _count("matmul", "4096-f16")
    assert sc.grid == (132,)
    assert sc.mma_flops == naive.mma_flops and sc.bytes_total == naive.bytes_total
    assert sc.exact


def test_f32_mma_is_flagged_as_fma_fallback():
    wl, cfg, sc = _count("matmul_f32", "1024-f32")
    assert sc.mma_flops == 2 * 1024 ** 3
    assert sc.mma_ops[0].operand_elem == "f32"
    assert any("FMA fallback" in n for n in sc.notes)
    _, notes = cross_check(sc, wl.flops(cfg), wl.bytes(cfg), ("f32", "tensor"))
    assert any("FMA fallback" in n for n in notes)


def test_softmax_row_kernel():
    wl, cfg, sc = _count("softmax", "32768x1024-f16")
    assert sc.grid == (32768,)
    assert sc.bytes_total == wl.bytes(cfg) == 2 * 32768 * 1024 * 2
    # sub, exp, div per element + two reductions (1023 combines per row each)
    assert sc.other_flops == 32768 * (3 * 1024 + 2 * 1023)


def test_gather_scatter_counts_pointer_accesses():
    wl, cfg, sc = _count("gather_scale", "16M-f32")
    assert {m.access for m in sc.memory_ops} == {"ptr"}
    assert all(m.masked for m in sc.memory_ops)
    assert sc.bytes_total == wl.bytes(cfg)
    assert sc.other_flops == 2 * (1 << 24)                      # one fma per element
    assert any("pointer (gather/scatter)" in n for n in sc.notes)


def test_declared_bytes_too_high_is_caught():
    wl, cfg, sc = _count("vector_add", "1M-f32")
    _, notes = cross_check(sc, wl.flops(cfg), 3 * wl.bytes(cfg))
    assert any("declared byte count is too high" in n for n in notes)


@pytest.mark.parametrize("ub,step,g,expected", [
    (100, 10, 10, 100), (5, 10, 10, 5), (0, 4, 4, 0), (17, 4, 4, 17), (17, 3, 4, 22)])
def test_grid_stride_total(ub, step, g, expected):
    brute = sum(max(0, -(-(ub - b) // step)) for b in range(g))
    assert _grid_stride_total(ub, step, g) == brute == expected


# -- hand-written TileIR for the evaluator's limits --------------------------------------

_HEAD = """entry @k(%arg0: tile<ptr<f32>>, %arg1: tile<i32>, %arg2: tile<i32>, %arg3: tile<i32>) optimization_hints=<default = {}> {
  %0 = make_token : token
  %tview = make_tensor_view %arg0, shape = [%arg1], strides = [1] : tile<i32> -> tensor_view<?xf32, strides=[1]>
  %pview = make_partition_view %tview : partition_view<tile=(1024), tensor_view<?xf32, strides=[1]>>
  %c0 = constant <i32: 0> : tile<i32>
  %c1 = constant <i32: 1> : tile<i32>
"""
_LOAD = ("    %tile, %tok = load_view_tko weak %pview[%i] token = %0 : partition_view<tile=(1024), "
         "tensor_view<?xf32, strides=[1]>>, tile<i32> -> tile<1024xf32>, token\n")


def _entry(body: str):
    return parse_tileir(_HEAD + body + "  return\n}\n").entries[0]


def test_loop_bound_from_a_runtime_scalar_is_unknown_not_guessed():
    e = _entry("  for %i in (%c0 to %arg3, step %c1) : tile<i32> {\n" + _LOAD + "  }\n")
    sc = count_entry(e, {"%arg0": None, "%arg1": 4096, "%arg2": 1, "%arg3": None}, (4,))
    assert sc.bytes_loaded is None and sc.bytes_total is None and not sc.exact
    assert any("upper bound not known" in u for u in sc.unknown)
    assert sc.memory_ops[0].bytes_per_exec == 4096 and sc.memory_ops[0].execs is None
    # the same loop with a known bound is exact
    sc2 = count_entry(e, {"%arg0": None, "%arg1": 4096, "%arg2": 1, "%arg3": 10}, (4,))
    assert sc2.exact and sc2.bytes_loaded == 10 * 4096 * 4


def test_lower_bound_from_a_runtime_value_is_unknown():
    e = _entry("  %b = muli %c1, %arg3 : tile<i32>\n"
               "  for %i in (%b to %arg1, step %c1) : tile<i32> {\n" + _LOAD + "  }\n")
    sc = count_entry(e, {"%arg1": 4096, "%arg3": None}, (2,))
    assert sc.bytes_total is None and any("lower bound" in u or "upper bound" in u for u in sc.unknown)


def test_index_space_trip_count_and_grid_stride():
    e = _entry("  %n = get_index_space_shape %pview : partition_view<tile=(1024), tensor_view<?xf32, strides=[1]>> -> tile<i32>\n"
               "  %blockId_x, %blockId_y, %blockId_z = get_tile_block_id : tile<i32>\n"
               "  %gridSize_x, %gridSize_y, %gridSize_z = get_num_tile_blocks : tile<i32>\n"
               "  for %i in (%blockId_x to %n, step %gridSize_x) : tile<i32> {\n" + _LOAD + "  }\n")
    sc = count_entry(e, {"%arg1": 10 * 1024 + 1}, (4,))          # 11 tiles (the last one partial)
    assert sc.exact and sc.bytes_loaded == 11 * 4096
    sc_big_grid = count_entry(e, {"%arg1": 3 * 1024}, (8,))       # more blocks than tiles
    assert sc_big_grid.bytes_loaded == 3 * 4096


def test_while_loop_has_no_static_trip_count():
    body = ("  %r = loop iter_values(%a = %0) : token -> token {\n"
            "    %i = constant <i32: 0> : tile<i32>\n" + _LOAD +
            "    continue %a : token\n  }\n")
    sc = count_entry(_entry(body), {"%arg1": 4096}, (1,))
    assert sc.bytes_total is None and any("while" in u for u in sc.unknown)


def test_dynamic_if_counts_the_larger_branch_as_an_upper_bound():
    body = ("  %c = cmpi less_than %arg3, %c1, signed : tile<i32> -> tile<i1>\n"
            "  if %c {\n    %i = constant <i32: 0> : tile<i32>\n" + _LOAD.replace("%tile,", "%t1,").replace("%tok", "%k1") +
            _LOAD.replace("%tile,", "%t2,").replace("%tok", "%k2") +
            "  } else {\n    %i = constant <i32: 0> : tile<i32>\n" + _LOAD + "  }\n")
    sc = count_entry(_entry(body), {"%arg1": 4096, "%arg3": None}, (1,))
    assert sc.bytes_loaded == 2 * 4096 and not sc.exact
    assert any("larger branch" in n for n in sc.notes)
    # a static condition takes exactly one branch
    sc2 = count_entry(_entry(body), {"%arg1": 4096, "%arg3": 5}, (1,))
    assert sc2.bytes_loaded == 4096 and sc2.exact


def test_bad_grid_is_rejected():
    e = _entry("")
    with pytest.raises(ValueError):
        count_entry(e, {}, (0,))
    with pytest.raises(ValueError):
        count_entry(e, {}, (1, 1, 1, 1))
