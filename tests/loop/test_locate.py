"""Locating a kernel's parts: @ct.kernel, launch wrapper, autotune space, registration, memory ops."""
import pytest

from cutile_diag.errors import KernelLoadError
from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag.source.locate import locate

TILEGYM_LIKE = '''
import cuda.tile as ct
from cuda.tile.tune import exhaustive_search
from tilegym.backend import register_impl

@ct.kernel(occupancy=4)
def softmax_kernel(X, Y, TILE_N: ct.Constant[int]):
    row = ct.bid(0)
    x = ct.load(X, index=(row, 0), shape=(1, TILE_N), latency=10)
    ct.store(Y, index=(row, 0), tile=x, allow_tma=False)


@ct.kernel
def other_kernel(X):
    pass


_CACHE = {}


def softmax_launch(x, y, stream):
    key = (x.shape, str(x.device))
    if key not in _CACHE:
        configs = [1, 2, 4, 8]
        res = exhaustive_search(configs, stream, lambda c: (x.shape[0],), softmax_kernel,
                                lambda c: (x, y, 1024))
        _CACHE[key] = softmax_kernel.replace_hints(occupancy=res.best.config)
    k = _CACHE[key]
    ct.launch(stream, (x.shape[0],), k, (x, y, 1024))
    ct.launch(stream, (1,), other_kernel, (x,))


@register_impl("softmax", backend="cutile")
def softmax(x, **kw):
    return softmax_launch(x, None, None)
'''


def test_tilegym_style_file(tmp_path):
    f = tmp_path / "softmax.py"
    f.write_text(TILEGYM_LIKE)
    loc = locate(f, "softmax_kernel")
    assert [k.name for k in loc.kernels] == ["softmax_kernel", "other_kernel"]
    assert loc.kernel.hints == {"occupancy": "4"} and loc.kernel.constants == ["TILE_N"]
    assert [(s.kind, s.function) for s in loc.launches] == [("exhaustive_search", "softmax_launch"),
                                                            ("ct.launch", "softmax_launch")]
    assert loc.wrappers == ["softmax_launch"] and loc.autotuned
    assert loc.autotune[0].text == "configs = [1, 2, 4, 8]" and loc.autotune[0].size == 4
    assert [(r.op, r.backend, r.function) for r in loc.registrations] == [("softmax", "cutile", "softmax")]
    assert [(m.kind, m.latency, m.allow_tma) for m in loc.memory_ops] == [("load", "10", None),
                                                                          ("store", None, "False")]
    assert not loc.capture_specs


AUTOGRAD_STYLE = '''
import cuda.tile as ct
import torch


@ct.kernel
def fwd(x, y, T: ct.Constant[int]):
    ct.store(y, index=(ct.bid(0),), tile=ct.load(x, index=(ct.bid(0),), shape=(T,)))


class _Op(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.empty_like(x)
        T = 256
        ct.launch(torch.cuda.current_stream(), (x.numel() // T,), fwd, (x, y, T))
        return y


def op(x):
    return _Op.apply(x)
'''


def test_a_launch_in_an_autograd_functions_method_is_the_kernels_wrapper(tmp_path):
    """The library style: the launch in ``torch.autograd.Function.forward``, called through ``apply``."""
    f = tmp_path / "op.py"
    f.write_text(AUTOGRAD_STYLE)
    loc = locate(f, "fwd")
    assert [(s.kind, s.function) for s in loc.launches] == [("ct.launch", "_Op.forward")]
    assert loc.wrappers == ["_Op.forward"] and not loc.notes and not loc.autotuned


def test_examples_and_aliases():
    loc = locate(EXAMPLES_DIR / "matmul.py", "matmul_f32")
    assert loc.function == "matmul" and loc.capture_specs
    assert [s.kernel for s in loc.launches] == ["matmul"]          # not matmul_tuned's launch
    assert [(m.kind, m.in_loop) for m in loc.memory_ops] == [("load", True), ("load", True), ("store", False)]
    g = locate(EXAMPLES_DIR / "gather_scale.py", "gather_scale")
    assert [m.kind for m in g.memory_ops] == ["gather", "scatter"]


def test_unknown_kernel(tmp_path):
    with pytest.raises(KernelLoadError) as e:
        locate(EXAMPLES_DIR / "softmax.py", "softmaxx")
    assert "no @ct.kernel named 'softmaxx' (kernels in this file: softmax)" in e.value.one_line()
    f = tmp_path / "plain.py"
    f.write_text("def f(): pass\n")
    with pytest.raises(KernelLoadError, match="does not import cuda.tile"):
        locate(f, "f")


def test_constant_aliases_are_constants(tmp_path):
    f = tmp_path / "k.py"
    f.write_text("import cuda.tile as ct\nfrom typing import TypeAlias\n"
                 "ConstInt = ct.Constant[int]\nConstBool: TypeAlias = ct.Constant[bool]\nC = ct.Constant\n"
                 "Tile = ConstInt\n\n@ct.kernel\ndef k(a, T: ConstInt, F: ConstBool, W: C[int], U: Tile, n: int):\n"
                 "    pass\n")
    assert locate(f, "k").kernel.constants == ["T", "F", "W", "U"]


AUTOTUNED = '''
import cuda.tile as ct
from types import SimpleNamespace
from cuda.tile.tune import exhaustive_search

ConstInt = ct.Constant[int]
_OCC = (2, 4, 6, 8)


def _configs(dtype, cap):
    if dtype == "f64":
        for t in TABLE[cap]:
            yield SimpleNamespace(TM=t, occupancy=1)
        return
    if cap[0] < 9:
        for tm in [64, 128]:
            for occ in [1, 2]:
                yield SimpleNamespace(TM=tm, occupancy=occ)
    else:
        yield SimpleNamespace(TM=128, occupancy=1)
        yield SimpleNamespace(TM=256, occupancy=1)


@ct.kernel
def mm(A, TM: ConstInt):
    pass


@ct.kernel
def sm(A, TN: ConstInt):
    pass


def launch_mm(a, stream):
    configs = list(_configs(a.dtype, (9, 0)))
    exhaustive_search(configs, stream, lambda c: (1,), mm, lambda c: (a, c.TM),
                      lambda c: {"occupancy": c.occupancy})


def launch_sm(a, stream):
    exhaustive_search([SimpleNamespace(occupancy=o) for o in _OCC], stream, lambda c: (1,), sm, lambda c: (a, 64))
'''


def test_autotune_space_sizes(tmp_path):
    f = tmp_path / "tuned.py"
    f.write_text(AUTOTUNED)
    (mm,) = locate(f, "mm").autotune
    assert mm.size is None and mm.sizes == [2, 4, None]      # sm90+ / pre-sm90 / an f64 table of unknown size
    (sm,) = locate(f, "sm").autotune
    assert sm.size == 4 and sm.sizes == []
