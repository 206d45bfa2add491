"""Workloads for the shipped example kernels (``cutile_diag/examples``).

Every configuration carries its AOT capture spec (kernel reference, argument specs, the
grid the ``launch`` wrapper uses), so the static cost model can count bytes and FLOPs from
the TileIR without a GPU.  ``source=`` points at a variant of the example module (same
``launch`` signature); the workload then runs and captures that file instead.

FLOP conventions (declared, per run): add/mul = 1, FMA = 2, GEMM = 2·M·N·K, softmax = 5 per
element (max, subtract, exp, sum, divide).  Bytes are the minimum DRAM traffic: every input
read once and every output written once.
"""
from __future__ import annotations

import functools
from pathlib import Path

from ..examples import EXAMPLES_DIR
from ..workload import (CaptureSpec, Tolerance, Workload, WorkloadConfig, WorkloadError, instantiate,
                        exact_matmul, gemm_bytes, gemm_flops, seeded_randn, torch_dtype)
from ..capture.loader import import_file


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _bits(dtype: str) -> int:
    return {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}[dtype]


class _Example(Workload):
    module_file = ""

    def __init__(self, source: str | None = None):
        self.source = Path(source).resolve() if source else EXAMPLES_DIR / self.module_file
        if not self.source.exists():
            raise WorkloadError(f"{self.source}: no such file (source= of {self.name})")

    @functools.cached_property
    def module(self):
        mod = import_file(self.source)
        if not hasattr(mod, "launch"):
            raise WorkloadError(f"{self.source} has no launch(...) wrapper")
        return mod

    def kernel_ref(self, attr: str) -> str:
        return f"{self.source}::{attr}"

    def _tensors(self, cfg, seed, device) -> dict:
        raise NotImplementedError

    def make_inputs(self, cfg, seed, device="cuda"):
        d = self._tensors(cfg, seed, device)
        # launch parameters ride along in the inputs dict ('_' keys are opaque to the harness),
        # so that run(inputs) needs nothing else
        if "tiles" in cfg.params:
            d["_tiles"] = tuple(cfg["tiles"])
        if "tile" in cfg.params:
            d["_tile"] = cfg["tile"]
        if "group_size_m" in cfg.params:
            d["_group_size_m"] = cfg["group_size_m"]
        return d


# ---------------------------------------------------------------------------------------

class VectorAdd(_Example):
    """``examples/vector_add.py``: c = a + b, one tile per block."""
    module_file = "vector_add.py"
    outputs = ("c",)
    description = "c = a + b over 1-D f32 arrays, one tile per block"
    persistent = False
    kernel_name = "vector_add"
    configs = [
        WorkloadConfig("1M-f32", {"n": 1 << 20, "dtype": "f32", "tile": 1024}),
        WorkloadConfig("16M-f32", {"n": 1 << 24, "dtype": "f32", "tile": 1024}),
        WorkloadConfig("64M-f32", {"n": 1 << 26, "dtype": "f32", "tile": 1024}),
    ]

    def _tensors(self, cfg, seed, device):
        import torch
        n, dt = cfg["n"], cfg["dtype"]
        return {"a": seeded_randn((n,), dt, seed, device), "b": seeded_randn((n,), dt, seed + 1, device),
                "c": torch.empty(n, dtype=torch_dtype(dt), device=device)}

    def run(self, inputs):
        """Launch through the module's wrapper at its own tile default (see the comment)."""
        # the wrapper's own tile default: a tile-size sweep edits it, and must be measured
        return self.module.launch(inputs["a"], inputs["b"], inputs["c"], persistent=self.persistent)

    def reference(self, inputs):
        """a + b in f64."""
        return {"c": inputs["a"].double() + inputs["b"].double()}

    def flops(self, cfg):
        """One add per element."""
        return float(cfg["n"])

    def bytes(self, cfg):
        """Two inputs read and one output written, once each."""
        return 3.0 * cfg["n"] * _bits(cfg["dtype"]) / 8

    def capture(self, cfg, num_sms):
        """The wrapper's grid: one block per tile, or at most 4 blocks per SM when persistent."""
        n, tile, dt = cfg["n"], cfg["tile"], cfg["dtype"]
        tiles = _cdiv(n, tile)
        grid = (min(tiles, num_sms * 4),) if self.persistent else (tiles,)
        arr = f"{dt}[{n}]"
        return CaptureSpec(self.kernel_ref(self.kernel_name), {"a": arr, "b": arr, "c": arr, "TILE": tile}, grid)


