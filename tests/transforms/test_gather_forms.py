"""gather_to_load on the forms real libraries write (fixtures/row_kernels.py).

Each case is compiled before and after through the AOT path (TileIR proves the pointer
gathers became tile views with ZERO padding), run on the CPU emulator against the
original (ragged rows and columns, so padding and masks matter), and the refusals name
the call and the reason."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cutile_diag.transforms import GatherToLoad
from cutile_diag.source.analysis import AffineGather, affine_gather_form
from cutile_diag.source.model import load

from .tf_support import emulated, op_counts, op_lines

T = GatherToLoad()
SRC = (Path(__file__).parent / "fixtures" / "row_kernels.py").read_text()


@pytest.fixture(scope="module")
def done():
    return {k: T.apply(SRC, k) for k in ("rms_norm_rows", "bias_rows", "scale_rows", "embed_rows", "even_cols")}


# (kernel, pointer loads before -> after, pointer stores before -> after, view loads after)
IR = [("rms_norm_rows", (3, 0), (2, 1), 3),      # the Rstd scalar scatter stays
      ("bias_rows", (2, 1), (1, 0), 1),           # the bias gather's mask is not provably a bounds mask
      ("scale_rows", (2, 1), (1, 0), 1),          # the scalar `scale[row]` gather stays
      ("embed_rows", (2, 2), (1, 0), 0),          # data-dependent row: only the output store converts
      ("even_cols", (1, 1), (1, 0), 0)]           # strided columns: only the store converts


@pytest.mark.parametrize("kernel, loads, stores, views", IR, ids=[c[0] for c in IR])
def test_ir_pointer_ops_become_zero_padded_views(compiler, done, kernel, loads, stores, views):
    a = op_counts(compiler.tileir(SRC, kernel))
    text = compiler.tileir(done[kernel].new_source, kernel)
    b = op_counts(text)
    assert (a["load_ptr_tko"], b["load_ptr_tko"]) == loads
    assert (a["store_ptr_tko"], b["store_ptr_tko"]) == stores
    assert b["load_view_tko"] == views and b["store_view_tko"] == 1
    assert all("padding_value = zero" in ln for ln in op_lines(text, "load_view_tko"))


def test_two_pass_norm_in_loops_keeps_hints_and_drops_index_vars(compiler, done):
    new = done["rms_norm_rows"].new_source
    body = new.split("def rms_norm_rows")[1].split("@ct.kernel")[0]
    assert "offs =" not in body and "offsets =" not in body
    assert ("xj = ct.reshape(ct.load(x, index=(row, j), shape=(1, TILE), padding_mode=ct.PaddingMode.ZERO, "
            "check_bounds=check, latency=1), (TILE,))") in new
    assert "ct.load(w, index=(j,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO, check_bounds=check" in new
    assert "ct.store(out, index=(row, j), tile=ct.reshape(ct.astype(xj * rstd * wj, x.dtype), (1, TILE)), " \
           "latency=1)" in new
    assert "ct.scatter(Rstd, row, rstd)" in new
    assert "every index component is a scalar" in done["rms_norm_rows"].notes[0]
    text = compiler.tileir(new, "rms_norm_rows")
    assert all("latency = 1" in ln for ln in op_lines(text, "load_view_tko"))
    assert "tile=(1x256)" in op_lines(text, "load_view_tko")[0]


def test_2d_broadcast_rows_and_bounds_masks(compiler, done):
    new = done["bias_rows"].new_source
    assert "xt = ct.load(x, index=(pid, 0), shape=(ROWS, TILE), padding_mode=ct.PaddingMode.ZERO)" in new
    assert "ct.store(y, index=(pid, 0), tile=xt + bt[None, :])" in new
    assert "mask = " not in new and "rows = " not in new
    assert "cannot prove `N` is b.shape[0]" in done["bias_rows"].notes[0]
    assert "tile=(4x1024)" in op_lines(compiler.tileir(new, "bias_rows"), "load_view_tko")[0]
    # scale_rows: ct.full((T,), row) row ids; N proven to be x.shape[1] (and y = empty_like(x))
    new = done["scale_rows"].new_source
    assert "v = ct.reshape(ct.load(x, index=(row, 0), shape=(1, TILE), padding_mode=ct.PaddingMode.ZERO), " \
           "(TILE,))" in new
    assert "rr =" not in new


def test_refusals_name_the_reason(done):
    assert "index `tok` is data-dependent (loaded from memory by `ct.gather(ids, i)`)" in done["embed_rows"].notes[1]
    assert "`ct.arange(TILE, dtype=ct.int32) * 2` is strided" in done["even_cols"].notes[0]
    src = SRC.replace("mask=cols < N)\n    ct.scatter(y, (rr, cols)", "mask=cols < N - 1)\n    ct.scatter(y, (rr, cols)")
    ok, why = T.applicable(src, "scale_rows")
    assert ok and "mask term `cols < N - 1`: cannot prove" in T.apply(src, "scale_rows").notes[1]
    # an unprovable extent: the wrapper passes a literal
    src = SRC.replace("(x, y, s, n, _np2(n))", "(x, y, s, 1000, 1024)")
    ok, why = T.applicable(src, "scale_rows")
    line = SRC.splitlines().index("    v = ct.gather(x, (rr, cols), mask=cols < N)") + 1
    assert not ok and f"ct.gather at line {line} has a mask that is not a bounds mask" in why
    assert "cannot prove `N` is x.shape[1]" in why
    # a reassigned index name: its value at the call is not provable
    src = SRC.replace("    row = ct.bid(0)\n    cols = ct.arange(TILE, dtype=ct.int32) * 2",
                      "    row = ct.bid(0)\n    row = row + 1\n    cols = ct.arange(TILE, dtype=ct.int32)")
    ok, why = T.applicable(src, "even_cols")
    assert not ok and "`row` is reassigned" in why


def test_affine_form_api():
    k = load(SRC, "rms_norm_rows")
    calls = k.calls("gather", "scatter")
    forms = [affine_gather_form(k, c) for c in calls]
    assert isinstance(forms[0], AffineGather)
    assert forms[0].load_shape == ["1", "TILE"] and forms[0].result_shape == ["TILE"]
    assert isinstance(forms[1], str) and "scalar" in forms[1]
    done_src = T.apply(SRC, "rms_norm_rows").new_source
    ok, why = T.applicable(done_src, "rms_norm_rows")
    assert not ok and "every index component is a scalar" in why


def _run(emu_dir, src, fn, *args):
    mod = emulated(emu_dir, src, "rows")
    return getattr(mod, fn)(*args, stream=object())


@pytest.mark.parametrize("kernel", ["rms_norm_rows", "bias_rows", "scale_rows", "embed_rows"])
def test_same_result_on_ragged_shapes(emu_dir, done, kernel):
    import torch
    torch.manual_seed(0)
    x = torch.randn(7, 300)           # 300 columns: ragged against tiles of 128 / 512
    W = torch.randn(6, 256)
    outs = []
    for src in (SRC, done[kernel].new_source):
        if kernel == "rms_norm_rows":
            o, r = _run(emu_dir, src, "rms_norm", x, torch.randn(300, generator=torch.Generator().manual_seed(1)),
                        1e-6, 128)
            outs.append((o.numpy().copy(), r.numpy().copy()))
        elif kernel == "bias_rows":
            outs.append(_run(emu_dir, src, "bias_add", x, torch.arange(300.0), 3).numpy().copy())
        elif kernel == "scale_rows":
            outs.append(_run(emu_dir, src, "scale", x, torch.arange(7.0)).numpy().copy())
        else:
            mod = emulated(emu_dir, src, "rows")
            ids = torch.tensor([3, 0, 5, 5], dtype=torch.int32)
            out = torch.zeros(4, 256)
            mod.ct.launch(object(), (4,), mod.embed_rows, (ids, W, out, 256, 256))
            outs.append(out.numpy().copy())
            np.testing.assert_array_equal(out.numpy(), W[ids.long()].numpy())
    if kernel == "rms_norm_rows":
        np.testing.assert_array_equal(outs[1][0], outs[0][0])
        np.testing.assert_array_equal(outs[1][1], outs[0][1])
        ref = x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6)
        np.testing.assert_allclose(outs[0][0] / torch.randn(300, generator=torch.Generator().manual_seed(1)).numpy(),
                                   ref.numpy(), rtol=1e-3, atol=1e-3)
    else:
        np.testing.assert_array_equal(outs[1], outs[0])
    if kernel == "bias_rows":
        np.testing.assert_array_equal(outs[0], (x + torch.arange(300.0)).numpy())


def test_1d_weight_broadcast_as_a_row_becomes_a_reshaped_tile_load(compiler, emu_dir):
    """`W[cols[None, :]]` (a 1-D weight used as a 1 x T row): a 1-D tile load reshaped in the
    kernel, so the wrapper's array views stay as they are."""
    src = SRC.replace("    bt = ct.gather(b, cols, mask=cols < N, padding_value=0.0)\n",
                      "    bt = ct.gather(b, cols[None, :], check_bounds=True)\n").replace(
        "xt + bt[None, :]", "xt + bt")
    new = T.apply(src, "bias_rows").new_source
    assert "bt = ct.reshape(ct.load(b, index=(0,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO, " \
           "check_bounds=True), (1, TILE))" in new
    assert op_counts(compiler.tileir(new, "bias_rows"))["load_ptr_tko"] == 0
    import torch
    x = torch.randn(7, 300)
    outs = [_run(emu_dir, s, "bias_add", x, torch.arange(300.0), 2).numpy() for s in (src, new)]
    np.testing.assert_array_equal(outs[1], outs[0])
