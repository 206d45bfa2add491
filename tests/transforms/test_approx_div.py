"""approx_div: rounding_mode=APPROX on float32 division (playbook H)."""
from __future__ import annotations

from cutile_diag.transforms import ApproxDiv, FlushToZero

from .tf_support import example_source, ir_delta

T = ApproxDiv()


def test_softmax_division_is_approximate(compiler):
    src = example_source("softmax")
    res = T.apply(src, "softmax")
    removed, added = ir_delta(compiler.tileir(src, "softmax"), compiler.tileir(res.new_source, "softmax"))
    assert len(removed) == len(added) == 1
    assert added[0] == removed[0].replace(" :", " rounding<approx> :", 1)
    assert "rounding_mode=ct.RoundingMode.APPROX" in res.new_source


def test_after_flush_to_zero_both_suffixes(compiler):
    ftz = FlushToZero().apply(example_source("softmax"), "softmax").new_source
    res = T.apply(ftz, "softmax")
    _, added = ir_delta(compiler.tileir(ftz, "softmax"), compiler.tileir(res.new_source, "softmax"))
    assert len(added) == 1 and "divf" in added[0] and "rounding<approx> flush_to_zero" in added[0]
    # and the other order gives the same kernel text
    other = FlushToZero().apply(T.apply(example_source("softmax"), "softmax").new_source, "softmax")
    assert compiler.tileir(other.new_source, "softmax").count("rounding<approx> flush_to_zero") == 1


def test_refusals():
    done = T.apply(example_source("softmax"), "softmax").new_source
    ok, why = T.applicable(done, "softmax")
    assert not ok and why.startswith("already applied")
    ok, why = T.applicable(example_source("matmul"), "matmul")
    assert not ok and "no float division" in why
    # a division of loaded values of unknown dtype is not touched
    src = example_source("vector_add").replace("tile=ta + tb", "tile=ta / tb")
    ok, why = T.applicable(src, "vector_add")
    assert not ok and why.startswith("no division is provably float32") and "/ (line 16)" in why
