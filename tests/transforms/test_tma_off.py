"""TMA off in row kernels: A and P with ``tma="off"``, F with ``loads=True``.

On sm_90 a TMA load or store in a kernel without mma makes tileiras warp-specialise it
(256 threads, ``setmaxnreg``, 255 registers at launch): one resident block per SM, which
starves a one-row-per-block kernel (H200: A made row_norm 3.9-7.4x slower).  The same view
ops with ``allow_tma=False`` compile to 128 threads and tens of registers.  Every form is
compiled AOT (tileiras + ptxas, sm_90) and its resident blocks per SM read from the cubin
by the diagnosis's own estimate."""
from __future__ import annotations

import pytest

from cutile_diag.diagnose.collect_capture import resident_ctas
from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag.transforms import GatherToLoad, StoreAllowTmaFalse, TmaZeroPadding
from cutile_diag.source.model import TransformParamError
from cutile_diag.toolchain import have_tool

from .tf_support import emulated, op_lines

A, P, F = GatherToLoad(), TmaZeroPadding(), StoreAllowTmaFalse()
ROW_NORM = (EXAMPLES_DIR / "row_norm.py").read_text()
ROW_LSE = (EXAMPLES_DIR / "row_lse.py").read_text()
SOFTMAX = (EXAMPLES_DIR / "softmax.py").read_text()
ROW_NORM_SPECS = {"X": "f16[16384,1000]", "Y": "f16[16384,1000]", "Mean": "f32[16384]", "Rstd": "f32[16384]",
                  "N": "i32", "EPS": 1e-5, "TILE_N": 1024}
ROW_LSE_SPECS = {"X": "f32[16384,3000]", "Out": "f32[16384]", "TILE_N": 4096}


@pytest.fixture(scope="module")
def cubin(compiler):
    if not all(have_tool(t) for t in ("tileiras", "ptxas", "cuobjdump")):
        pytest.skip("tileiras / ptxas not installed")

    def go(source: str, kernel: str, specs: dict | None = None) -> tuple[int, str, str]:
        folder = compiler.aot_folder(source, kernel, specs)
        n, why = resident_ctas(folder)
        return n, why, (folder / "kernel.tileir").read_text()
    return go


def _view_lines(text: str) -> list[str]:
    return op_lines(text, "load_view_tko") + op_lines(text, "store_view_tko")


def test_a_offers_tma_and_tma_off_and_tma_off_keeps_the_row_kernels_occupancy(cubin):
    assert A.candidates(ROW_NORM, "row_norm") == [{}, {"tma": "off"}]
    auto, off = A.apply(ROW_NORM, "row_norm"), A.apply(ROW_NORM, "row_norm", tma="off")
    assert auto.params == {} and off.params == {"tma": "off"}
    assert "allow_tma" not in auto.new_source
    assert off.new_source.count("allow_tma=False") == 3          # two X loads, the Y store
    assert off.description.startswith(auto.description) and "allow_tma=False" in off.description
    n_base, _, _ = cubin(ROW_NORM, "row_norm", ROW_NORM_SPECS)
    n_auto, why_auto, ir_auto = cubin(auto.new_source, "row_norm", ROW_NORM_SPECS)
    n_off, why_off, ir_off = cubin(off.new_source, "row_norm", ROW_NORM_SPECS)
    assert n_auto == 1 and why_auto.startswith("256 threads, 255 regs")
    assert n_off >= 8 and why_off.startswith("128 threads") and n_off >= n_base // 2
    assert all("allow_tma = false" in ln for ln in _view_lines(ir_off)) and len(_view_lines(ir_off)) == 3
    assert not any("allow_tma" in ln for ln in _view_lines(ir_auto))


def test_p_tma_off_keeps_the_load_off_tma_and_computes_the_same(cubin, emu_dir):
    assert P.candidates(ROW_LSE, "row_lse") == [{}, {"tma": "off"}]
    off = P.apply(ROW_LSE, "row_lse", tma="off")
    assert "padding_mode=ct.PaddingMode.ZERO, allow_tma=False)" in off.new_source
    n_auto, _, _ = cubin(P.apply(ROW_LSE, "row_lse").new_source, "row_lse", ROW_LSE_SPECS)
    n_off, why, ir = cubin(off.new_source, "row_lse", ROW_LSE_SPECS)
    assert n_auto == 1 and n_off > 1 and why.startswith("128 threads")
    assert [("padding_value = zero" in ln, "allow_tma = false" in ln) for ln in op_lines(ir, "load_view_tko")] \
        == [(True, True)]
    import numpy as np
    import torch
    torch.manual_seed(0)
    x = torch.randn(4, 300) * 3
    outs = []
    for src in (ROW_LSE, off.new_source):
        out = torch.empty(4)
        emulated(emu_dir, src, "row_lse").launch(x, out, stream=object())
        outs.append(out.numpy().copy())
    np.testing.assert_array_equal(outs[1], outs[0])


def test_f_with_loads_takes_the_whole_kernel_off_tma(cubin):
    assert F.candidates(SOFTMAX, "softmax") == [{}, {"loads": True}]
    res = F.apply(SOFTMAX, "softmax", loads=True)
    assert res.description.startswith("allow_tma=False on 1 store (line 18) and 1 load (line 13)")
    n_base, why_base, _ = cubin(SOFTMAX, "softmax")
    n, why, ir = cubin(res.new_source, "softmax")
    assert n_base == 1 and why_base.startswith("256 threads, 255 regs")     # its one TMA store does it
    assert n >= 8 and why.startswith("128 threads")
    assert all("allow_tma = false" in ln for ln in _view_lines(ir)) and len(_view_lines(ir)) == 2
    # stores already off: only the loads are left, one candidate
    stores_off = F.apply(SOFTMAX, "softmax").new_source
    assert F.candidates(stores_off, "softmax") == [{"loads": True}]
    assert F.candidates(res.new_source, "softmax") == []
    assert "already applied: every ct.store / ct.load has allow_tma=False" in F.applicable(
        res.new_source, "softmax", loads=True)[1]


def test_tma_parameter_values_are_checked():
    with pytest.raises(TransformParamError, match="tma must be 'auto' or 'off'"):
        A.apply(ROW_NORM, "row_norm", tma="never")
    with pytest.raises(TransformParamError, match="tma must be 'auto' or 'off'"):
        P.apply(ROW_LSE, "row_lse", tma=False)


def test_stores_off_but_a_tma_load_left_is_still_fs_root_cause(compiler, cubin):
    """TileGym's `_softmax_kernel_tma` shape after the loop kept F's store form: the ZERO-padded
    (TMA) load alone still warp-specialises the kernel, so F is not 'already applied' and its
    root cause ranks first; its one candidate takes the load off TMA."""
    from cutile_diag.diagnose.engine import diagnose_capture
    src = F.apply(P.apply(SOFTMAX, "softmax").new_source, "softmax").new_source
    n, why, _ = cubin(src, "softmax")
    assert n == 1 and why.startswith("256 threads, 255 regs")
    d = diagnose_capture(compiler.aot_folder(src, "softmax"))
    assert d.first.id == "F" and "warp-specialises this kernel without mma" in d.first.reason
    assert "F" not in {a["id"] for a in d.already_applied}
    assert F.candidates(src, "softmax") == [{"loads": True}]
    off = F.apply(src, "softmax", loads=True).new_source
    d2 = diagnose_capture(compiler.aot_folder(off, "softmax"))
    assert "F" not in [r.id for r in d2.recommendations] and "F" in {a["id"] for a in d2.already_applied}
