"""Shared machinery: layout-preserving edits, cuTile name resolution, kernel lookup, errors."""
from __future__ import annotations

import libcst as cst
import pytest

from cutile_diag.errors import CutileDiagError
from cutile_diag.transforms import ApproxDiv, LatencyHints, TransformError
from cutile_diag.source.model import changed_lines, code, expr, load, set_kwargs


@pytest.mark.parametrize("before, after", [
    ("f(a, b)", "f(a, b, lat=10)"),
    ("f(a, b,)", "f(a, b, lat=10,)"),
    ("f(\n    a,\n    b,\n)", "f(\n    a,\n    b,\n    lat=10,\n)"),
    ("f(\n    a,\n)", "f(\n    a,\n    lat=10,\n)"),
    ("f(a,\n  b)", "f(a,\n  b, lat=10)"),
    ("f()", "f(lat=10)"),
    ("f(a, x = 1)", "f(a, x = 1, lat = 10)"),
    ("f(a, lat=3)", "f(a, lat=10)"),
])
def test_set_kwargs_keeps_layout(before, after):
    call = cst.parse_expression(before)
    assert code(set_kwargs(call, [("lat", expr("10"))])) == after


MESSY = '''import cuda.tile as ct   # the DSL


@ct.kernel
def k(a, b,   # inputs
      c, T: ct.Constant[int]):
    """Docstring stays."""
    i = ct.bid(0)  # block
    x = ct.load(
        a,  # source
        index=(i,),
        shape=(T,),
    )
    y = ct.load(b, index=(i,), shape=(T,))
    ct.store(c, index=(i,),   tile=x+y)   # out
'''


def test_untouched_code_is_byte_identical():
    res = LatencyHints().apply(MESSY, "k")
    new = res.new_source.splitlines()
    old = MESSY.splitlines()
    assert new[:12] == old[:12]
    assert new[12] == "        latency=10,"
    assert new[13:] == [old[12], "    y = ct.load(b, index=(i,), shape=(T,), latency=10)",
                        "    ct.store(c, index=(i,),   tile=x+y, latency=3)   # out"]
    assert res.changed_lines == (13, 15, 16)


def test_cutile_spelled_other_ways():
    dotted = MESSY.replace("import cuda.tile as ct   # the DSL", "import cuda.tile").replace("ct.", "cuda.tile.")
    res = LatencyHints().apply(dotted, "k")
    assert res.new_source.count("latency=") == 3
    f32 = ('from cuda import tile as T2\n\n\n@T2.kernel\ndef k(a, b, N: T2.Constant[int]):\n'
           '    x = T2.load(a, index=(T2.bid(0),), shape=(N,)).astype(T2.float32)\n'
           '    T2.store(b, index=(T2.bid(0),), tile=x / 3.0)\n')
    res = ApproxDiv().apply(f32, "k")
    assert "tile=T2.truediv(x, 3.0, rounding_mode=T2.RoundingMode.APPROX))" in res.new_source
    members = ('from cuda.tile import kernel, load, store, Constant, float32\n\n\n@kernel\n'
               'def k(a, b, N: Constant[int]):\n    x = load(a, index=(0,), shape=(N,)).astype(float32)\n'
               '    store(b, index=(0,), tile=x / 3.0)\n')
    assert LatencyHints().apply(members, "k").new_source.count("latency=") == 2
    ok, why = ApproxDiv().applicable(members, "k")
    assert not ok and "import cuda.tile as" in why


def test_kernel_lookup():
    from cutile_diag.examples import EXAMPLES_DIR
    src = (EXAMPLES_DIR / "matmul.py").read_text()
    k = load(src, "matmul_f32")
    assert k.func.name.value == "matmul" and k.aliases == ("matmul", "matmul_f32")
    ok, why = LatencyHints().applicable(src + "\nmatmul_x = matmul.replace_hints(occupancy=2)\n", "matmul_x")
    assert not ok and "built by an expression" in why
    ok, why = LatencyHints().applicable("import cuda.tile as ct\n\ndef k(a):\n    pass\n", "k")
    assert not ok and "not decorated with @ct.kernel" in why
    ok, why = LatencyHints().applicable("import numpy\n", "k")
    assert not ok and "does not import cuda.tile" in why


def test_syntax_error_is_a_clear_error():
    with pytest.raises(TransformError) as e:
        LatencyHints().applicable("import cuda.tile as ct\ndef k(:\n", "k")
    assert isinstance(e.value, CutileDiagError) and "line 2" in e.value.one_line()


def test_changed_lines():
    assert changed_lines("a\nb\nc\n", "a\nB\nc\nd\n") == (2, 4)
    assert changed_lines("a\n", "a\n") == ()


ALIASED = '''import cuda.tile as ct
from typing import TypeAlias

ConstInt = ct.Constant[int]
ConstBool: TypeAlias = ct.Constant[bool]
Const = ct.Constant
Tile = ConstInt


@ct.kernel
def k(a, b, T: ConstInt, FLAG: ConstBool, W: Const[int], U: Tile, n: int):
    x = ct.load(a, index=(ct.bid(0),), shape=(T,))
    ct.store(b, index=(ct.bid(0),), tile=x)


def launch(a, b, stream):
    ct.launch(stream, (8,), k, (a, b, 1024, True, 4, 2, 5))
'''


def test_constants_through_module_level_aliases():
    # TileGym spells tile sizes `ConstInt = ct.Constant[int]`; every alias form resolves
    k = load(ALIASED, "k")
    assert k.constant_params() == {"T": "int", "FLAG": "bool", "W": "int", "U": "int"}
    from cutile_diag.transforms import TileSizeSweep
    from cutile_diag.transforms.tile_size_sweep import tile_params
    assert tile_params(k) == ["T"]
    res = TileSizeSweep().apply(ALIASED, "k", T=2048)
    assert "(a, b, 2048, True, 4, 2, 5)" in res.new_source
