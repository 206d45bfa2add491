"""joint_sweep: occupancy x latency x rows-per-block x persistent grid as one search space;
the loop screens its points and confirms the best against the kept version."""
from __future__ import annotations

import pytest

from cutile_diag.transforms import JointSweep

from .tf_support import example_source, op_counts, op_lines

J = JointSweep()


def test_points_spread_over_the_applicable_knobs(compiler):
    cands = J.candidates(example_source("softmax"), "softmax")
    assert 4 <= len(cands) <= 8 and all(len(c) >= 2 for c in cands)
    for knob in ("rows", "blocks_per_sm", "occupancy", "latency"):
        assert len({c.get(knob) for c in cands[:4]}) >= 2, knob        # every knob varies early
    res = J.apply(example_source("softmax"), "softmax", **cands[1])
    assert res.description == "joint point rows=4, blocks_per_sm=4, occupancy=4, latency=6"
    text = compiler.tileir(res.new_source, "softmax")
    assert "tile<4x1024xf16>" in op_lines(text, "load_view_tko")[0] and "latency = 6" in op_lines(text, "load_view_tko")[0]
    assert op_counts(text)["for"] >= 1 and "occupancy = 4" in text


def test_only_applicable_knobs_and_refusals():
    cands = J.candidates(example_source("matmul"), "matmul")       # no rows / not a 1-D grid
    assert cands and all(set(c) <= {"occupancy", "latency"} for c in cands)
    with pytest.raises(Exception, match="at least two knobs"):
        J.apply(example_source("softmax"), "softmax", occupancy=2)
    with pytest.raises(Exception, match="rows=2"):
        J.apply(example_source("matmul"), "matmul", rows=2, occupancy=2)
