"""The structural differ (``cutile_diag.diff``) reports exactly each transform's intended change."""
from __future__ import annotations

from collections import Counter

from cutile_diag import diff
from cutile_diag import transforms as T

from .tf_support import example_source


def _diff(compiler, name, kernel, params=None, source=None):
    src = source or example_source(kernel)
    res = T.get(name).apply(src, kernel, **(params or {}))
    return diff.diff_texts(compiler.tileir(src, kernel), compiler.tileir(res.new_source, kernel))


def _semantic(d):
    return Counter((c.kind, c.knob, c.op) for c in d.changes)


def test_latency_hints(compiler):
    d = _diff(compiler, "latency_hints", "vector_add")
    assert _semantic(d) == {("op_hint", "latency", "load_view_tko"): 2, ("op_hint", "latency", "store_view_tko"): 1}
    assert sorted((c.op, str(c.before), str(c.after)) for c in d.changes) == [
        ("load_view_tko", "None", "10"), ("load_view_tko", "None", "10"), ("store_view_tko", "None", "3")]
    assert {s.kind for s in d.structural} == {"attribute"}


def test_store_allow_tma_false(compiler):
    d = _diff(compiler, "store_allow_tma_false", "softmax")
    assert _semantic(d) == {("op_hint", "allow_tma", "store_view_tko"): 1}
    assert {s.kind for s in d.structural} == {"attribute"}


def test_flush_to_zero(compiler):
    d = _diff(compiler, "flush_to_zero", "softmax")
    assert sorted((c.kind, c.op) for c in d.changes) == [
        ("flush_to_zero", "addf"), ("flush_to_zero", "divf"), ("flush_to_zero", "maxf")]
    assert {s.kind for s in d.structural} == {"attribute"}


def test_approx_div(compiler):
    d = _diff(compiler, "approx_div", "softmax")
    assert [(c.kind, c.op) for c in d.changes] == [("rounding", "divf")]
    assert "approx" in d.changes[0].detail


def test_kernel_hints_and_replace_hints(compiler):
    d = _diff(compiler, "kernel_hints", "matmul", {"occupancy": 2})
    assert [(c.kind, c.knob) for c in d.changes] == [("entry_hint", "occupancy")]
    src = example_source("matmul")
    hints = T.get("replace_hints").apply(src, "matmul", num_ctas=2).hints
    d2 = diff.diff_texts(compiler.tileir(src, "matmul"), compiler.tileir(src, "matmul", hints=hints))
    assert [(c.kind, c.knob) for c in d2.changes] == [("entry_hint", "num_ctas")]


def test_tf32_guard(compiler):
    d = _diff(compiler, "tf32_guard", "matmul_f32")
    assert [(c.kind, c.op) for c in d.changes] == [("mma_dtype", "mmaf")]
    assert "tf32" in d.changes[0].detail
    # compiled for f16, the guarded kernel is the same kernel
    assert _diff(compiler, "tf32_guard", "matmul").ir_equivalent


def test_tile_size_sweep(compiler):
    d = _diff(compiler, "tile_size_sweep", "vector_add", {"TILE": 2048})
    assert {c.kind for c in d.changes} == {"tile_shape"}
    assert all("1024 → 2048" in c.detail for c in d.changes)


def test_persistent_grid(compiler):
    d = _diff(compiler, "persistent_grid", "vector_add")
    assert [(c.kind, c.knob) for c in d.changes] == [("persistent_loop", "persistent")]


def test_gather_to_load(compiler):
    d = _diff(compiler, "gather_to_load", "gather_scale")
    assert sorted((c.kind, c.op) for c in d.changes) == [("access_pattern", "load_view_tko"),
                                                         ("access_pattern", "store_view_tko")]


def test_exp_to_exp2_structure(compiler):
    d = _diff(compiler, "exp_to_exp2", "softmax")
    removed = Counter(s.op for s in d.structural if s.kind == "removed")
    added = Counter(s.op for s in d.structural if s.kind == "added")
    assert removed == {"exp": 1}
    assert added["exp2"] == 1 and added["mulf"] == 1
    assert set(added) <= {"exp2", "mulf", "constant", "reshape", "broadcast"}


def test_group_m_swizzle_structure(compiler):
    d = _diff(compiler, "group_m_swizzle", "matmul")
    removed = Counter(s.op for s in d.structural if s.kind == "removed")
    added = Counter(s.op for s in d.structural if s.kind == "added")
    assert removed == {"get_tile_block_id": 1}
    assert added["divi"] >= 2 and added["remi"] >= 2 and added["mini"] >= 1
    assert added["get_index_space_shape"] == 2
    # the memory ops stay; only their block indices are rewired
    assert not {"load_view_tko", "store_view_tko", "mmaf"} & (set(added) | set(removed))
    rewired = Counter(s.op for s in d.structural if s.kind == "rewired")
    assert rewired == {"load_view_tko": 2, "store_view_tko": 1}
