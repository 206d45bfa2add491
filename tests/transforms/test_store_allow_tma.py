"""store_allow_tma_false: allow_tma=False on ct.store (playbook F)."""
from __future__ import annotations

import pytest

from cutile_diag.transforms import StoreAllowTmaFalse

from .tf_support import example_source, ir_delta, op_hints, strip_op_hints

T = StoreAllowTmaFalse()


@pytest.mark.parametrize("kernel", ["vector_add", "softmax", "matmul"])
def test_exactly_the_store_loses_tma(compiler, kernel):
    src = example_source(kernel)
    res = T.apply(src, kernel)
    removed, added = ir_delta(compiler.tileir(src, kernel), compiler.tileir(res.new_source, kernel))
    assert len(removed) == len(added) == 1
    assert "store_view_tko" in added[0]
    assert op_hints(added[0]) == "allow_tma = false"
    assert strip_op_hints(added[0]) == removed[0]
    assert len(res.changed_lines) == 1


def test_combines_with_latency_in_one_hint_dict(compiler):
    from cutile_diag.transforms import LatencyHints
    src = LatencyHints().apply(example_source("vector_add"), "vector_add").new_source
    res = T.apply(src, "vector_add")
    _, added = ir_delta(compiler.tileir(src, "vector_add"), compiler.tileir(res.new_source, "vector_add"))
    assert [op_hints(a) for a in added] == ["allow_tma = false, latency = 3"]


def test_refusals():
    ok, why = T.applicable(example_source("gather_scale"), "gather_scale")
    assert not ok and "no ct.store" in why
    done = T.apply(example_source("vector_add"), "vector_add").new_source
    ok, why = T.applicable(done, "vector_add")
    assert not ok and why.startswith("already applied")
    explicit = example_source("vector_add").replace("tile=ta + tb)", "tile=ta + tb, allow_tma=True)")
    ok, why = T.applicable(explicit, "vector_add")
    assert not ok and "explicitly" in why
    res = T.apply(explicit, "vector_add", overwrite=True)
    # (vector_add_persistent's store got allow_tma=True from the replace above, and keeps it)
    assert res.new_source.count("allow_tma=False)") == 1 and res.new_source.count("allow_tma=True)") == 1
    assert res.changed_lines == (16,)
