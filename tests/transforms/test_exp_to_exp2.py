"""exp_to_exp2: ct.exp(x) -> ct.exp2(x * LOG2E) (playbook H)."""
from __future__ import annotations

import numpy as np
import pytest

from cutile_diag.transforms import ExpToExp2, FlushToZero

from .tf_support import emulated, example_source, op_counts

T = ExpToExp2()


@pytest.fixture(scope="module")
def softmax(compiler):
    src = example_source("softmax")
    res = T.apply(src, "softmax")
    return src, res, compiler.tileir(src, "softmax"), compiler.tileir(res.new_source, "softmax")


def test_exp_becomes_mul_and_exp2(softmax):
    src, res, base, new = softmax
    b, n = op_counts(base), op_counts(new)
    assert (b["exp"], b["exp2"]) == (1, 0)
    assert (n["exp"], n["exp2"]) == (0, 1)
    assert n["mulf"] == b["mulf"] + 1
    assert "constant <f32: 1.44269502>" in new
    assert "LOG2E = 1.4426950408889634" in res.new_source
    assert "e = ct.exp2((x - x_max) * LOG2E)" in res.new_source
    # the constant sits after the imports, the rest of the file is untouched
    assert res.new_source.splitlines()[7:10] == ["", "LOG2E = 1.4426950408889634  # log2(e): exp(x) == "
                                                 "exp2(x * LOG2E)", ""]


def test_same_numbers_on_the_emulator(softmax, emu_dir):
    import torch
    src, res, _, _ = softmax
    x = torch.randn(37, 1000, dtype=torch.float16) * 4
    out = []
    for s in (src, res.new_source):
        y = torch.zeros_like(x)
        emulated(emu_dir, s, "softmax").launch(x, y, stream=object())
        out.append(y.float().numpy())
    assert np.isfinite(out[0]).all()
    np.testing.assert_allclose(out[1], out[0], rtol=2e-3, atol=1e-4)


def test_then_flush_to_zero_reaches_exp2(softmax, compiler):
    _, res, _, _ = softmax
    ftz = FlushToZero().apply(res.new_source, "softmax")
    assert "ct.exp2 (line 18)" in ftz.description
    assert any(" exp2 " in ln and "flush_to_zero" in ln
               for ln in compiler.tileir(ftz.new_source, "softmax").splitlines())


def test_refusals_and_name_clash():
    done = T.apply(example_source("softmax"), "softmax").new_source
    ok, why = T.applicable(done, "softmax")
    assert not ok and why.startswith("already applied")
    ok, why = T.applicable(example_source("vector_add"), "vector_add")
    assert not ok and "no ct.exp" in why
    approx = example_source("softmax").replace("ct.exp(x - x_max)",
                                                "ct.exp(x - x_max, rounding_mode=ct.RoundingMode.APPROX)")
    ok, why = T.applicable(approx, "softmax")
    assert not ok and "rounding_mode" in why
    # an unrelated LOG2E in the module makes the constant take a fresh name
    clash = example_source("softmax").replace("import cuda.tile as ct\n", "import cuda.tile as ct\n\nLOG2E = 2\n")
    res = T.apply(clash, "softmax")
    assert "LOG2E_1 = 1.4426950408889634" in res.new_source and "* LOG2E_1)" in res.new_source
    # the same constant is reused
    same = example_source("softmax").replace("import cuda.tile as ct\n",
                                             "import cuda.tile as ct\n\nLOG2E = 1.4426950408889634\n")
    res = T.apply(same, "softmax")
    assert res.new_source.count("LOG2E = ") == 1 and "* LOG2E)" in res.new_source
