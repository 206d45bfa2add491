"""Workloads for TileGym ops, called through ``tilegym.ops`` with ``backend="cutile"``.

``tilegym`` is imported only when a workload runs.  TileGym's dispatcher silently falls back
to the PyTorch implementation when an op has no cuTile one (it only logs a warning), which
would time cuBLAS and call it cuTile; so every run first checks that a cuTile
implementation is registered and refuses otherwise.

Ops allocate their outputs themselves, so these workloads check the returned tensor
(``outputs = ()``); the harness poisons the allocator's free blocks with NaN before a check
run so that an op that leaves elements unwritten still fails.

The static cost model is not wired for TileGym kernels (their modules use package-relative
imports, which the file-based AOT capture cannot load): ``capture`` returns None and the
roofline says so.
"""
from __future__ import annotations

import functools

from ..workload import (Workload, WorkloadConfig, WorkloadError, exact_matmul, gemm_bytes, gemm_flops, instantiate,
                        seeded_randn)


def _bytes_of(dtype: str) -> int:
    return {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "f8e4m3": 1, "f8e5m2": 1}[dtype]


@functools.cache
def _tilegym_status() -> str | None:
    try:
        import tilegym  # noqa: F401
        from tilegym import ops  # noqa: F401
    except ImportError as e:
        return f"tilegym is not installed ({e}); pip install tilegym"
    except Exception as e:  # tilegym raises at import without a GPU / with a broken cuTile
        return f"importing tilegym failed: {type(e).__name__}: {e}"
    return None


def has_cutile_impl(op: str) -> bool:
    """Whether tilegym's dispatcher has a cuTile backend for ``op`` (older tilegyms: its registry)."""
    from tilegym.backend import dispatcher
    fn = getattr(dispatcher, "has_backend_impl", None)
    if fn is not None:
        return bool(fn(op, "cutile"))
    return "cutile" in getattr(dispatcher, "_REGISTRY", {}).get(op, {})


def cutile_impl_params(op: str) -> set[str] | None:
    """Parameter names of the registered cuTile implementation (None if unknown).

    TileGym's implementations take ``**kwargs`` and ignore unknown keywords, so a keyword
    renamed between releases (rms_norm: ``static_persistent=`` -> ``mode=``) would silently
    select another kernel; the workloads look the real parameters up instead.
    """
    import inspect
    from tilegym.backend import dispatcher
    impl = getattr(dispatcher, "_REGISTRY", {}).get(op, {}).get("cutile")
    if impl is None:
        return None
    try:
        return set(inspect.signature(impl).parameters)
    except (TypeError, ValueError):
        return None


class _TileGymOp(Workload):
    op = ""
    outputs = ()

    def available(self) -> str | None:
        why = _tilegym_status()
        if why:
            return why
        if not has_cutile_impl(self.op):
            return f"tilegym has no cuTile implementation registered for '{self.op}'"
        return None

    def _fn(self):
        why = self.available()
        if why:
            raise WorkloadError(f"{self.name}: {why}")
        from tilegym import ops
        return getattr(ops, self.op)


class Softmax(_TileGymOp):
    """``tilegym.ops.softmax``: TMA, non-TMA and chunked (three-pass) kernels."""
    op = "softmax"
    kernel_name = "_softmax_kernel"
    description = "tilegym.ops.softmax (row softmax over the last dim)"
    configs = [
        WorkloadConfig("4096x4096-f16-tma", {"M": 4096, "N": 4096, "dtype": "f16", "use_tma": True}),
        WorkloadConfig("4096x4096-f16", {"M": 4096, "N": 4096, "dtype": "f16", "use_tma": False}),
        WorkloadConfig("16384x1024-bf16-tma", {"M": 16384, "N": 1024, "dtype": "bf16", "use_tma": True}),
        # the three-pass kernel (_softmax_kernel_chunked); at N <= 8192 its chunk loops run once
        WorkloadConfig("4096x4096-f16-chunked", {"M": 4096, "N": 4096, "dtype": "f16", "use_tma": False,
                                                 "use_chunked": True}),
    ]

    def make_inputs(self, cfg, seed, device="cuda"):
        """A seeded row-major x; the kernel choice (TMA, chunked) rides along as ``_`` keys."""
        return {"x": seeded_randn((cfg["M"], cfg["N"]), cfg["dtype"], seed, device), "_use_tma": cfg["use_tma"],
                "_use_chunked": cfg.get("use_chunked", False)}

    def run(self, inputs):
        """tilegym's softmax on the cuTile backend with the configuration's kernel choice."""
        extra = {"use_chunked": True} if inputs.get("_use_chunked") else {}
        return self._fn()(inputs["x"], use_tma=inputs["_use_tma"], backend="cutile", **extra)

    def reference(self, inputs):
        """torch's softmax over the last dim, in f64."""
        import torch
        return torch.softmax(inputs["x"].double(), dim=-1)

    def flops(self, cfg):
        """Five per element, as the example softmax."""
        return 5.0 * cfg["M"] * cfg["N"]

    def bytes(self, cfg):
        """x read once, y written once."""
        return 2.0 * cfg["M"] * cfg["N"] * _bytes_of(cfg["dtype"])


