"""tf32_guard: dtype-conditional TF32 cast of ct.mma operands (playbook D)."""
from __future__ import annotations

import numpy as np
import pytest

from cutile_diag.transforms import Tf32Guard

from .tf_support import canonical, emulated, example_source, ir_delta, op_lines

T = Tf32Guard()


@pytest.fixture(scope="module")
def guarded():
    return T.apply(example_source("matmul"), "matmul_f32")


def test_f32_inputs_reach_tensor_core_types(compiler, guarded):
    base = compiler.tileir(example_source("matmul"), "matmul_f32")
    new = compiler.tileir(guarded.new_source, "matmul_f32")
    assert op_lines(base, "mmaf")[0].endswith("tile<64x32xf32>, tile<32x64xf32>, tile<64x64xf32>")
    assert op_lines(new, "mmaf")[0].endswith("tile<64x32xtf32>, tile<32x64xtf32>, tile<64x64xf32>")
    casts = op_lines(new, "ftof")
    assert any(c.endswith("tile<64x32xf32> -> tile<64x32xtf32>") for c in casts)
    assert any(c.endswith("tile<32x64xf32> -> tile<32x64xtf32>") for c in casts)
    removed, added = ir_delta(base, new)
    # two casts in, mma retyped; everything after only renumbers
    assert sum("ftof" in a for a in added) - sum("ftof" in r for r in removed) == 2


def test_f16_kernel_is_unchanged(compiler, guarded):
    # the same rewritten source compiled for f16 inputs: the guard picks f16, a no-op
    base = compiler.tileir(example_source("matmul"), "matmul")
    new = compiler.tileir(guarded.new_source, "matmul")
    assert canonical(base) == canonical(new)


def test_source_shape(guarded):
    src = guarded.new_source
    assert "    mma_dtype = ct.tfloat32 if A.dtype == ct.float32 else A.dtype\n    bm = ct.bid(0)" in src
    assert "acc = ct.mma(a.astype(mma_dtype), b.astype(mma_dtype), acc)" in src
    assert guarded.changed_lines == (14, 21)


def test_numerics_on_the_emulator(guarded, emu_dir):
    import torch
    a = torch.randn(256, 128, dtype=torch.float32)
    b = torch.randn(128, 384, dtype=torch.float32)
    outs = []
    for s in (example_source("matmul"), guarded.new_source):
        c = torch.zeros(256, 384, dtype=torch.float32)
        emulated(emu_dir, s, "matmul").launch(a, b, c, stream=object())
        outs.append(c.numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6)
    np.testing.assert_allclose(outs[0], (a @ b).numpy(), rtol=1e-4, atol=1e-4)


def test_refusals(guarded):
    ok, why = T.applicable(guarded.new_source, "matmul_f32")
    assert not ok and why.startswith("already applied")
    ok, why = T.applicable(example_source("matmul"), "matmul_tuned")
    assert not ok and why.startswith("already applied")
    ok, why = T.applicable(example_source("vector_add"), "vector_add")
    assert not ok and "no ct.mma" in why
    f16 = example_source("matmul").replace("acc = ct.mma(a, b, acc)",
                                           "acc = ct.mma(a.astype(ct.float16), b.astype(ct.float16), acc)")
    ok, why = T.applicable(f16, "matmul")
    assert not ok and "already cast" in why
    untraceable = example_source("matmul").replace("a = ct.load(A, index=(bm, k), shape=(TM, TK))",
                                                   "a = ct.load(A, index=(bm, k), shape=(TM, TK))\n"
                                                   "        a = a * 2")
    ok, why = T.applicable(untraceable, "matmul")
    assert ok   # b still traces to B
