"""Tiled GEMM, C = A @ B, with a K loop over ``ct.mma`` (f32 accumulator).

``matmul`` is NAIVE on purpose: a 2-D grid of output tiles in row-major block order (no
GROUP_SIZE_M swizzle), one tile per block (not persistent), no latency hints, and no TF32
guard: with f32 inputs (``matmul_f32`` captures it) ``ct.mma`` falls back to FMA.
``matmul_tuned`` applies the playbook: TF32 guard for f32 inputs, GROUP_SIZE_M swizzle,
persistent grid-stride scheduling and a latency hint on the main-loop loads.
"""
import cuda.tile as ct


@ct.kernel
def matmul(A, B, C, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int]):
    bm = ct.bid(0)
    bn = ct.bid(1)
    acc = ct.full((TM, TN), 0, dtype=ct.float32)
    for k in range(ct.num_tiles(A, axis=1, shape=(TM, TK))):
        a = ct.load(A, index=(bm, k), shape=(TM, TK))
        b = ct.load(B, index=(k, bn), shape=(TK, TN))
        acc = ct.mma(a, b, acc)
    ct.store(C, index=(bm, bn), tile=acc.astype(C.dtype))


# The f32 variant is the same Python kernel compiled for f32 operands; it exists as its own
# name so that capture specs and workloads can refer to it.
matmul_f32 = matmul


@ct.kernel
def matmul_tuned(A, B, C, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int],
                 GROUP_SIZE_M: ct.Constant[int]):
    num_m = ct.num_tiles(C, axis=0, shape=(TM, TN))
    num_n = ct.num_tiles(C, axis=1, shape=(TM, TN))
    num_k = ct.num_tiles(A, axis=1, shape=(TM, TK))
    mma_dtype = ct.tfloat32 if A.dtype == ct.float32 else A.dtype
    for tile_id in range(ct.bid(0), num_m * num_n, ct.num_blocks(0)):
        # GROUP_SIZE_M swizzle: walk the output in column-major groups of M tiles so
        # that consecutive blocks share B tiles in L2.
        group = tile_id // (GROUP_SIZE_M * num_n)
        first_m = group * GROUP_SIZE_M
        group_m = min(num_m - first_m, GROUP_SIZE_M)
        bm = first_m + (tile_id % group_m)
        bn = (tile_id % (GROUP_SIZE_M * num_n)) // group_m
        acc = ct.full((TM, TN), 0, dtype=ct.float32)
        for k in range(num_k):
            a = ct.load(A, index=(bm, k), shape=(TM, TK), latency=10).astype(mma_dtype)
            b = ct.load(B, index=(k, bn), shape=(TK, TN), latency=10).astype(mma_dtype)
            acc = ct.mma(a, b, acc)
        ct.store(C, index=(bm, bn), tile=acc.astype(C.dtype))


_F16 = {"A": "f16[4096,4096]", "B": "f16[4096,4096]", "C": "f16[4096,4096]"}
_F32 = {"A": "f32[2048,2048]", "B": "f32[2048,2048]", "C": "f32[2048,2048]"}
CAPTURE_SPECS = {
    "matmul": {**_F16, "TM": 128, "TN": 128, "TK": 64},
    "matmul_f32": {**_F32, "TM": 64, "TN": 64, "TK": 32},
    "matmul_tuned": {**_F16, "TM": 128, "TN": 128, "TK": 64, "GROUP_SIZE_M": 8},
}


def launch(A, B, C, tm=128, tn=128, tk=64, tuned=False, group_size_m=8, stream=None):
    import torch
    stream = stream or torch.cuda.current_stream()
    m, n = C.shape
    if tuned:
        sms = torch.cuda.get_device_properties(A.device).multi_processor_count
        tiles = ct.cdiv(m, tm) * ct.cdiv(n, tn)
        ct.launch(stream, (min(sms, tiles),), matmul_tuned, (A, B, C, tm, tn, tk, group_size_m))
    else:
        ct.launch(stream, (ct.cdiv(m, tm), ct.cdiv(n, tn)), matmul, (A, B, C, tm, tn, tk))
    return C
