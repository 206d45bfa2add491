"""Kernels the diagnosis tests capture ahead of time (never launched).

* ``matmul_tuned_no_latency`` — an f16 GEMM that already applies the playbook (persistent
  grid-stride loop, GROUP_SIZE_M swizzle, a pinned occupancy, TMA loads) except latency hints:
  the one concrete finding left is E.
* ``copy_f_order`` — a column-major (``order="F"``) tile load whose contiguous dimension is
  4 f16 = 8 bytes: tileiras refuses TMA ("leading tile dimension not 16-byte aligned").
"""
import cuda.tile as ct


@ct.kernel(occupancy=1)
def matmul_tuned_no_latency(A, B, C, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int],
                            GROUP_SIZE_M: ct.Constant[int]):
    num_m = ct.num_tiles(C, axis=0, shape=(TM, TN))
    num_n = ct.num_tiles(C, axis=1, shape=(TM, TN))
    num_k = ct.num_tiles(A, axis=1, shape=(TM, TK))
    for tile_id in range(ct.bid(0), num_m * num_n, ct.num_blocks(0)):
        group = tile_id // (GROUP_SIZE_M * num_n)
        first_m = group * GROUP_SIZE_M
        group_m = min(num_m - first_m, GROUP_SIZE_M)
        bm = first_m + (tile_id % group_m)
        bn = (tile_id % (GROUP_SIZE_M * num_n)) // group_m
        acc = ct.full((TM, TN), 0, dtype=ct.float32)
        for k in range(num_k):
            a = ct.load(A, index=(bm, k), shape=(TM, TK))
            b = ct.load(B, index=(k, bn), shape=(TK, TN))
            acc = ct.mma(a, b, acc)
        ct.store(C, index=(bm, bn), tile=acc.astype(C.dtype))


@ct.kernel
def copy_f_order(x, y, TM: ct.Constant[int], TN: ct.Constant[int]):
    bm = ct.bid(0)
    bn = ct.bid(1)
    a = ct.load(x, index=(bm, bn), shape=(TM, TN), order="F", padding_mode=ct.PaddingMode.ZERO)
    ct.store(y, index=(bm, bn), tile=a)


_F16 = {"A": "f16[4096,4096]", "B": "f16[4096,4096]", "C": "f16[4096,4096]"}
CAPTURE_SPECS = {
    "matmul_tuned_no_latency": {**_F16, "TM": 128, "TN": 128, "TK": 64, "GROUP_SIZE_M": 8},
    "copy_f_order": {"x": "f16[4096,4096]", "y": "f16[4096,4096]", "TM": 4, "TN": 128},
}
