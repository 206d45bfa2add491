"""flush_to_zero: FTZ on float32 ops that take it, `/` -> ct.truediv (playbook H)."""
from __future__ import annotations

import pytest

from cutile_diag.transforms import FlushToZero

from .tf_support import example_source, ir_delta

T = FlushToZero()


@pytest.fixture(scope="module")
def softmax(compiler):
    src = example_source("softmax")
    res = T.apply(src, "softmax")
    return src, res, compiler.tileir(src, "softmax"), compiler.tileir(res.new_source, "softmax")


def test_softmax_max_sum_div_flushed(softmax):
    _, res, base, new = softmax
    removed, added = ir_delta(base, new)
    assert [a.split(" = ")[1].split()[0] for a in added] == ["maxf", "addf", "divf"]
    for old, line in zip(removed, added):
        assert line.replace(" flush_to_zero", "") == old
        assert " flush_to_zero " in line
    assert "ct.truediv(e, ct.sum(e, axis=1, keepdims=True, flush_to_zero=True), flush_to_zero=True)" \
        in res.new_source
    assert res.description.startswith("flush_to_zero=True on ct.max (line 15); ct.sum (line 17)")


def test_idempotent(softmax):
    _, res, _, _ = softmax
    ok, why = T.applicable(res.new_source, "softmax")
    assert not ok and why.startswith("already applied")


MIXED = '''import cuda.tile as ct


@ct.kernel
def mixed(X, Y, Z, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    x = ct.load(X, index=(bid,), shape=(TILE,))          # dtype unknown: f16 in the spec
    h = ct.exp2(x)                                        # must stay: FTZ on f16 does not compile
    f = x.astype(ct.float32)
    g = ct.rsqrt(f * 2.0 + 1.0)                           # float32: flushed
    acc = ct.full((TILE,), 0, dtype=ct.float32)
    for i in range(2):
        acc = acc + g / 3.0                               # float32 through the loop
    ct.store(Y, index=(bid,), tile=h)
    ct.store(Z, index=(bid,), tile=acc / ct.sqrt(acc))
'''


def test_only_provable_float32_is_touched(compiler):
    res = T.apply(MIXED, "mixed")
    new = res.new_source
    assert "h = ct.exp2(x)" in new
    assert "g = ct.rsqrt(f * 2.0 + 1.0, flush_to_zero=True)" in new
    assert "acc = acc + ct.truediv(g, 3.0, flush_to_zero=True)" in new
    assert "tile=ct.truediv(acc, ct.sqrt(acc, flush_to_zero=True), flush_to_zero=True))" in new
    assert res.notes and "ct.exp2 (line 8)" in res.notes[0]
    specs = ('\nCAPTURE_SPECS = {"mixed": {"X": "f16[4096]", "Y": "f16[4096]", '
             '"Z": "f32[4096]", "TILE": 1024}}\n')
    ir = compiler.tileir(new + specs, "mixed")       # compiles: nothing f16 was flushed
    assert "rsqrt" in ir and ir.count("flush_to_zero") == 4
    assert [ln for ln in ir.splitlines() if " exp2 " in ln and "flush_to_zero" in ln] == []


def test_refuses_without_float32_ops():
    ok, why = T.applicable(example_source("vector_add"), "vector_add")
    assert not ok and "no op that takes flush_to_zero" in why
    src = MIXED.replace("    g = ct.rsqrt(f * 2.0 + 1.0)", "    g = f").replace("g / 3.0", "g").replace(
        "acc / ct.sqrt(acc)", "acc")
    src = src.replace("h = ct.exp2(x)", "h = ct.exp2(x)")
    ok, why = T.applicable(src, "mixed")
    assert not ok and why.startswith("no op is provably float32") and "ct.exp2 (line 8)" in why
