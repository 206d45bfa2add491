"""Autotuning held equal across measurement processes (measure.tuning): cuTile's own exhaustive_search, its
timing seam replaced (as cuTile's tests do), so that two "processes" disagree on the best configuration."""
from types import SimpleNamespace

import pytest

tune = pytest.importorskip("cuda.tile.tune")
from cuda.tile.tune import _tune  # noqa: E402

from cutile_diag.measure.tuning import TuningPins, space_digest  # noqa: E402

SPACE = [SimpleNamespace(TILE=t, occupancy=o) for t in (64, 128) for o in (1, 2)]


class FakeKernel:
    def __init__(self, cfg):
        self.cfg = cfg

    def replace_hints(self, **hints):
        return self


def _matmul_kernel(cfg):            # a kernel factory, as exhaustive_search takes one
    return FakeKernel(cfg)


@pytest.fixture
def timings(monkeypatch):
    """Per configuration its time in us; each 'process' (pins) sees its own table, as two searches do."""
    table = {}
    monkeypatch.setattr(_tune, "_benchmark", lambda stream, grid, kernel, args, flush: table[repr(kernel.cfg)])
    original = tune.exhaustive_search
    yield table
    tune.exhaustive_search = _tune.exhaustive_search = original


def search(space=SPACE):
    # the call TileGym makes, through the name bound at its import (here: looked up at call time)
    return tune.exhaustive_search(space, None, lambda c: (1, 1, 1), _matmul_kernel, lambda c: (), quiet=True)


def test_a_later_process_holds_the_first_one_s_pick_and_searches_where_the_space_changed(timings):
    # process A: its search finds SPACE[2] fastest
    timings.update({repr(c): t for c, t in zip(SPACE, (10.0, 9.0, 8.0, 9.5))})
    a = TuningPins()
    assert a.install()
    assert search().best.config is SPACE[2] and search().best.config is SPACE[2]   # two searches: #0 and #1
    assert set(a.made) == {"_matmul_kernel#0", "_matmul_kernel#1"}
    assert a.made["_matmul_kernel#0"] == {"pick": repr(SPACE[2]), "space": space_digest(SPACE)}
    assert a.searched == {"_matmul_kernel#0": "the first worker searches", "_matmul_kernel#1": "the first worker searches"}
    # process B: its own noise would pick SPACE[3]; held, it runs A's pick, searching nothing else
    timings.update({repr(SPACE[3]): 7.0})
    b = TuningPins(given=a.made)
    assert b.install()
    ran = []
    real = _tune._benchmark
    _tune._benchmark = lambda *a_: ran.append(repr(a_[2].cfg)) or real(*a_)
    try:
        assert search().best.config is SPACE[2]
    finally:
        _tune._benchmark = real
    assert set(ran) == {repr(SPACE[2])} and b.pinned == ["_matmul_kernel#0"]
    # a transform that changed the space (a tile added): that search searches, and says why
    wider = SPACE + [SimpleNamespace(TILE=256, occupancy=1)]
    timings[repr(wider[-1])] = 12.0
    assert search(wider).best.config is SPACE[3]
    assert b.searched == {"_matmul_kernel#1": "its search space changed"}
    # a search with no earlier pick (a third one) searches too
    assert search().best.config is SPACE[3] and b.searched["_matmul_kernel#2"] == "no earlier pick"
    assert b.report()["pinned"] == ["_matmul_kernel#0"]
    assert b.report()["searched_again"] == {"_matmul_kernel#1": "its search space changed",
                                            "_matmul_kernel#2": "no earlier pick"}
    assert a.report()["searched_again"] == {}


def test_installing_twice_wraps_cuTile_s_search_once(timings):
    timings.update({repr(c): 1.0 + i for i, c in enumerate(SPACE)})
    first, second = TuningPins(), TuningPins()
    first.install()
    second.install()
    assert second._original is first._original
    search()
    assert second.made and not first.made


def test_a_module_that_bound_the_search_before_the_pins_gets_them_too(timings, monkeypatch):
    import types
    timings.update({repr(c): 1.0 + i for i, c in enumerate(SPACE)})
    early = types.ModuleType("early_kernels")
    early.exhaustive_search = tune.exhaustive_search          # ``from cuda.tile.tune import exhaustive_search``
    monkeypatch.setitem(__import__("sys").modules, "early_kernels", early)
    pins = TuningPins()
    pins.install()
    assert early.exhaustive_search == pins.search
