"""The no-capture diagnosis ranks with the playbook's clauses on the facts the source fixes (tile sizes the host
passes, pinned hints, MMAs), the way the capture-based engine ranks with the IR's."""
from __future__ import annotations

from pathlib import Path

from cutile_diag.loop.diagnosis import ApplicabilityDiagnoser, DiagnoseContext, source_facts
from cutile_diag.transforms.tile_size_sweep import largest_tile

# an elementwise kernel in the style of TileGym's activations: a 1-D gather over arange, the tile chosen in an
# autograd Function of the same file
STREAM = '''
import math
import cuda.tile as ct
import torch

@ct.kernel{hints}
def act_fwd(a, b, c, n: ct.Constant[int], BLOCK: ct.Constant[int]):
    pid = ct.bid(0)
    offs = pid * BLOCK + ct.arange(BLOCK, dtype=ct.int32)
    x = ct.gather(a, offs, padding_value=0)
    y = ct.gather(b, offs, padding_value=0)
    ct.scatter(c, offs, x * ct.exp(y), check_bounds=True)

class _Act(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        c = torch.empty_like(a)
        n = a.numel()
        BLOCK = {block}
        ct.launch(torch.cuda.current_stream(), (math.ceil(n / BLOCK), 1, 1), act_fwd, (a, b, c, n, BLOCK))
        return c
'''

# a 2-D gather: the index vectors are small, the tile they build is their product
GATHER_2D = '''
import cuda.tile as ct
import torch

@ct.kernel
def copy2d(x, y, TM: ct.Constant[int], TN: ct.Constant[int]):
    r = ct.bid(0) * TM + ct.arange(TM, dtype=ct.int32)
    c = ct.arange(TN, dtype=ct.int32)
    t = ct.gather(x, (r[:, None], c[None, :]))
    ct.scatter(y, (r[:, None], c[None, :]), t)

def launch(x, y, TM=16, TN=32):
    ct.launch(torch.cuda.current_stream(), (x.shape[0] // TM, 1, 1), copy2d, (x, y, TM, TN))
'''

# a row kernel loading 2-D tiles by shape: the tile is the shape's product
ROWS = '''
import cuda.tile as ct
import torch

@ct.kernel
def rows(x, y, TM: ct.Constant[int], TN: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0), 0), shape=(TM, TN))
    ct.store(y, index=(ct.bid(0), 0), tile=t * 2)

def launch(x, y, TM=8, TN=64):
    ct.launch(torch.cuda.current_stream(), (x.shape[0] // TM, 1, 1), rows, (x, y, TM, TN))
'''


def _order(source: str, kernel: str) -> list[str]:
    d = ApplicabilityDiagnoser().diagnose(DiagnoseContext(path=Path("k.py"), kernel=kernel, source=source))
    return [r.id for r in d.recommendations if r.automatic]


def _rec(source: str, kernel: str, pid: str):
    d = ApplicabilityDiagnoser().diagnose(DiagnoseContext(path=Path("k.py"), kernel=kernel, source=source))
    return next(r for r in d.recommendations if r.id == pid)


def test_largest_tile_substitutes_the_hosts_constants():
    assert largest_tile(STREAM.format(hints="", block=256), "act_fwd") == 256
    assert largest_tile(ROWS, "rows") == 512
    # arange vectors broadcast into a 2-D index: no single shape is the tile
    assert largest_tile(GATHER_2D, "copy2d") is None
    # a size the host computes at the launch is not the source's to know
    computed = STREAM.format(hints="", block="1 << max(8, n.bit_length() - 12)")
    assert largest_tile(computed, "act_fwd") is None


def test_small_streaming_tiles_rank_the_tile_sweep_before_occupancy():
    order = _order(STREAM.format(hints="", block=256), "act_fwd")
    assert order.index("G") < order.index("C")
    g = _rec(STREAM.format(hints="", block=256), "act_fwd", "G")
    assert any("largest 256 elements" in e for e in g.evidence)


def test_large_or_unknown_tiles_keep_the_recipe_order():
    # 1024 elements a program: past the small-tile line
    order = _order(STREAM.format(hints="", block=1024), "act_fwd")
    assert order.index("C") < order.index("G")
    # 16 x 32 gathered: the index vectors are small but the tile is not known from one shape
    order = _order(GATHER_2D, "copy2d")
    assert "G" not in order or order.index("C") < order.index("G")


