"""persistent_grid on row kernels whose wrappers share a file with other kernels, including
gather-style kernels (the row count comes from the gathered array's shape)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cutile_diag.transforms import PersistentGrid

from .tf_support import emulated, op_lines

B = PersistentGrid()
SRC = (Path(__file__).parent / "fixtures" / "row_kernels.py").read_text()
KERNELS = ["rms_norm_rows", "bias_rows", "softmax_rows", "layer_norm_rows"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_grid_stride_loop_in_ir_and_only_its_wrapper_changes(compiler, kernel):
    res = B.apply(SRC, kernel)
    text = compiler.tileir(res.new_source, kernel)
    assert any("step %gridSize_x" in ln or "%gridSize" in ln for ln in op_lines(text, "for")), kernel
    changed = [res.new_source.splitlines()[i - 1] for i in res.changed_lines]
    launches = [ln for ln in SRC.splitlines() if "ct.launch(" in ln and f", {kernel}, " in ln]
    assert sum("multi_processor_count" in ln for ln in changed) == len(launches) >= 1
    # the other kernels' launches are untouched
    others = [ln for ln in SRC.splitlines() if "ct.launch(" in ln and f", {kernel}, " not in ln
              and "grid, kernel" not in ln]
    assert all(ln in res.new_source.splitlines() for ln in others)


def test_extent_from_gathers():
    assert "num_tiles_1 = x.shape[0]" in B.apply(SRC, "rms_norm_rows").description
    assert "num_tiles = ct.cdiv(x.shape[0], ROWS)" in B.apply(SRC, "bias_rows").description


@pytest.mark.parametrize("kernel", KERNELS)
def test_same_result_with_a_striding_grid(emu_dir, one_sm, kernel):
    import torch
    torch.manual_seed(0)
    x = torch.randn(9, 300)
    w, b = torch.randn(300), torch.randn(300)
    outs = []
    for src in (SRC, B.apply(SRC, kernel, blocks_per_sm=2).new_source):
        mod = emulated(emu_dir, src, "rows")
        if kernel == "rms_norm_rows":
            o = mod.rms_norm(x, w, 1e-6, 128, stream=object())
            outs.append(np.concatenate([o[0].numpy().ravel(), o[1].numpy()]))
        elif kernel == "bias_rows":
            outs.append(mod.bias_add(x, b, 2, stream=object()).numpy())
        elif kernel == "softmax_rows":
            outs.append(mod.softmax(x, stream=object()).numpy())
        else:
            outs.append(mod.layer_norm(x, w, b, 1e-5, 128, stream=object()).numpy())
        grids = [g for name, g in mod.ct.launches]
    assert grids == [(2, 1, 1)]                      # 1 SM x 2 blocks, striding over 9 rows (5 for bias_rows)
    np.testing.assert_array_equal(outs[1], outs[0])


def test_wrapper_with_a_grid_per_branch_changes_only_its_branch():
    res = B.apply(SRC, "layer_norm_rows")
    lines = res.new_source.splitlines()
    i = lines.index('    elif mode == "layer":')
    branch = lines[i:i + 6]
    assert "        grid = (min(x.shape[0], num_sms * 4),)" in branch
    assert '        grid = (x.shape[0],)' in lines[i - 4:i]           # the rms branch is untouched
    # both wrappers of layer_norm_rows (layer_norm and norm) now size the grid from the SM count
    assert res.new_source.count("multi_processor_count") == SRC.count("multi_processor_count") + 2
