"""gather_to_load and read_once on row kernels with run-time extents and chunked passes
(the row_norm example and fixtures/chunked_rows.py).

* A: a broadcast chunk start ``ct.full((T,), c * T) + lanes`` is the tile offset ``c``;
  a bounds mask ``off < N`` with N a run-time scalar is proven through every same-file
  launch (``m, n = x.shape``, ``n = x.shape[-1]``, ``x.size(1)``, ...).
* W: the pass count may be a run-time value: the one-pass path is a run-time branch,
  which cuTile compiles (both paths, the names both assign merged), checked with tileiras.
Each result is compiled AOT, run on the CPU emulator against the original, and the
refusals name the call or launch line and the reason."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag.transforms import GatherToLoad, ReadOnce
from cutile_diag.toolchain import have_tool

from .tf_support import emulated, op_counts, op_lines

A, W = GatherToLoad(), ReadOnce()
CHUNKED = (Path(__file__).parent / "fixtures" / "chunked_rows.py").read_text()
ROW_NORM = (EXAMPLES_DIR / "row_norm.py").read_text()
ROW_NORM_SPECS = {"X": "f16[4096,1000]", "Y": "f16[4096,1000]", "Mean": "f32[4096]", "Rstd": "f32[4096]",
                  "N": "i32", "EPS": 1e-5, "TILE_N": 1024}
ASSERT_Y = "    assert y.shape == x.shape, \"y must have x's shape\"\n"
PTR_VIEW = ("load_ptr_tko", "load_view_tko", "store_ptr_tko", "store_view_tko")


@pytest.fixture(scope="module")
def aot(compiler):
    if not all(have_tool(t) for t in ("tileiras", "ptxas", "cuobjdump")):
        pytest.skip("tileiras / ptxas not installed")
    return compiler.aot


def _ops(text: str) -> tuple[int, ...]:
    c = op_counts(text)
    return tuple(c[o] for o in PTR_VIEW)


def _body(src: str, kernel: str) -> str:
    return src.split(f"def {kernel}(")[1].split("CAPTURE_SPECS")[0].split("\ndef ")[0]


def _line(src: str, text: str) -> int:
    return next(i for i, ln in enumerate(src.splitlines(), 1) if text in ln)


def _a_then_w(src: str, kernel: str):
    a = A.apply(src, kernel)
    return a, W.apply(a.new_source, kernel)


@pytest.fixture(scope="module")
def chunks():
    return _a_then_w(CHUNKED, "softmax_chunks")


@pytest.fixture(scope="module")
def row_norm():
    return _a_then_w(ROW_NORM, "row_norm")


# -- A: broadcast scalar offsets ---------------------------------------------------------

def test_broadcast_chunk_starts_become_tile_indices(compiler, chunks):
    a, _ = chunks
    assert a.description.startswith("ct.gather -> ct.load (lines 30, 36, 41); ct.scatter -> ct.store (line 42)")
    new = a.new_source
    # `start = c * TILE`, `start = TILE * c` and the inline `c * TILE`: all tile index c
    load = ("ct.reshape(ct.load(inp, index=(r, c), shape=(1, TILE), padding_mode=ct.PaddingMode.ZERO, "
            "check_bounds=True), (TILE,))")
    assert new.count(f"ct.where((c * TILE + ct.arange(TILE, dtype=ct.int32) < inp.shape[1]), {load}, -math.inf)") == 3
    assert "ct.store(out, index=(r, c), tile=ct.reshape(ct.astype(ct.exp(v - m) * inv, out.dtype), (1, TILE)), " \
           "check_bounds=True)" in new
    body = _body(new, "softmax_chunks")
    assert "ct.gather" not in body and "start =" not in body and "lanes =" not in body
    text = compiler.tileir(new, "softmax_chunks")
    assert (_ops(compiler.tileir(CHUNKED, "softmax_chunks")), _ops(text)) == ((3, 0, 1, 0), (0, 3, 0, 1))
    assert all("padding_value = zero" in ln for ln in op_lines(text, "load_view_tko"))


@pytest.mark.parametrize("new, reason", [
    ("c * TILE + 1", "offset `ct.full((TILE,), start, dtype=ct.int32)` is not a multiple of the tile size `TILE`"),
    ("c * 128", "is not a multiple of the tile size `TILE`"),
    ("ct.astype(ct.gather(inp, (r, c)), ct.int32) * TILE",
     "is data-dependent (loaded from memory by `ct.gather(inp, (r, c))`)"),
])
def test_broadcast_offsets_that_are_not_tile_indices_are_refused(new, reason):
    src = CHUNKED.replace("            start = c * TILE\n", f"            start = {new}\n")
    assert src != CHUNKED
    _refused_in_pass_one(src, reason)


def test_loop_carried_and_2d_broadcasts_are_refused():
    # `start += TILE` per chunk: its value at the gather is not one provable expression
    src = CHUNKED.replace("            start = c * TILE\n", "            start += TILE\n").replace(
        "        lanes = ct.arange(TILE, dtype=ct.int32)\n", "        lanes = ct.arange(TILE, dtype=ct.int32)\n"
                                                          "        start = -TILE\n")
    _refused_in_pass_one(src, "offset `ct.full((TILE,), start, dtype=ct.int32)` is not a multiple of the tile size")
    # a broadcast over two dimensions: the gather's result is 2-D, not one row tile
    src = CHUNKED.replace("idx = ct.full((TILE,), start, dtype=ct.int32) + lanes",
                          "idx = ct.full((2, TILE), start, dtype=ct.int32) + lanes", 1)
    _refused_in_pass_one(src, "`ct.full((2, TILE), start, dtype=ct.int32)` is not a 1-D broadcast of a scalar")


def _refused_in_pass_one(src: str, reason: str):
    res = A.apply(src, "softmax_chunks")      # the other passes still convert
    lines = [i for i, ln in enumerate(src.splitlines(), 1) if "v = ct.astype(ct.gather(inp, (r, idx)" in ln]
    assert any(n.startswith(f"ct.gather at line {lines[0]}: ") and reason in n for n in res.notes), res.notes
    assert res.description.startswith(f"ct.gather -> ct.load (lines {lines[1]}, {lines[2]})")


# -- A: bounds masks against a run-time extent, proven at the launches ----------------------

WRAPPER_FORMS = {
    "m, n = x.shape": None,
    "m, n = x.size()": ("    m, n = x.shape\n", "    m, n = x.size()\n"),
    "x.shape[1]": ("    m, n = x.shape\n", "    m = x.shape[0]\n    n = x.shape[1]\n"),
    "x.shape[-1]": ("    m, n = x.shape\n", "    m = x.shape[0]\n    n = x.shape[-1]\n"),
    "x.size(1)": ("    m, n = x.shape\n", "    m = x.size(0)\n    n = x.size(1)\n"),
    "inline": ("rstd, n, eps, tile_n))", "rstd, x.shape[1], eps, tile_n))"),
    "y = empty_like(x)": (ASSERT_Y, "    y = torch.empty_like(x)\n"),
    "cols + T * j": ("        off = j * TILE_N + cols\n", "        off = cols + TILE_N * j\n"),
}


@pytest.mark.parametrize("form", list(WRAPPER_FORMS))
def test_runtime_extent_proven_through_the_wrapper(form):
    src = ROW_NORM
    if WRAPPER_FORMS[form]:
        src = ROW_NORM.replace(*WRAPPER_FORMS[form])
        assert src != ROW_NORM
    res = A.apply(src, "row_norm")
    assert res.description.startswith("ct.gather -> ct.load (lines 22, 32); ct.scatter -> ct.store (line 33)")
    assert "ct.store(Y, index=(row, j), tile=ct.reshape(ct.astype((x - mean) * rstd, Y.dtype), (1, TILE_N)))" \
        in res.new_source
    assert "mask=" not in _body(res.new_source, "row_norm")


@pytest.mark.parametrize("old, new, why", [
    ("    m, n = x.shape\n", "    n, m = x.shape\n", "passes `n` for N, not provably x.shape[1]"),
    ("    m, n = x.shape\n", "    m, n = x.shape\n    x = x.reshape(-1, 500)\n",
     "passes `n` for N, not provably x.shape[1]"),
    ("rstd, n, eps, tile_n))", "rstd, x.shape[0], eps, tile_n))", "passes `x.shape[0]` for N, not provably x.shape[1]"),
])
def test_unprovable_extents_are_refused_naming_the_launch(old, new, why):
    src = ROW_NORM.replace(old, new)
    assert src != ROW_NORM
    ok, reason = A.applicable(src, "row_norm")
    launch = _line(src, "ct.launch(stream, (m,), row_norm")
    assert not ok and f"mask term `off < N`: cannot prove `N` is X.shape[1] (the array's extent): " \
                      f"the launch at line {launch} {why}" in reason


def test_output_array_needs_a_shape_relation_to_the_input():
    """The example's wrapper takes `y` from its caller and asserts its shape; without that
    assert the Y scatter's bounds mask is not provable and the scatter stays."""
    src = ROW_NORM.replace(ASSERT_Y, "")
    assert src != ROW_NORM
    res = A.apply(src, "row_norm")
    launch = _line(src, "ct.launch(stream, (m,), row_norm")
    assert res.description.startswith("ct.gather -> ct.load (lines 22, 32) with")     # X's extent is proven
    assert f"ct.scatter at line 33 has a mask that is not a bounds mask (mask term `off < N`: cannot prove `N` is " \
           f"Y.shape[1] (the array's extent): the launch at line {launch} passes `n` for N, not provably " \
           f"y.shape[1])" in res.notes


