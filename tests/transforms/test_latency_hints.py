"""latency_hints: latency=N on loads/stores/gathers/scatters (playbook E)."""
from __future__ import annotations

import pytest

from cutile_diag.errors import CutileDiagError
from cutile_diag.transforms import LatencyHints, TransformNotApplicable, TransformParamError

from .tf_support import example_source, ir_delta, op_hints, op_lines, strip_op_hints

T = LatencyHints()


@pytest.fixture(scope="module")
def vector_add(compiler):
    src = example_source("vector_add")
    res = T.apply(src, "vector_add")
    return src, res, compiler.tileir(src, "vector_add"), compiler.tileir(res.new_source, "vector_add")


@pytest.fixture(scope="module")
def matmul(compiler):
    src = example_source("matmul")
    res = T.apply(src, "matmul")
    return src, res, compiler.tileir(src, "matmul"), compiler.tileir(res.new_source, "matmul")


def _only_hints_added(base: str, new: str) -> list[str]:
    """The changed op lines, asserting each differs from its old self only by a hint dict."""
    removed, added = ir_delta(base, new)
    assert len(removed) == len(added)
    for old, line in zip(removed, added):
        assert op_hints(old) is None and op_hints(line) is not None
        assert strip_op_hints(line) == old
    return added


def test_vector_add_loads_10_store_3(vector_add):
    _, res, base, new = vector_add
    added = _only_hints_added(base, new)
    assert len(added) == 3
    assert [op_hints(ln) for ln in op_lines(new, "load_view_tko")] == ["latency = 10"] * 2
    assert [op_hints(ln) for ln in op_lines(new, "store_view_tko")] == ["latency = 3"]
    assert res.changed_lines == (14, 15, 16)
    assert "latency=10 on 2 main-loop loads" in res.description


def test_matmul_main_loop_loads_and_store(matmul):
    _, res, base, new = matmul
    assert len(_only_hints_added(base, new)) == 3
    loads = op_lines(new, "load_view_tko")
    assert len(loads) == 2 and all(op_hints(ln) == "latency = 10" for ln in loads)
    assert op_hints(op_lines(new, "store_view_tko")[0]) == "latency = 3"


def test_tuned_matmul_only_store_changes(compiler):
    # its loads already carry latency=10: only the store is hinted
    src = example_source("matmul_tuned")
    res = T.apply(src, "matmul_tuned")
    base, new = compiler.tileir(src, "matmul_tuned"), compiler.tileir(res.new_source, "matmul_tuned")
    added = _only_hints_added(base, new)
    assert len(added) == 1 and "store_view_tko" in added[0] and "latency = 3" in added[0]
    assert "left 2 call(s)" in res.notes[0]


def test_gather_scatter_get_latency_1(compiler):
    src = example_source("gather_scale")
    res = T.apply(src, "gather_scale")
    new = compiler.tileir(res.new_source, "gather_scale")
    added = _only_hints_added(compiler.tileir(src, "gather_scale"), new)
    assert len(added) == 2
    assert op_hints(op_lines(new, "load_ptr_tko")[0]) == "latency = 1"
    assert op_hints(op_lines(new, "store_ptr_tko")[0]) == "latency = 1"


def test_sweep_value_on_main_loads_only(compiler):
    src = example_source("vector_add")
    res = T.apply(src, "vector_add", roles=["main_load"], latency=6)
    new = compiler.tileir(res.new_source, "vector_add")
    assert [op_hints(ln) for ln in op_lines(new, "load_view_tko")] == ["latency = 6"] * 2
    assert op_hints(op_lines(new, "store_view_tko")[0]) is None


def test_prologue_loads_get_the_side_default():
    src = '''import cuda.tile as ct


@ct.kernel
def k(A, B, S, C, T: ct.Constant[int]):
    bid = ct.bid(0)
    s = ct.load(S, index=(bid,), shape=(T,))   # one-off scale: not the main loop
    acc = ct.full((T,), 0, dtype=ct.float32)
    for i in range(4):
        acc = acc + ct.load(A, index=(bid,), shape=(T,))
    ct.store(C, index=(bid,), tile=acc * s)
'''
    res = T.apply(src, "k")
    lines = res.new_source.splitlines()
    assert "latency=3)   # one-off scale" in lines[6]
    assert lines[9].endswith("ct.load(A, index=(bid,), shape=(T,), latency=10)")
    assert lines[10].endswith("tile=acc * s, latency=3)")


def test_idempotent_and_overwrite(vector_add):
    _, res, _, _ = vector_add
    ok, why = T.applicable(res.new_source, "vector_add")
    assert not ok and why.startswith("already applied")
    with pytest.raises(TransformNotApplicable):
        T.apply(res.new_source, "vector_add")
    # overwrite changes only the values that differ
    res2 = T.apply(res.new_source, "vector_add", roles=["main_load"], latency=2, overwrite=True)
    assert res2.new_source.count("latency=2") == 2 and res2.new_source.count("latency=3") == 1
    ok, _ = T.applicable(res2.new_source, "vector_add", roles=["main_load"], latency=2, overwrite=True)
    assert not ok


def test_refusals_and_bad_params():
    assert T.applicable(example_source("vector_add"), "no_such_kernel") == \
        (False, "no kernel named 'no_such_kernel' in this file")
    src = "import cuda.tile as ct\n\n@ct.kernel\ndef k(x):\n    pass\n"
    ok, why = T.applicable(src, "k")
    assert not ok and "has no ct.load" in why
    with pytest.raises(TransformParamError):
        T.apply(example_source("vector_add"), "vector_add", latency=11)
    with pytest.raises(TransformParamError):
        T.apply(example_source("vector_add"), "vector_add", roles=["loads"])
    with pytest.raises(TransformParamError):
        T.apply(example_source("vector_add"), "vector_add", lat=3)
    assert issubclass(TransformParamError, CutileDiagError)


def test_candidates_cover_the_playbook_sweep():
    cands = T.candidates(example_source("matmul"), "matmul")
    assert cands[0] == {}
    assert [c["latency"] for c in cands if c.get("roles") == ["main_load"]] == [1, 2, 3, 6, 10]
