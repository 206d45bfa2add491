"""tile_size_sweep: tile constants changed where the host sets them (playbook G)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from cutile_diag.transforms import TileSizeSweep, TransformParamError

from .tf_support import emulated, entry_symbol, example_source, op_lines

T = TileSizeSweep()


def test_vector_add_tile_2048(compiler, emu_dir, one_sm):
    import torch
    src = example_source("vector_add")
    res = T.apply(src, "vector_add", TILE=2048)
    new = compiler.tileir(res.new_source, "vector_add")
    assert entry_symbol(new).endswith("_I2048")
    assert all("partition_view<tile=(2048)" in ln for ln in op_lines(new, "load_view_tko"))
    assert "CAPTURE_SPECS['vector_add']" in res.description and "default of parameter `tile`" in res.description
    assert any("vector_add_persistent" in n for n in res.notes)   # the shared default, said out loud
    # the wrapper really launches with the new tile: half as many blocks
    mod = emulated(emu_dir, res.new_source, "vector_add")
    assert inspect.signature(mod.launch).parameters["tile"].default == 2048
    a, b = torch.randn(8192), torch.randn(8192)
    c = torch.zeros(8192)
    mod.launch(a, b, c, stream=object())
    assert mod.ct.launches == [("vector_add", (4, 1, 1))]
    np.testing.assert_array_equal(c.numpy(), (a + b).numpy())


def test_matmul_tm(compiler):
    src = example_source("matmul")
    res = T.apply(src, "matmul", TM=64)
    new = compiler.tileir(res.new_source, "matmul")
    assert entry_symbol(new).endswith("_I64_I128_I64")
    loads = op_lines(new, "load_view_tko")
    assert "tile=(64x64)" in loads[0] and "-> tile<64x64xf16>" in loads[0]
    assert "tile=(64x128)" in loads[1]
    assert "def launch(A, B, C, tm=64, tn=128, tk=64," in res.new_source


def test_literal_arguments_and_module_constants():
    src = '''import cuda.tile as ct

BLOCK = 256


@ct.kernel
def k(x, y, T: ct.Constant[int], U: ct.Constant[int]):
    ct.store(y, index=(ct.bid(0),), tile=ct.load(x, index=(ct.bid(0),), shape=(T,)) + ct.arange(U, dtype=ct.float32))


def launch(x, y):
    ct.launch(None, (ct.cdiv(x.shape[0], BLOCK),), k, (x, y, BLOCK, 128))


def launch_bad(x, y):
    ct.launch(None, (ct.cdiv(x.shape[0], 512),), k, (x, y, 512, 128))
'''
    ok, why = T.applicable(src, "k", U=64)
    assert ok
    res = T.apply(src.split("\n\ndef launch_bad")[0] + "\n", "k", T=512, U=64)
    assert "BLOCK = 512" in res.new_source and "(x, y, BLOCK, 64))" in res.new_source
    # the same literal in the grid and in the arguments: ambiguous
    ok, why = T.applicable(src, "k", T=1024)
    assert not ok and "its grid also contains 512" in why


def test_refusals_and_validation():
    ok, why = T.applicable(example_source("softmax"), "softmax", TILE_N=2048)
    assert not ok and "computed at the launch site" in why
    ok, why = T.applicable(example_source("softmax"), "softmax")
    assert not ok and "computed at the launch site" in why
    done = T.apply(example_source("vector_add"), "vector_add", TILE=2048).new_source
    assert T.applicable(done, "vector_add", TILE=2048) == (False, "already applied: TILE=2048")
    with pytest.raises(TransformParamError):
        T.apply(example_source("vector_add"), "vector_add", TILE=1000)      # not a power of two
    with pytest.raises(TransformParamError):
        T.apply(example_source("vector_add"), "vector_add", a=1024)         # not a constant
    with pytest.raises(TransformParamError):
        T.apply(example_source("vector_add"), "vector_add")
    tuned = example_source("gather_scale").replace(
        "ct.launch(stream, (ct.cdiv(x.shape[0], tile),), gather_scale, (x, y, tile))",
        "ct.tune.exhaustive_search([1024, 2048], stream, lambda t: (ct.cdiv(x.shape[0], t),), gather_scale,\n"
        "                           lambda t: (x, y, t))")
    ok, why = T.applicable(tuned, "gather_scale", TILE=2048)
    assert not ok and "through ct.tune.exhaustive_search" in why
    no_launch = example_source("gather_scale").split("\n\ndef launch")[0] + "\n"
    ok, why = T.applicable(no_launch, "gather_scale", TILE=2048)
    assert not ok and "no ct.launch" in why


def test_candidates():
    assert T.candidates(example_source("vector_add"), "vector_add") == [{"TILE": 2048}, {"TILE": 512}]
    assert T.candidates(example_source("matmul"), "matmul") == [
        {"TM": 256}, {"TM": 64}, {"TN": 256}, {"TN": 64}, {"TK": 128}, {"TK": 32}]
    assert T.candidates(example_source("softmax"), "softmax") == []
    ok, why = T.applicable(example_source("vector_add"), "vector_add")
    assert ok and why == "2 candidate(s): TILE=2048, TILE=512"