class RMSNorm(_TileGymOp):
    """``tilegym.ops.rms_norm``: the persistent TMA kernel or one row per block."""
    op = "rms_norm"
    kernel_name = "rms_norm_kernel"
    description = "tilegym.ops.rms_norm (y = x * rsqrt(mean(x^2) + eps) * w)"
    eps = 1e-6
    # mode "static_persistent": the persistent TMA kernel; "multi_wave": one row per block
    # (``static_persistent=False`` in older TileGym, ``mode="multi_wave_reload"`` in newer)
    configs = [
        WorkloadConfig("16384x4096-bf16-persistent", {"M": 16384, "N": 4096, "dtype": "bf16",
                                                      "mode": "static_persistent"}),
        WorkloadConfig("16384x4096-bf16-multiwave", {"M": 16384, "N": 4096, "dtype": "bf16",
                                                     "mode": "multi_wave"}),
        # shapes of TileGym's own tests/ops/test_rms_norm.py::test_perf (m=262144, n=1024, f16)
        WorkloadConfig("262144x1024-f16-persistent", {"M": 262144, "N": 1024, "dtype": "f16",
                                                      "mode": "static_persistent"}),
        WorkloadConfig("262144x1024-f16-multiwave", {"M": 262144, "N": 1024, "dtype": "f16",
                                                     "mode": "multi_wave"}),
    ]

    def make_inputs(self, cfg, seed, device="cuda"):
        """Seeded x (M x N) and w (N); the mode rides along as ``_mode``."""
        m, n, dt = cfg["M"], cfg["N"], cfg["dtype"]
        return {"x": seeded_randn((m, n), dt, seed, device), "w": seeded_randn((n,), dt, seed + 1, device),
                "_mode": cfg["mode"]}

    def _mode_kwargs(self, mode: str) -> dict:
        params = cutile_impl_params(self.op) or set()
        if "mode" in params:
            return {"mode": "static_persistent" if mode == "static_persistent" else "multi_wave_reload"}
        if "static_persistent" in params:
            return {"static_persistent": mode == "static_persistent"}
        raise WorkloadError(f"{self.name}: this tilegym's rms_norm takes neither mode= nor static_persistent=")

    def run(self, inputs):
        """tilegym's rms_norm on the cuTile backend, the mode spelt as this tilegym takes it."""
        fn = self._fn()
        return fn(inputs["x"], None, inputs["w"], self.eps, backend="cutile", **self._mode_kwargs(inputs["_mode"]))

    def reference(self, inputs):
        """x * rsqrt(mean(x²) + eps) * w, in f64."""
        import torch
        x, w = inputs["x"].double(), inputs["w"].double()
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + self.eps) * w

    def flops(self, cfg):
        """Four per element (see the comment)."""
        return 4.0 * cfg["M"] * cfg["N"]   # square, sum, scale by rsqrt, scale by w

    def bytes(self, cfg):
        """x read and y written once each, w once."""
        # read x and w, write y; a kernel that also stores rstd (4 B per row) moves < 0.1 % more
        m, n, e = cfg["M"], cfg["N"], _bytes_of(cfg["dtype"])
        return 2.0 * m * n * e + n * e


class Matmul(_TileGymOp):
    """``tilegym.ops.matmul``, plain or static-persistent."""
    op = "matmul"
    kernel_name = "matmul_kernel"
    description = "tilegym.ops.matmul (autotuned at the first call per shape)"
    configs = [
        WorkloadConfig("4096-f16", {"M": 4096, "N": 4096, "K": 4096, "dtype": "f16", "static_persistent": False}),
        WorkloadConfig("4096-f16-persistent", {"M": 4096, "N": 4096, "K": 4096, "dtype": "f16",
                                               "static_persistent": True}),
        WorkloadConfig("8192-bf16", {"M": 8192, "N": 8192, "K": 8192, "dtype": "bf16", "static_persistent": False}),
    ]

    def make_inputs(self, cfg, seed, device="cuda"):
        """Seeded A and B scaled by K^-1/4, so that C's entries stay near unit size."""
        m, n, k, dt = cfg["M"], cfg["N"], cfg["K"], cfg["dtype"]
        s = k ** -0.25
        return {"a": seeded_randn((m, k), dt, seed, device, s), "b": seeded_randn((k, n), dt, seed + 1, device, s),
                "_static_persistent": cfg["static_persistent"]}

    def run(self, inputs):
        """tilegym's matmul on the cuTile backend; a tilegym without ``static_persistent=`` is refused."""
        fn = self._fn()
        params = cutile_impl_params(self.op)
        if params is not None and "static_persistent" not in params and "kwargs" in params:
            raise WorkloadError(f"{self.name}: this tilegym's matmul has no static_persistent= parameter")
        return fn(inputs["a"], inputs["b"], static_persistent=inputs["_static_persistent"], backend="cutile")

    def reference(self, inputs):
        """A @ B in f32 without TF32."""
        with exact_matmul():
            return inputs["a"].float() @ inputs["b"].float()

    def flops(self, cfg):
        """2·M·N·K."""
        return gemm_flops(cfg)

    def bytes(self, cfg):
        """A and B read once, C written once."""
        return gemm_bytes(cfg, _bytes_of(cfg["dtype"]))

    def compute_unit(self, cfg):
        """Tensor cores at the operand dtype."""
        return (cfg["dtype"], "tensor")


