"""The registry, and a sweep over every (example kernel, transform): compiles, idempotent."""
from __future__ import annotations

import pytest

from cutile_diag.errors import CutileDiagError
from cutile_diag import transforms as T

from .tf_support import EXAMPLE_FILES, canonical, example_source

EXPECTED = {"gather_to_load": "A", "persistent_grid": "B", "grid_resize": "Y", "kernel_hints": "C", "replace_hints": "C",
            "tf32_guard": "D", "latency_hints": "E", "store_allow_tma_false": "F", "tile_size_sweep": "G",
            "flush_to_zero": "H", "approx_div": "H", "exp_to_exp2": "H", "group_m_swizzle": "I",
            "tma_zero_padding": "P", "read_once": "W", "rows_per_block": "X",
            "joint_sweep": "C"}


def test_names_and_playbook_ids():
    assert T.names() == list(EXPECTED)
    assert {t.name: t.playbook_id for t in T.TRANSFORMS.values()} == EXPECTED
    assert [t.name for t in T.by_playbook("h")] == ["flush_to_zero", "approx_div", "exp_to_exp2"]
    assert all(t.summary for t in T.TRANSFORMS.values())
    assert [t.name for t in T.TRANSFORMS.values() if t.kind == "hints"] == ["replace_hints"]


def test_unknown_name():
    with pytest.raises(T.UnknownTransformError) as e:
        T.get("make_it_fast")
    assert isinstance(e.value, CutileDiagError) and "latency_hints" in e.value.one_line()


def test_applicability_table():
    rows = T.applicability(example_source("softmax"), "softmax")
    assert [t.name for t, _, _ in rows] == list(EXPECTED)
    verdict = {t.name: ok for t, ok, _ in rows}
    assert verdict == {"gather_to_load": False, "persistent_grid": True, "grid_resize": False, "kernel_hints": True,
                       "replace_hints": True, "tf32_guard": False, "latency_hints": True,
                       "store_allow_tma_false": True, "tile_size_sweep": False, "flush_to_zero": True,
                       "approx_div": True, "exp_to_exp2": True, "group_m_swizzle": False,
                       "tma_zero_padding": True, "read_once": False, "rows_per_block": True,
                       "joint_sweep": True}
    assert all(why for _, _, why in rows)


def _cases():
    for kernel in EXAMPLE_FILES:
        src = example_source(kernel)
        for t in T.TRANSFORMS.values():
            if t.kind != "source":
                continue
            cands = t.candidates(src, kernel)
            if cands:
                yield pytest.param(t.name, kernel, cands[0], id=f"{t.name}-{kernel}")


CASES = list(_cases())


def test_sweep_is_not_empty():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name, kernel, params", CASES)
def test_every_applicable_transform_compiles_and_is_idempotent(compiler, name, kernel, params):
    t = T.get(name)
    src = example_source(kernel)
    res = t.apply(src, kernel, **params)
    assert res.new_source != src and res.changed_lines
    assert res.transform == name and res.description
    ir = compiler.tileir(res.new_source, kernel)
    # tf32_guard may leave a kernel's IR as it was; grid_resize changes the wrapper's grid only
    assert canonical(ir) != canonical(compiler.tileir(src, kernel)) or name in ("tf32_guard", "grid_resize")
    ok, why = t.applicable(res.new_source, kernel, **params)
    assert not ok, f"{name} applies again to its own output: {why}"
    # comments survive (re-indented at most)
    comments = [ln.strip() for ln in src.splitlines() if ln.strip().startswith("#")]
    assert all(c in {ln.strip() for ln in res.new_source.splitlines()} for c in comments)
