"""kernel_hints (decorator) and replace_hints (hint-only): occupancy / num_ctas / num_worker_warps."""
from __future__ import annotations

import pytest

from cutile_diag.transforms import (HintsResult, KernelHints, ReplaceHints, TransformNotApplicable,
                                         TransformParamError)

from .tf_support import entry_line, example_source, ir_delta

T = KernelHints()
H = ReplaceHints()


@pytest.mark.parametrize("params, ir_hints", [
    ({"occupancy": 2}, "occupancy = 2"),
    ({"num_ctas": 2}, "num_cta_in_cga = 2"),
    ({"num_worker_warps": 8}, "num_worker_warps_per_cta = 8"),
    ({"occupancy": 4, "num_ctas": 2}, "num_cta_in_cga = 2, occupancy = 4"),
])
def test_decorator_hints_reach_the_entry(compiler, params, ir_hints):
    src = example_source("matmul")
    res = T.apply(src, "matmul", **params)
    base, new = compiler.tileir(src, "matmul"), compiler.tileir(res.new_source, "matmul")
    removed, added = ir_delta(base, new)
    assert len(removed) == len(added) == 1
    assert f"optimization_hints=<default = {{{ir_hints}}}>" in entry_line(new)
    assert "optimization_hints=<default = {}>" in entry_line(base)
    assert res.changed_lines == (12,)


def test_bare_decorator_becomes_a_call_and_merges():
    src = example_source("softmax")
    r1 = T.apply(src, "softmax", occupancy=2)
    assert "@ct.kernel(occupancy=2)\ndef softmax(" in r1.new_source
    r2 = T.apply(r1.new_source, "softmax", num_worker_warps=4)
    assert "@ct.kernel(occupancy=2, num_worker_warps=4)\ndef softmax(" in r2.new_source


def test_idempotence_overwrite_and_validation():
    done = T.apply(example_source("softmax"), "softmax", occupancy=2).new_source
    assert T.applicable(done, "softmax", occupancy=2) == (False, "already applied: the decorator sets occupancy=2")
    ok, why = T.applicable(done, "softmax", occupancy=4)
    assert not ok and "overwrite=True" in why
    res = T.apply(done, "softmax", occupancy=4, overwrite=True)
    assert "@ct.kernel(occupancy=4)" in res.new_source
    for bad in ({"occupancy": 0}, {"occupancy": 33}, {"num_ctas": 3}, {"num_worker_warps": 6}, {},
                {"occupancy": "2"}, {"occupancy": 2, "warps": 4}):
        with pytest.raises(TransformParamError):
            T.apply(example_source("softmax"), "softmax", **bad)
    # candidates: a sweep implies overwrite, the value already set is skipped
    cands = T.candidates(done, "softmax")
    assert {"occupancy": 2, "overwrite": True} not in cands and {"occupancy": 8, "overwrite": True} in cands


def test_replace_hints_leaves_source_alone(compiler):
    src = example_source("matmul")
    res = H.apply(src, "matmul", occupancy=2, num_ctas=2)
    assert isinstance(res, HintsResult) and res.kind == "hints"
    assert res.hints == {"occupancy": 2, "num_ctas": 2}
    # the hint dict applied with replace_hints gives the same IR as the decorator edit
    via_hints = compiler.tileir(src, "matmul", hints=res.hints)
    via_source = compiler.tileir(T.apply(src, "matmul", occupancy=2, num_ctas=2).new_source, "matmul")
    assert entry_line(via_hints) == entry_line(via_source)
    assert "num_cta_in_cga = 2, occupancy = 2" in entry_line(via_hints)


def test_replace_hints_apply_to_kernel():
    from cutile_diag.capture.loader import load_kernel
    from cutile_diag.examples import EXAMPLES_DIR
    k = load_kernel(f"{EXAMPLES_DIR / 'softmax.py'}::softmax").kernel
    res = H.apply(example_source("softmax"), "softmax", occupancy=4)
    hinted = res.apply_to(k)
    assert hinted._compiler_options.occupancy == 4 and k._compiler_options.occupancy is None


def test_replace_hints_refusals_and_probe():
    done = T.apply(example_source("softmax"), "softmax", occupancy=2).new_source
    ok, why = H.applicable(done, "softmax", occupancy=2)
    assert not ok and why.startswith("already applied")
    with pytest.raises(TransformNotApplicable):
        H.apply(done, "softmax", occupancy=2)
    # without parameters, applicable reports the sweep
    ok, why = H.applicable(example_source("softmax"), "softmax")
    assert ok and why.startswith("8 candidate(s): occupancy=1")
    ok, why = H.applicable(example_source("softmax"), "nope")
    assert not ok and "no kernel named" in why
    with pytest.raises(TransformParamError):
        H.apply(example_source("softmax"), "softmax")


TUNED = '''import cuda.tile as ct
from math import ceil
from types import SimpleNamespace
from cuda.tile.tune import exhaustive_search

from .utils import cached_replace_hints

ConstInt = ct.Constant[int]
_cache = {}


@ct.kernel
def _matmul_kernel(A, B, C, TM: ConstInt):
    pass


@ct.kernel(occupancy=2)
def _softmax_kernel(X, Y, T: ConstInt):
    pass


def _tuned_matmul(stream, a, b, c):
    if "k" not in _cache:
        res = exhaustive_search([SimpleNamespace(TM=64, num_ctas=1, occupancy=1)], stream,
                                lambda cfg: (ceil(1024 / cfg.TM), 1, 1), _matmul_kernel,
                                lambda cfg: (a, b, c, cfg.TM),
                                lambda cfg: {"num_ctas": cfg.num_ctas, "occupancy": cfg.occupancy})
        best = res.best.config
        _cache["k"] = (best, _matmul_kernel.replace_hints(num_ctas=best.num_ctas, occupancy=best.occupancy))
    best, kern = _cache["k"]
    ct.launch(stream, (1,), kern, (a, b, c, best.TM))


def _softmax(stream, x, y, occ):
    kern = cached_replace_hints(_softmax_kernel, occupancy=occ)
    ct.launch(stream, (1,), kern, (x, y, 1024))
'''


def test_hints_the_wrapper_overrides_are_refused():
    # TileGym's autotuned matmul: the search's hints_fn and replace_hints set occupancy and num_ctas,
    # so a decorator value for them compiles to the same kernel (the no-op step of the H200 run)
    from cutile_diag.source.analysis import hint_overrides
    from cutile_diag.source.model import load
    assert set(hint_overrides(load(TUNED, "_matmul_kernel"))) == {"num_ctas", "occupancy"}
    ok, why = KernelHints().applicable(TUNED, "_matmul_kernel", occupancy=2)
    assert not ok and "overrides occupancy" in why and "exhaustive_search" in why and "no-op" in why
    assert not ReplaceHints().applicable(TUNED, "_matmul_kernel", num_ctas=2)[0]
    # the knob the wrapper leaves alone is still a real change
    assert KernelHints().applicable(TUNED, "_matmul_kernel", num_worker_warps=8)[0]
    assert {k for c in KernelHints().candidates(TUNED, "_matmul_kernel") for k in c} == {"num_worker_warps", "overwrite"}
    # a helper wrapping replace_hints (TileGym's cached_replace_hints) counts too
    ok, why = KernelHints().applicable(TUNED, "_softmax_kernel", occupancy=4, overwrite=True)
    assert not ok and "cached_replace_hints" in why
