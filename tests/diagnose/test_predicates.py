"""The playbook predicate language: safe, three-valued, and it names the facts it used."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, strategies as st

from cutile_diag.diagnose.predicates import UNKNOWN, Predicate, PredicateError, evaluate, names

FACTS = {"ir.ptr_loads": 2, "ir.persistent_loop": False, "ir.tile_grid_2d": True,
         "static.output_tiles": 16384, "device.sm_count": 132, "gpu.pct_of_roof": 80.0,
         "remarks.tma_failure_reasons": ["TMA only supports zero padding"], "capture.arch": "sm_90",
         "ir.hint_occupancy": None}


@pytest.mark.parametrize("expr, value", [
    ("ir.ptr_loads > 0 and not ir.persistent_loop", True),
    ("ir.ptr_loads > 0 and ir.persistent_loop", False),
    ("static.output_tiles > 2 * device.sm_count", True),
    ("static.output_tiles / device.sm_count < 100", False),
    ("0 < ir.ptr_loads <= 2", True),
    ("capture.arch == 'sm_90'", True),
    ("capture.arch in ['sm_80', 'sm_90']", True),
    ("len(remarks.tma_failure_reasons) == 1", True),
    ("any_in(remarks.tma_failure_reasons, 'zero padding')", True),
    ("min(ir.ptr_loads, 1) == 1 and max(ir.ptr_loads, 5) == 5 and abs(-ir.ptr_loads) == 2", True),
    ("known(ir.ptr_loads) and not known(gpu.grid_blocks)", True),
    ("true", True),
    ("false or ir.tile_grid_2d", True),
    ("ir.hint_occupancy == None", True),
])
def test_values(expr, value):
    assert evaluate(expr, FACTS).value is value


@pytest.mark.parametrize("expr, value", [
    ("gpu.grid_blocks > 1", UNKNOWN),                        # missing fact
    ("gpu.grid_blocks > 1 and ir.persistent_loop", False),   # decided by the known side
    ("gpu.grid_blocks > 1 or ir.tile_grid_2d", True),
    ("gpu.grid_blocks > 1 or ir.persistent_loop", UNKNOWN),
    ("not gpu.grid_blocks", UNKNOWN),
    ("gpu.grid_blocks * 2 > device.sm_count", UNKNOWN),
    ("ir.hint_occupancy > 1", UNKNOWN),                      # present but None: not comparable
    ("device.sm_count / 0 > 1", UNKNOWN),
])
def test_unknown_propagates(expr, value):
    assert evaluate(expr, FACTS).value is value


def test_used_and_missing_are_reported():
    r = evaluate("ir.ptr_loads > 0 and gpu.grid_blocks > device.sm_count", FACTS)
    assert r.unknown
    assert r.used == ["ir.ptr_loads", "device.sm_count"]
    assert r.missing == ["gpu.grid_blocks"]
    # every fact of an `and` is read, even after a false operand: all evidence is reported
    r = evaluate("ir.persistent_loop and ir.ptr_loads > 0", FACTS)
    assert r.value is False and set(r.used) == {"ir.persistent_loop", "ir.ptr_loads"}


def test_names():
    assert names("ir.ptr_loads > 0 and not known(gpu.waves) or static.waves < 2 * device.sm_count") == {
        "ir.ptr_loads", "gpu.waves", "static.waves", "device.sm_count"}
    assert names("true and false") == set()


@pytest.mark.parametrize("expr", [
    "__import__('os').system('true')",
    "ir.ptr_loads.__class__",            # still a dotted name -> just an unknown fact, but calls are refused:
    "open('x')",
    "(lambda: 1)()",
    "[x for x in ir.mma_shapes]",
    "ir.mma_shapes[0]",
    "ir.ptr_loads if true else 0",
    "ir.ptr_loads ** 2",
    "ir.ptr_loads > 0;",
    "",
    "ir.ptr_loads >",
    "len(x=1)",
])
def test_rejects_everything_outside_the_language(expr):
    if expr == "ir.ptr_loads.__class__":
        # attribute chains are fact names, not attribute access: nothing is evaluated
        assert evaluate(expr, {"ir.ptr_loads": 1}).value is UNKNOWN
        return
    with pytest.raises(PredicateError):
        Predicate(expr)


def test_type_errors_are_predicate_errors():
    with pytest.raises(PredicateError):
        evaluate("capture.arch > 3", FACTS)
    with pytest.raises(PredicateError):
        evaluate("capture.arch + 3 > 1", FACTS)


def _kleene_and(a, b):
    if a is False or b is False:
        return False
    if a is UNKNOWN or b is UNKNOWN:
        return UNKNOWN
    return True


def _kleene_or(a, b):
    if a is True or b is True:
        return True
    if a is UNKNOWN or b is UNKNOWN:
        return UNKNOWN
    return False


def _kleene_not(a):
    return UNKNOWN if a is UNKNOWN else (not a)


@given(st.lists(st.sampled_from([True, False, None]), min_size=3, max_size=3))
def test_kleene_logic(vals):
    facts = {f"ir.f{i}": v for i, v in enumerate(vals) if v is not None}
    a, b, c = (UNKNOWN if v is None else v for v in vals)
    expected = _kleene_or(_kleene_and(a, b), _kleene_not(c))
    assert evaluate("ir.f0 and ir.f1 or not ir.f2", facts).value is expected


def test_truth_table_of_and_or_exhaustive():
    vals = [True, False, None]
    for x, y in itertools.product(vals, vals):
        facts = {k: v for k, v in (("ir.x", x), ("ir.y", y)) if v is not None}
        X = UNKNOWN if x is None else x
        Y = UNKNOWN if y is None else y
        assert evaluate("ir.x and ir.y", facts).value is _kleene_and(X, Y)
        assert evaluate("ir.x or ir.y", facts).value is _kleene_or(X, Y)


def test_unknown_has_no_truth_value():
    with pytest.raises(TypeError):
        bool(UNKNOWN)