def test_pinned_hints_make_both_sweeps_exploratory():
    src = STREAM.format(hints="(occupancy=4)", block=256)
    facts = source_facts(src, "act_fwd")
    assert facts["ir.kernel_hints_set"] is True and facts["ir.max_tile_elems"] == 256
    g, c = _rec(src, "act_fwd", "G"), _rec(src, "act_fwd", "C")
    # the engine's penalties for a chosen configuration apply without a capture too
    assert g.rank >= 90 and c.rank >= 70
    assert not any("every tile is small" in e for e in g.evidence)


def test_source_facts_of_a_source_that_does_not_parse_are_unknown():
    assert source_facts("def (:", "act_fwd") == {}
    assert source_facts(STREAM.format(hints="", block=256), "no_such_kernel") == {}


# a small GEMM whose product sits in a helper (cuTile inlines it), next to an elementwise kernel in the same file
GEMM_IN_HELPER = '''
import cuda.tile as ct
import torch

def _step(acc, a, b):
    return ct.mma(a, b, acc)

def _tile_product(A, B, i, j, k, TM, TN, TK):
    a = ct.load(A, index=(i, k), shape=(TM, TK))
    b = ct.load(B, index=(k, j), shape=(TK, TN))
    return a, b

@ct.kernel
def small_gemm(A, B, C, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int]):
    acc = ct.full((TM, TN), 0, dtype=ct.float32)
    for k in range(ct.num_tiles(A, 1, (TM, TK))):
        a, b = _tile_product(A, B, ct.bid(0), ct.bid(1), k, TM, TN, TK)
        acc = _step(acc, a, b)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=acc)

@ct.kernel
def scale(x, y, BLOCK: ct.Constant[int]):
    offs = ct.bid(0) * BLOCK + ct.arange(BLOCK, dtype=ct.int32)
    ct.scatter(y, offs, ct.gather(x, offs) * 2)

@ct.kernel
def outer(x, y, z, T: ct.Constant[int]):
    a = ct.load(x, index=(ct.bid(0), 0), shape=(T, T))
    b = ct.load(y, index=(0, ct.bid(0)), shape=(T, T))
    ct.store(z, index=(ct.bid(0), ct.bid(0)), tile=a @ b)

def launch(A, B, C, x, y):
    TM = 16
    TN = 16
    TK = 16
    ct.launch(torch.cuda.current_stream(), (A.shape[0] // TM, B.shape[1] // TN, 1), small_gemm, (A, B, C, TM, TN, TK))
    BLOCK = 256
    ct.launch(torch.cuda.current_stream(), (x.numel() // BLOCK, 1, 1), scale, (x, y, BLOCK))
'''


def test_a_matrix_product_in_a_helper_or_an_operator_counts_for_its_kernel_only():
    assert source_facts(GEMM_IN_HELPER, "small_gemm") == {"ir.kernel_hints_set": False, "ir.mma_ops": 1,
                                                          "ir.max_tile_elems": 256}
    assert source_facts(GEMM_IN_HELPER, "outer")["ir.mma_ops"] == 1
    assert source_facts(GEMM_IN_HELPER, "scale")["ir.mma_ops"] == 0
    d = ApplicabilityDiagnoser().diagnose(DiagnoseContext(path=Path("k.py"), kernel="small_gemm", source=GEMM_IN_HELPER))
    assert d.bottleneck == "compute-bound"
    # small 16 x 16 tiles, but a GEMM: the small-tile rule is for streaming kernels
    g = _rec(GEMM_IN_HELPER, "small_gemm", "G")
    assert not any("every tile is small" in e for e in g.evidence)
    # the elementwise kernel beside it is memory-bound: the GEMM's product is not its own
    d = ApplicabilityDiagnoser().diagnose(DiagnoseContext(path=Path("k.py"), kernel="scale", source=GEMM_IN_HELPER))
    assert d.bottleneck == "memory-bound"
    assert _order(GEMM_IN_HELPER, "scale").index("G") < _order(GEMM_IN_HELPER, "scale").index("C")