def test_every_launch_must_prove_the_extent():
    """A second wrapper in the file passes something else for N: that launch is named."""
    src = ROW_NORM + ('\n\ndef launch_prefix(x, y, mean, rstd, k, stream=None):\n'
                      '    assert y.shape == x.shape\n'
                      '    ct.launch(stream, (x.shape[0],), row_norm, (x, y, mean, rstd, k, 1e-5, 256))\n'
                      '    return y\n')
    ok, why = A.applicable(src, "row_norm")
    line = _line(src, "(x, y, mean, rstd, k, 1e-5, 256)")
    assert not ok and f"the launch at line {line} passes `k` for N, not provably x.shape[1]" in why
    assert f"line {_line(src, 'ct.launch(stream, (m,), row_norm')}" not in why


def test_row_norm_gets_tile_loads_and_compiles(aot, row_norm):
    a, _ = row_norm
    assert a.description == ("ct.gather -> ct.load (lines 22, 32); ct.scatter -> ct.store (line 33) "
                              "with a tile index and ZERO padding")
    assert all("every index component is a scalar" in n for n in a.notes)       # Mean, Rstd stay scatters
    assert "ct.scatter(Mean, row, mean)" in a.new_source and "ct.scatter(Rstd, row, rstd)" in a.new_source
    before, after = aot(ROW_NORM, "row_norm", ROW_NORM_SPECS), aot(a.new_source, "row_norm", ROW_NORM_SPECS)
    # two X gathers -> two ZERO-padded views; the Y scatter -> a view store; Mean/Rstd stay pointer stores
    assert (_ops(before), _ops(after)) == ((2, 0, 3, 0), (0, 2, 2, 1))
    assert all("padding_value = zero" in ln for ln in op_lines(after, "load_view_tko"))


