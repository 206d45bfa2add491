"""param_access: which parameters a kernel body only loads, only stores, or both, in the forms real libraries
write (keyword arrays, gathers and scatters over computed offsets, shape-only uses, helpers, atomics)."""
from __future__ import annotations

import textwrap

from cutile_diag.source.analysis import param_access
from cutile_diag.source.model import load

SRC = textwrap.dedent('''
    import cuda.tile as ct
    from cuda.tile import store as put


    def _helper(a, i):
        return ct.load(a, index=(i,), shape=(16,))


    @ct.kernel
    def bwd(dx, dy, x, N: ct.Constant[int], BLOCK: ct.Constant[int]):
        bid = ct.bid(0)
        offs = bid * BLOCK + ct.arange(BLOCK, dtype=ct.int32)
        a = ct.gather(x, (offs % N,))
        b = ct.gather(array=x, indices=(offs % N + N,))
        g = ct.gather(dy, (offs,))
        ct.scatter(dx, (offs,), a * g)
        ct.scatter(dx, (offs + N,), b * g)


    @ct.kernel
    def mixed(X, Y, Acc, Cnt, W, Z, T: ct.Constant[int]):
        bid = ct.bid(0)
        n = ct.num_tiles(X, axis=0, shape=(T,))
        t = ct.load(X, index=(bid,), shape=(T,)) + X.shape[0] + n
        put(Y, index=(bid,), tile=t)
        ct.store(Acc, index=(bid,), tile=ct.load(Acc, index=(bid,), shape=(T,)) + t)
        ct.atomic_add(Cnt, (bid,), 1)
        w = _helper(W, bid)
        ct.store(Y, index=(bid,), tile=w)
''')


def test_a_backward_kernel_writes_only_its_gradient():
    assert param_access(load(SRC, "bwd")) == {"dx": "write", "dy": "read", "x": "read", "N": "readwrite",
                                              "BLOCK": "readwrite"}


def test_shape_uses_move_nothing_and_what_the_scan_cannot_follow_counts_as_both():
    acc = param_access(load(SRC, "mixed"))
    assert acc["X"] == "read"                 # X.shape and ct.num_tiles(X, ...) are not uses
    assert acc["Y"] == "write"                # a ct.store imported under another name is still a store
    assert acc["Acc"] == "readwrite"          # loaded and stored
    assert acc["Cnt"] == "readwrite"          # an atomic
    assert acc["W"] == "readwrite"            # passed to a helper the scan does not follow
    assert "Z" not in acc                     # never used: the kernel moves none of its bytes