class VectorAddPersistent(VectorAdd):
    """The grid-stride variant (``vector_add_persistent``) over a fixed grid."""
    persistent = True
    kernel_name = "vector_add_persistent"
    description = "c = a + b, grid-stride loop over a fixed grid of 4 blocks per SM"


class Matmul(_Example):
    """``examples/matmul.py``: the naive GEMM on a 2-D grid of output tiles."""
    module_file = "matmul.py"
    outputs = ("C",)
    kernel_name = "matmul"
    tuned = False
    description = "C = A @ B, 2-D grid of output tiles, K loop over ct.mma (f32 accumulator)"
    configs = [
        WorkloadConfig("2048-f16", {"M": 2048, "N": 2048, "K": 2048, "dtype": "f16", "tiles": (128, 128, 64)}),
        WorkloadConfig("4096-f16", {"M": 4096, "N": 4096, "K": 4096, "dtype": "f16", "tiles": (128, 128, 64)}),
        WorkloadConfig("8192-f16", {"M": 8192, "N": 8192, "K": 8192, "dtype": "f16", "tiles": (128, 128, 64)}),
    ]

    def _tensors(self, cfg, seed, device):
        import torch
        m, n, k, dt = cfg["M"], cfg["N"], cfg["K"], cfg["dtype"]
        # scaled so that C ~ N(0, 1): tolerances then mean the same at every K
        s = k ** -0.25
        return {"A": seeded_randn((m, k), dt, seed, device, s), "B": seeded_randn((k, n), dt, seed + 1, device, s),
                "C": torch.empty(m, n, dtype=torch_dtype(dt), device=device)}

    def run(self, inputs):
        """Launch with the configuration's tiles (and GROUP_SIZE_M for the tuned kernel)."""
        tm, tn, tk = inputs["_tiles"]
        return self.module.launch(inputs["A"], inputs["B"], inputs["C"], tm, tn, tk, tuned=self.tuned,
                                  group_size_m=inputs.get("_group_size_m", 8))

    def reference(self, inputs):
        """A @ B one precision up (f64 for f32 inputs, else f32), without TF32."""
        import torch
        a, b = inputs["A"], inputs["B"]
        hi = torch.float64 if a.dtype == torch.float32 else torch.float32
        with exact_matmul():
            return {"C": a.to(hi) @ b.to(hi)}

    def flops(self, cfg):
        """2·M·N·K."""
        return gemm_flops(cfg)

    def bytes(self, cfg):
        """A and B read once, C written once."""
        return gemm_bytes(cfg, _bits(cfg["dtype"]) / 8)

    def compute_unit(self, cfg):
        """Tensor cores at the operand dtype."""
        return (cfg["dtype"], "tensor")

    def _grid(self, cfg, num_sms):
        tm, tn, _ = cfg["tiles"]
        return (_cdiv(cfg["M"], tm), _cdiv(cfg["N"], tn))

    def capture(self, cfg, num_sms):
        """The wrapper's kernel, tiles and grid at this configuration."""
        m, n, k, dt = cfg["M"], cfg["N"], cfg["K"], cfg["dtype"]
        tm, tn, tk = cfg["tiles"]
        args = {"A": f"{dt}[{m},{k}]", "B": f"{dt}[{k},{n}]", "C": f"{dt}[{m},{n}]", "TM": tm, "TN": tn, "TK": tk}
        if self.tuned:
            args["GROUP_SIZE_M"] = cfg.get("group_size_m", 8)
        return CaptureSpec(self.kernel_ref(self.kernel_name), args, self._grid(cfg, num_sms))


class MatmulF32(Matmul):
    """The naive GEMM on f32 operands (``matmul_f32``): FMA on CUDA cores, not tensor cores."""
    kernel_name = "matmul_f32"
    description = "the naive GEMM on f32 operands: no TF32 guard, so ct.mma falls back to FMA"
    configs = [
        WorkloadConfig("1024-f32", {"M": 1024, "N": 1024, "K": 1024, "dtype": "f32", "tiles": (64, 64, 32)}),
        WorkloadConfig("2048-f32", {"M": 2048, "N": 2048, "K": 2048, "dtype": "f32", "tiles": (64, 64, 32)}),
    ]
    # f32 accumulation over K terms against an f64 reference: allow sqrt(K)-scale rounding
    tolerances = {"f32": Tolerance(1e-4, 1e-5)}

    def compute_unit(self, cfg):
        """f32 on CUDA cores: without a TF32 guard ``ct.mma`` falls back to FMA."""
        return ("f32", "cuda")