@pytest.mark.parametrize("tile", [128, 512])       # three column tiles (ragged), and one
def test_row_norm_same_result_after_a_then_w(emu_dir, row_norm, tile):
    import torch
    torch.manual_seed(0)
    x = (torch.randn(5, 300) * 2 + 0.5).to(torch.float16)
    outs = []
    for src in (ROW_NORM, *(r.new_source for r in row_norm)):
        y, mean, rstd = torch.empty_like(x), torch.empty(5), torch.empty(5)
        emulated(emu_dir, src, "row_norm").launch(x, y, mean, rstd, 1e-5, tile, stream=object())
        outs.append([t.numpy().copy() for t in (y, mean, rstd)])
    for got in outs[1:]:
        for g, ref in zip(got, outs[0]):
            np.testing.assert_array_equal(g, ref)
    ref = torch.nn.functional.layer_norm(x.float(), (300,), eps=1e-5)
    np.testing.assert_allclose(outs[0][0].astype(np.float32), ref.numpy(), rtol=2e-2, atol=2e-2)


# -- W with a run-time pass count --------------------------------------------------------

def test_read_once_with_a_runtime_pass_count_is_a_runtime_branch(aot, row_norm):
    w = row_norm[1]
    assert w.description == ("the pass loops at lines 18, 27 load X once when ct.cdiv(N, TILE_N) == 1 (extent <= "
                             "tile): a run-time branch (the count depends on run-time values, so both paths are "
                             "compiled and the row length picks one per launch); the loops stay for longer rows")
    assert "    if ct.cdiv(N, TILE_N) == 1:\n" in w.new_source
    assert w.new_source.count("x_tile = ct.load(X, index=(row, j)") == 1
    # cuTile compiles the run-time `if` (tileiras, sm_90): one X load on the one-pass path,
    # the two pass loops kept; the names both paths assign (mean, rstd, the sums) merged
    c = op_counts(aot(w.new_source, "row_norm", ROW_NORM_SPECS))
    assert (c["if"], c["for"], c["load_view_tko"], c["load_ptr_tko"]) == (1, 2, 3, 0)