class SiluAndMul(_TileGymOp):
    """``tilegym.ops.silu_and_mul`` over rows of 2·H."""
    op = "silu_and_mul"
    kernel_name = "silu_and_mul"
    description = "tilegym.ops.silu_and_mul (SiLU(x[..., :H]) * x[..., H:])"
    configs = [
        WorkloadConfig("8192x2x8192-bf16", {"M": 8192, "H": 8192, "dtype": "bf16"}),
        # tests/ops/test_silu_and_mul.py::test_perf: input (64, 1024, 2 x 4096) f16, flattened to rows
        WorkloadConfig("65536x2x4096-f16", {"M": 65536, "H": 4096, "dtype": "f16"}),
    ]

    def make_inputs(self, cfg, seed, device="cuda"):
        """A seeded x of M rows of 2·H."""
        return {"x": seeded_randn((cfg["M"], 2 * cfg["H"]), cfg["dtype"], seed, device)}

    def run(self, inputs):
        """tilegym's silu_and_mul on the cuTile backend."""
        return self._fn()(inputs["x"], backend="cutile")

    def reference(self, inputs):
        """SiLU of the first half times the second half, in f64."""
        import torch
        x = inputs["x"].double()
        h = x.shape[-1] // 2
        return torch.nn.functional.silu(x[..., :h]) * x[..., h:]

    def flops(self, cfg):
        """Six per output element (see the comment)."""
        return 6.0 * cfg["M"] * cfg["H"]   # sigmoid = neg, exp, add, div; then two muls

    def bytes(self, cfg):
        """x (2·H per row) read once, y (H per row) written once."""
        return 3.0 * cfg["M"] * cfg["H"] * _bytes_of(cfg["dtype"])


class LayerNormLegacy(_TileGymOp):
    """``tilegym.ops.layer_norm_legacy``: one row per block, three gather passes over the row."""
    op = "layer_norm_legacy"
    kernel_name = "_layer_norm_fwd_kernel"
    description = "tilegym.ops.layer_norm_legacy (one row per block, three gather passes over the row)"
    eps = 1e-5
    configs = [
        WorkloadConfig("16384x4096-bf16", {"M": 16384, "N": 4096, "dtype": "bf16"}),
        # tests/ops/test_layer_norm_legacy.py::test_perf's widest shape (m=4096, n=16384, f16)
        WorkloadConfig("4096x16384-f16", {"M": 4096, "N": 16384, "dtype": "f16"}),
    ]

    def make_inputs(self, cfg, seed, device="cuda"):
        """Seeded x (M x N), weight and bias (N)."""
        m, n, dt = cfg["M"], cfg["N"], cfg["dtype"]
        return {"x": seeded_randn((m, n), dt, seed, device), "w": seeded_randn((n,), dt, seed + 1, device),
                "b": seeded_randn((n,), dt, seed + 2, device)}

    def run(self, inputs):
        """tilegym's layer_norm_legacy on the cuTile backend over the last dim."""
        x = inputs["x"]
        return self._fn()(x, (x.shape[-1],), inputs["w"], inputs["b"], self.eps, backend="cutile")

    def reference(self, inputs):
        """torch's layer_norm in f64."""
        import torch
        x = inputs["x"].double()
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), inputs["w"].double(), inputs["b"].double(),
                                              self.eps)

    def flops(self, cfg):
        """Eight per element (see the comment)."""
        return 8.0 * cfg["M"] * cfg["N"]   # mean: add; variance: sub, mul, add; normalise: sub, mul, mul, add

    def bytes(self, cfg):
        """The op's traffic: x read and y written once, w and b, mean and rstd per row."""
        # read x, write y, read w and b, write mean and rstd (f32 per row); the kernel's second and
        # third reads of the row are its inefficiency, not the op's traffic
        m, n, e = cfg["M"], cfg["N"], _bytes_of(cfg["dtype"])
        return 2.0 * m * n * e + 2.0 * n * e + 8.0 * m


_CLASSES = {"softmax": Softmax, "rms_norm": RMSNorm, "matmul": Matmul, "silu_and_mul": SiluAndMul,
            "layer_norm_legacy": LayerNormLegacy}


def make(op: str, **kwargs) -> Workload:
    """The TileGym workload of ``op`` built with ``kwargs``, named ``tilegym:<op>``."""
    wl = instantiate(_CLASSES[op], f"tilegym:{op}", kwargs)
    wl.name = f"tilegym:{op}"
    return wl