class MatmulTuned(Matmul):
    """``matmul_tuned``: the playbook applied (swizzle, persistent grid, latency hints)."""
    kernel_name = "matmul_tuned"
    tuned = True
    description = "GEMM with TF32 guard, GROUP_SIZE_M swizzle, persistent grid and latency hints"
    configs = [
        WorkloadConfig("4096-f16", {"M": 4096, "N": 4096, "K": 4096, "dtype": "f16", "tiles": (128, 128, 64),
                                    "group_size_m": 8}),
        WorkloadConfig("8192-f16", {"M": 8192, "N": 8192, "K": 8192, "dtype": "f16", "tiles": (128, 128, 64),
                                    "group_size_m": 8}),
    ]

    def _grid(self, cfg, num_sms):
        tm, tn, _ = cfg["tiles"]
        return (min(num_sms, _cdiv(cfg["M"], tm) * _cdiv(cfg["N"], tn)),)


class Softmax(_Example):
    """``examples/softmax.py``: row softmax, one row per block."""
    module_file = "softmax.py"
    outputs = ("Y",)
    kernel_name = "softmax"
    description = "row softmax, one row per block, f32 math"
    configs = [
        WorkloadConfig("32768x1024-f16", {"M": 32768, "N": 1024, "dtype": "f16"}),
        WorkloadConfig("16384x2048-f16", {"M": 16384, "N": 2048, "dtype": "f16"}),
    ]

    def _tensors(self, cfg, seed, device):
        import torch
        m, n, dt = cfg["M"], cfg["N"], cfg["dtype"]
        return {"X": seeded_randn((m, n), dt, seed, device), "Y": torch.empty(m, n, dtype=torch_dtype(dt), device=device)}

    def run(self, inputs):
        """Launch at the wrapper's tile (the row length rounded up to a power of two)."""
        return self.module.launch(inputs["X"], inputs["Y"])

    def reference(self, inputs):
        """torch's softmax over rows, in f64."""
        import torch
        return {"Y": torch.softmax(inputs["X"].double(), dim=1)}

    def flops(self, cfg):
        """Five per element (see the module docstring)."""
        return 5.0 * cfg["M"] * cfg["N"]

    def bytes(self, cfg):
        """X read once, Y written once."""
        return 2.0 * cfg["M"] * cfg["N"] * _bits(cfg["dtype"]) / 8

    def capture(self, cfg, num_sms):
        """One block per row, TILE_N the row length rounded up to a power of two."""
        m, n, dt = cfg["M"], cfg["N"], cfg["dtype"]
        tile_n = 1 << (n - 1).bit_length()
        return CaptureSpec(self.kernel_ref("softmax"), {"X": f"{dt}[{m},{n}]", "Y": f"{dt}[{m},{n}]",
                                                        "TILE_N": tile_n}, (m,))


class GatherScale(_Example):
    """``examples/gather_scale.py``: y = 2x + 1 through per-element gather/scatter."""
    module_file = "gather_scale.py"
    outputs = ("y",)
    kernel_name = "gather_scale"
    description = "y = 2x + 1 through per-element gather/scatter"
    configs = [
        WorkloadConfig("16M-f32", {"n": 1 << 24, "dtype": "f32", "tile": 1024}),
        WorkloadConfig("64M-f32", {"n": 1 << 26, "dtype": "f32", "tile": 1024}),
    ]

    def _tensors(self, cfg, seed, device):
        import torch
        n, dt = cfg["n"], cfg["dtype"]
        return {"x": seeded_randn((n,), dt, seed, device), "y": torch.empty(n, dtype=torch_dtype(dt), device=device)}

    def run(self, inputs):
        """Launch at the wrapper's tile default."""
        return self.module.launch(inputs["x"], inputs["y"])   # wrapper default tile (see VectorAdd.run)

    def reference(self, inputs):
        """2x + 1 in f64."""
        return {"y": inputs["x"].double() * 2.0 + 1.0}

    def flops(self, cfg):
        """A multiply and an add per element."""
        return 2.0 * cfg["n"]

    def bytes(self, cfg):
        """x read once, y written once."""
        return 2.0 * cfg["n"] * _bits(cfg["dtype"]) / 8

    def capture(self, cfg, num_sms):
        """One block per tile of ``tile`` elements."""
        n, tile, dt = cfg["n"], cfg["tile"], cfg["dtype"]
        return CaptureSpec(self.kernel_ref("gather_scale"), {"x": f"{dt}[{n}]", "y": f"{dt}[{n}]", "TILE": tile},
                           (_cdiv(n, tile),))