def test_read_once_three_pass_chunked_softmax_is_resolved_at_compile_time(aot, chunks):
    w = chunks[1]
    assert w.description == ("the pass loops at lines 26, 30, 34 load inp once when (N_COLS + TILE - 1) // TILE "
                             "== 1 (extent <= tile); the loops stay for longer rows")
    assert w.new_source.count("inp_tile = ct.load(inp, index=(r, c)") == 1
    assert w.new_source.count("ct.reshape(inp_tile, (TILE,))") == 3
    fits = w.new_source.replace('"N_COLS": 1000,\n                       "TILE": 256',
                                '"N_COLS": 1000,\n                       "TILE": 1024')
    assert fits != w.new_source
    # N_COLS and TILE are constants: cuTile keeps one path; a row that fits loads it once
    c = op_counts(aot(fits, "softmax_chunks"))
    assert (c["load_view_tko"], c["if"]) == (1, 0)
    c = op_counts(aot(w.new_source, "softmax_chunks"))
    assert (c["load_view_tko"], c["if"]) == (3, 0)


@pytest.mark.parametrize("cols, tile", [(300, 128), (300, 512), (512, 512)])
def test_chunked_softmax_same_result_after_a_then_w(emu_dir, one_sm, chunks, cols, tile):
    import torch
    torch.manual_seed(0)
    x = torch.randn(6, cols) * 3
    outs = [emulated(emu_dir, s, "chunks").softmax(x, tile, stream=object()).numpy()
            for s in (CHUNKED, *(r.new_source for r in chunks))]
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(outs[2], outs[0])
    np.testing.assert_allclose(outs[0], torch.softmax(x, 1).numpy(), rtol=1e-5, atol=1e-6)


def test_read_once_refuses_a_count_changed_between_the_passes(row_norm):
    src = row_norm[0].new_source.replace("    ct.scatter(Rstd, row, rstd)\n",
                                         "    ct.scatter(Rstd, row, rstd)\n    N = N - 1\n")
    assert src != row_norm[0].new_source
    ok, why = W.applicable(src, "row_norm")
    assert not ok and "the pass count `ct.cdiv(N, TILE_N)`" in why and "depends on N, assigned between" in why


# -- A: loops that step by the tile ------------------------------------------------------

def test_a_loop_stepping_by_the_tile_gives_the_tile_index(compiler, emu_dir):
    res = A.apply(CHUNKED, "center_rows")
    assert res.description.startswith("ct.gather -> ct.load (lines 53, 57); ct.scatter -> ct.store (line 58)")
    load = "ct.load(X, index=(row, off // TILE), shape=(1, TILE), padding_mode=ct.PaddingMode.ZERO)"
    assert res.new_source.count(load) == 2
    assert "ct.store(Y, index=(row, off // TILE), tile=" in res.new_source
    assert (_ops(compiler.tileir(CHUNKED, "center_rows")), _ops(compiler.tileir(res.new_source, "center_rows"))) == \
        ((2, 0, 1, 0), (0, 2, 0, 1))
    import torch
    x = torch.randn(5, 300)
    outs = [emulated(emu_dir, s, "center").center(x, 128, stream=object()).numpy() for s in (CHUNKED, res.new_source)]
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_allclose(outs[0], (x - x.mean(1, keepdim=True)).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loop", ["range(0, N, 2 * TILE)", "range(1, N, TILE)", "range(N)"])
def test_loops_not_stepping_by_the_tile_are_refused(loop):
    src = CHUNKED.replace("    for off in range(0, N, TILE):\n        cols = off + ct.arange(TILE, dtype=ct.int32)\n        acc",
                          f"    for off in {loop}:\n        cols = off + ct.arange(TILE, dtype=ct.int32)\n        acc")
    assert src != CHUNKED
    res = A.apply(src, "center_rows")
    assert res.notes[0] == ("ct.gather at line 53: offset `off` is not a multiple of the tile size `TILE`, "
                            "so it is not a tile index"), res.notes


def test_read_once_on_loops_stepping_by_the_tile(aot, emu_dir):
    a, w = _a_then_w(CHUNKED, "center_rows")
    assert w.description.startswith("the pass loops at lines 50, 53 load X once when ct.cdiv(N, TILE) == 1 "
                                    "(extent <= tile); the loops stay")
    assert "    if ct.cdiv(N, TILE) == 1:\n" in w.new_source and "        off = 0\n" in w.new_source
    fits = w.new_source.replace('"N": 1000, "TILE": 256', '"N": 1000, "TILE": 1024')
    assert fits != w.new_source
    assert op_counts(aot(fits, "center_rows"))["load_view_tko"] == 1
    assert op_counts(aot(w.new_source, "center_rows"))["load_view_tko"] == 2
    import torch
    x = torch.randn(5, 300)
    for tile in (128, 512):
        outs = [emulated(emu_dir, s, "center").center(x, tile, stream=object()).numpy()
                for s in (CHUNKED, a.new_source, w.new_source)]
        np.testing.assert_array_equal(outs[1], outs[0])
        np.testing.assert_array_equal(outs[2], outs[0])