class RowNorm(_Example):
    """No ``capture()``: the spec comes from intercepting ``run`` (CPU) or from a run (GPU)."""
    module_file = "row_norm.py"
    outputs = ("y", "mean", "rstd")
    kernel_name = "row_norm"
    description = "two-pass row normalisation through 2-D gathers/scatters (one row per block)"
    configs = [
        WorkloadConfig("4096x4000-f16", {"M": 4096, "N": 4000, "dtype": "f16"}),
        WorkloadConfig("16384x1000-f16", {"M": 16384, "N": 1000, "dtype": "f16"}),
    ]

    def _tensors(self, cfg, seed, device):
        import torch
        m, n, dt = cfg["M"], cfg["N"], cfg["dtype"]
        return {"x": seeded_randn((m, n), dt, seed, device, scale=2.0) + 0.5,
                "y": torch.empty(m, n, dtype=torch_dtype(dt), device=device),
                "mean": torch.empty(m, dtype=torch.float32, device=device),
                "rstd": torch.empty(m, dtype=torch.float32, device=device)}

    def run(self, inputs):
        """Launch with the wrapper's default eps and tile."""
        return self.module.launch(inputs["x"], inputs["y"], inputs["mean"], inputs["rstd"])

    def reference(self, inputs):
        """Normalised rows, their mean and 1/std (eps 1e-5, biased variance), in f64."""
        import torch
        x = inputs["x"].double()
        mean = x.mean(dim=1)
        rstd = torch.rsqrt(x.var(dim=1, unbiased=False) + 1e-5)
        return {"y": (x - mean[:, None]) * rstd[:, None], "mean": mean, "rstd": rstd}

    def tolerance(self, cfg, dtype):
        """Looser for 16-bit outputs; f32 allows the one-pass variance's loss."""
        # the one-pass variance (E[x^2] - mean^2) in f32 loses ~1e-4 relative on these rows
        return Tolerance(2e-2, 2e-2) if str(dtype).endswith(("16", "f16")) else Tolerance(1e-3, 1e-3)

    def flops(self, cfg):
        """Seven per element (see the comment)."""
        return 7.0 * cfg["M"] * cfg["N"]      # sum, square, accumulate; subtract, multiply (+ re-read)

    def bytes(self, cfg):
        """x and y once each plus mean and rstd per row."""
        m, n, b = cfg["M"], cfg["N"], _bits(cfg["dtype"]) / 8
        return 2.0 * m * n * b + 8.0 * m      # x once, y once, mean + rstd (the second read of x hits L2 or not)


class RowLse(_Example):
    """No ``capture()``: the spec comes from intercepting ``run`` (CPU) or from a run (GPU)."""
    module_file = "row_lse.py"
    outputs = ("out",)
    kernel_name = "row_lse"
    description = "row-wise log-sum-exp, NEG_INF-padded row load (one row per block)"
    configs = [
        WorkloadConfig("16384x3000-f32", {"M": 16384, "N": 3000, "dtype": "f32"}),
        WorkloadConfig("32768x1000-f32", {"M": 32768, "N": 1000, "dtype": "f32"}),
    ]

    def _tensors(self, cfg, seed, device):
        import torch
        m, n, dt = cfg["M"], cfg["N"], cfg["dtype"]
        return {"x": seeded_randn((m, n), dt, seed, device, scale=3.0),
                "out": torch.empty(m, dtype=torch.float32, device=device)}

    def run(self, inputs):
        """Launch at the wrapper's tile (the row length rounded up to a power of two)."""
        return self.module.launch(inputs["x"], inputs["out"])

    def reference(self, inputs):
        """torch's logsumexp over rows, in f64."""
        import torch
        return {"out": torch.logsumexp(inputs["x"].double(), dim=1)}

    def tolerance(self, cfg, dtype):
        """1e-4 at any dtype: the output is f32 whatever the input."""
        # an f32 exp-sum over thousands of lanes (tree order differs from torch's): ~1e-6 relative
        return Tolerance(1e-4, 1e-4)

    def flops(self, cfg):
        """Four per element: max, subtract, exp, sum."""
        return 4.0 * cfg["M"] * cfg["N"]      # max, subtract, exp, sum

    def bytes(self, cfg):
        """x read once plus one f32 per row written."""
        return cfg["M"] * cfg["N"] * _bits(cfg["dtype"]) / 8 + 4.0 * cfg["M"]


class MultipassNorm(_Example):
    """No ``capture()``: the spec comes from intercepting ``run`` (CPU) or from a run (GPU)."""
    module_file = "multipass_norm.py"
    outputs = ("y",)
    kernel_name = "multipass_norm"
    description = "three-pass layer norm (mean, variance, output) through 2-D gathers (one row per block)"
    configs = [
        WorkloadConfig("16384x4096-f16", {"M": 16384, "N": 4096, "dtype": "f16"}),
        WorkloadConfig("8192x3000-f16", {"M": 8192, "N": 3000, "dtype": "f16"}),
    ]

    def _tensors(self, cfg, seed, device):
        import torch
        m, n, dt = cfg["M"], cfg["N"], cfg["dtype"]
        return {"x": seeded_randn((m, n), dt, seed, device, scale=2.0) + 0.5, "w": seeded_randn((n,), dt, seed + 1, device),
                "y": torch.empty(m, n, dtype=torch_dtype(dt), device=device)}

    def run(self, inputs):
        """Launch with the wrapper's default eps (it picks the tile)."""
        return self.module.launch(inputs["x"], inputs["w"], inputs["y"])

    def reference(self, inputs):
        """Layer norm of the rows scaled by w (eps 1e-5, biased variance), in f64."""
        import torch
        x = inputs["x"].double()
        y = (x - x.mean(dim=1, keepdim=True)) * torch.rsqrt(x.var(dim=1, unbiased=False, keepdim=True) + 1e-5)
        return {"y": y * inputs["w"].double()}

    def tolerance(self, cfg, dtype):
        """Looser for 16-bit inputs."""
        return Tolerance(2e-2, 2e-2) if str(dtype).endswith(("16", "f16")) else Tolerance(1e-3, 1e-3)

    def flops(self, cfg):
        """Eight per element over the three passes (see the comment)."""
        return 8.0 * cfg["M"] * cfg["N"]      # sum; subtract, square, sum; subtract, two multiplies

    def bytes(self, cfg):
        """The minimum traffic: x, y and w once each, not the three passes' re-reads."""
        m, n, b = cfg["M"], cfg["N"], _bits(cfg["dtype"]) / 8
        return 2.0 * m * n * b + n * b        # x once, y once, w once


class PersistentRows(_Example):
    """No ``capture()``: the spec comes from intercepting ``run`` (CPU) or from a run (GPU)."""
    module_file = "persistent_rows.py"
    outputs = ("y",)
    kernel_name = "persistent_rows"
    description = "row softmax, persistent grid of 2 blocks per SM, NEG_INF-padded row tiles"
    configs = [
        WorkloadConfig("65536x1000-f16", {"M": 65536, "N": 1000, "dtype": "f16"}),
        WorkloadConfig("16384x4096-f16", {"M": 16384, "N": 4096, "dtype": "f16"}),
    ]

    def _tensors(self, cfg, seed, device):
        import torch
        m, n, dt = cfg["M"], cfg["N"], cfg["dtype"]
        return {"x": seeded_randn((m, n), dt, seed, device, scale=3.0),
                "y": torch.empty(m, n, dtype=torch_dtype(dt), device=device)}

    def run(self, inputs):
        """Launch with the wrapper's grid (2 blocks per SM)."""
        return self.module.launch(inputs["x"], inputs["y"])

    def reference(self, inputs):
        """torch's softmax over rows, in f64."""
        import torch
        return {"y": torch.softmax(inputs["x"].double(), dim=1)}

    def tolerance(self, cfg, dtype):
        """Looser for 16-bit inputs."""
        return Tolerance(1e-2, 1e-3) if str(dtype).endswith(("16", "f16")) else Tolerance(1e-4, 1e-5)

    def flops(self, cfg):
        """Five per element, as the softmax example."""
        return 5.0 * cfg["M"] * cfg["N"]      # max, subtract, exp, sum, divide

    def bytes(self, cfg):
        """x read once, y written once."""
        return 2.0 * cfg["M"] * cfg["N"] * _bits(cfg["dtype"]) / 8


_CLASSES = {
    "vector_add": VectorAdd, "vector_add_persistent": VectorAddPersistent, "matmul": Matmul,
    "matmul_f32": MatmulF32, "matmul_tuned": MatmulTuned, "softmax": Softmax, "gather_scale": GatherScale,
    "row_norm": RowNorm, "row_lse": RowLse, "multipass_norm": MultipassNorm, "persistent_rows": PersistentRows,
}


def make(name: str, **kwargs) -> Workload:
    """The example workload ``name`` built with ``kwargs`` (e.g. ``source=``), named ``examples:<name>``."""
    wl = instantiate(_CLASSES[name], f"examples:{name}", kwargs)
    wl.name = f"examples:{name}"
    return wl
