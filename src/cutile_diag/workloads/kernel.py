"""A bare ``@ct.kernel`` as a workload: ``FILE.py::KERNEL`` at argument specs, no class to write.

    wl = kernel_workload("ops/softmax.py::softmax_kernel", {"X": "f16[4096,4096]", ...}, grid=None)
    wl.grid, wl.grid_source           # --grid, or the module's launch wrapper with ct.launch intercepted
    wl.static_count()                 # FLOPs/bytes: the static cost model on the kernel's TileIR

Specs are the module's ``CAPTURE_SPECS[kernel]`` with the given ones on top (as for
``capture``); every array must have concrete sizes.  Without ``grid`` the module's launch
wrappers (functions that name the kernel and ``launch``) are called on blank tensors built
from the specs with ``ct.launch`` intercepted (nothing runs; on a CPU the usual torch.cuda
queries answer for an H200 with 132 SMs, on a GPU machine for its own device), with their
boolean switches flipped too (``persistent=True``): the first launch of this kernel with the
same array specs gives the grid, and the values of its runtime scalars.

Inputs on a GPU are fresh: floats ~ N(0, 1), integers and bools zero (a zero index is in
bounds for any gather), scalars the wrapper's values (else 1).  There is no reference, so
no correctness check: the numbers say how fast the kernel moves its bytes and does the FLOPs
its TileIR issues (``counts_source = "static"``), not that it computes the right thing.  Bytes
are the minimum DRAM traffic (``StaticCount.bytes_compulsory``: the issued tile traffic capped
by the arrays' footprint), as a workload declares them, so re-reads the caches absorb do not
push a GEMM above the roof.
"""
from __future__ import annotations

import inspect
import itertools
from typing import Any

from ..capture.spec import spec_hint
from ..errors import UsageError
from ..workload import CaptureSpec, Workload, WorkloadConfig, WorkloadError, torch_dtype
from ..capture.aot import specs_for
from ..capture.launches import cpu_cuda, intercept_launches
from ..capture.loader import load_kernel
from ..capture.spec import ArraySpec, ConstSpec, SHORT, ScalarSpec, bind
from ..roofline.observed import compute_unit_of
from ..roofline.static_cost import static_count

CONFIG = "specs"


def resolve_specs(loaded, given: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(specs, scalar values): CAPTURE_SPECS + given, parsed; concrete array sizes required.  A value
    given for a runtime scalar (``--arg n_cols=4096``) becomes its spec (i32/i64, f32, bool) and its
    value: the measured run passes it, and loops bounded by it can be counted."""
    table = getattr(loaded.module, "CAPTURE_SPECS", None) or {}
    if not given and not table.get(loaded.attr):
        raise UsageError(f"no argument specs for {loaded.attr} (no --arg given and no CAPTURE_SPECS entry)",
                         hint=spec_hint(loaded))
    specs = specs_for(loaded, given)
    consts, scalars = loaded.constant_params(), {}
    for n, s in list(specs.items()):
        if isinstance(s, ConstSpec) and n not in consts and n in loaded.param_names:
            v = s.value
            dt = ("bool_" if isinstance(v, bool) else "float32" if isinstance(v, float)
                  else "int32" if -(1 << 31) <= v < (1 << 31) else "int64")
            specs[n], scalars[n] = ScalarSpec(dt), v
    for n, s in specs.items():
        if isinstance(s, ArraySpec) and not s.concrete:
            raise UsageError(f"--arg {n}={s.text()}: the roofline needs concrete sizes, not symbolic ones",
                             hint=f"e.g. {n}=" + s.text().split("[")[0] + "[" + ",".join(
                                 str(d) if isinstance(d, int) else "4096" for d in s.shape) + "]")
    return specs, scalars


def _blank_tensor(spec, device: str):
    import torch
    dt = torch_dtype(SHORT[spec.dtype]) if spec.dtype != "tfloat32" else torch.float32
    shape = spec.shape if spec.layout == "C" else tuple(reversed(spec.shape))
    t = torch.empty(*shape, dtype=dt, device=device)
    return t if spec.layout == "C" else t.permute(*reversed(range(t.dim())))


def _wrappers(loaded) -> list:
    """Module functions whose code names the kernel and a launch (the usual launch wrapper)."""
    def names(code) -> set[str]:
        out = set(code.co_names)
        for c in code.co_consts:
            if inspect.iscode(c):
                out |= names(c)
        return out
    mod = loaded.module
    found = []
    for v in vars(mod).values():
        if inspect.isfunction(v) and v.__module__ == mod.__name__:
            n = names(v.__code__)
            if loaded.attr in n and "launch" in n:
                found.append(v)
    return found


def _call_args(fn, arrays: dict[str, Any], consts: dict[str, Any]) -> dict[str, Any] | None:
    """Keyword arguments for a wrapper: parameters named like a kernel array or constant get it
    (case-insensitive), the remaining required ones the unused arrays in kernel order (a wrapper
    ``rms_norm(x, weight, eps=...)`` for a kernel ``(X, W, Y, eps, TILE)`` allocates Y itself);
    None when a required parameter is left over."""
    params = [(n, p) for n, p in inspect.signature(fn).parameters.items()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    by_lower = {k.lower(): k for k in arrays}
    lower_consts = {k.lower(): v for k, v in consts.items()}
    kw: dict[str, Any] = {}
    unused = list(arrays)
    for name, _p in params:
        key = name if name in arrays else by_lower.get(name.lower())
        if key is not None and key in unused:
            kw[name] = arrays[key]
            unused.remove(key)
        elif name.lower() in lower_consts:
            kw[name] = lower_consts[name.lower()]
    for name, p in params:
        if name in kw or p.default is not p.empty:
            continue
        if not unused:
            return None
        kw[name] = arrays[unused.pop(0)]
    return kw


def grid_from_wrapper(loaded, specs: dict[str, Any], sm_count: int = 132):
    """(grid, scalar values, wrapper call) from the module's launch wrapper with ``ct.launch`` intercepted
    (on a CPU with the stand-in device of ``sm_count`` SMs, on a GPU machine with its own); None if none fits."""
    import torch
    # on a GPU machine the wrapper's torch.cuda queries (SM count of the tensor's device) need CUDA tensors;
    # they are allocated, never initialised, and nothing is launched
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        arrays = {n: _blank_tensor(s, device) for n, s in specs.items() if isinstance(s, ArraySpec)}
    except Exception:
        return None
    consts = {n: s.value for n, s in specs.items() if isinstance(s, ConstSpec)}
    want = {n: s.text() for n, s in specs.items() if isinstance(s, ArraySpec)}
    for fn in _wrappers(loaded):
        kw = _call_args(fn, arrays, consts)
        if kw is None:
            continue
        for flags in _flag_variants(fn, kw):
            with cpu_cuda(sm_count=sm_count), intercept_launches(execute=False) as recs:
                try:
                    fn(**kw, **flags)
                except Exception:
                    pass           # a wrapper that needs a GPU (or checks results): use what it launched
            for r in recs:
                got = {a.name: a.text() for a in r.args if a.kind == "array"}
                if r.kernel == loaded.function_name and got == want:
                    scalars = {a.name: a.value for a in r.args if a.kind == "scalar"}
                    how = ", ".join(f"{k}={v}" for k, v in flags.items())
                    return tuple(r.grid), scalars, f"{fn.__name__}({how})"
    return None


def _flag_variants(fn, kw: dict[str, Any], limit: int = 4) -> list[dict[str, bool]]:
    """The wrapper's defaults first, then its boolean switches flipped (``persistent=True``,
    ``tuned=True``: wrappers that pick one of several kernels by a flag); at most 2**limit calls."""
    flags = [n for n, p in inspect.signature(fn).parameters.items()
             if n not in kw and isinstance(p.default, bool)][:limit]
    defaults = {n: inspect.signature(fn).parameters[n].default for n in flags}
    out = [{}]
    for combo in itertools.product((False, True), repeat=len(flags)):
        v = {n: d != flip for (n, d), flip in zip(defaults.items(), combo)}
        changed = {n: x for n, x in v.items() if x != defaults[n]}
        if changed:
            out.append(changed)
    return sorted(out, key=len)


class KernelWorkload(Workload):
    """A ``@ct.kernel`` at one set of argument specs (see the module doc)."""

    counts_source = "static"
    repeatable = False              # no reference: the harness skips its post-timing check
    outputs = ()

    def __init__(self, kernel: str, kernel_specs: dict[str, Any], grid: list[int] | None = None,
                 scalars: dict[str, Any] | None = None, grid_source: str = "--grid"):
        self.loaded = load_kernel(kernel)
        self.specs, given_scalars = resolve_specs(self.loaded, kernel_specs)
        self.bound = bind(self.loaded, self.specs)
        self.scalars = {**dict(scalars or {}), **given_scalars}
        self.grid_source = grid_source
        if grid is None:
            got = grid_from_wrapper(self.loaded, self.specs)
            if got is None:
                raise UsageError(f"the launch grid of {self.loaded.attr} is unknown: no launch wrapper in "
                                 f"{self.loaded.path.name} launched it at these specs",
                                 hint="give --grid X[,Y[,Z]]")
            grid, found, wrapper = got
            self.scalars = {**found, **self.scalars}      # the user's values win over the wrapper's
            self.grid_source = f"launch wrapper {wrapper}, nothing launched"
        grid = tuple(int(g) for g in grid)
        if not 1 <= len(grid) <= 3 or any(g <= 0 for g in grid):
            raise UsageError(f"--grid {grid}: 1 to 3 positive sizes")
        self.grid = grid
        self.name = f"{self.loaded.path.name}::{self.loaded.attr}"
        self.kernel_name = self.loaded.function_name
        self.configs = [WorkloadConfig(CONFIG, self.bound.as_dict(), description=f"grid {grid}")]

    # -- the workload protocol ------------------------------------------------------------
    def make_inputs(self, cfg: WorkloadConfig, seed: int, device: str = "cuda") -> dict[str, Any]:
        """Seeded inputs at the bound specs: random floats, zeroed integers (F-layout arrays as
        transposed views), the given scalars (else 1) and the constants."""
        import torch
        g = torch.Generator(device=device)
        g.manual_seed(int(seed))
        out: dict[str, Any] = {}
        for n, s in zip(self.bound.names, self.bound.specs):
            if isinstance(s, ArraySpec):
                dt = torch.float32 if s.dtype == "tfloat32" else torch_dtype(SHORT[s.dtype])
                shape = s.shape if s.layout == "C" else tuple(reversed(s.shape))
                if dt.is_floating_point:
                    t = torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dt)
                else:
                    t = torch.zeros(*shape, device=device, dtype=dt)
                out[n] = t if s.layout == "C" else t.t() if t.dim() == 2 else t.permute(*reversed(range(t.dim())))
            elif isinstance(s, ScalarSpec):
                v = self.scalars.get(n, 1)
                out[n] = float(v) if s.dtype.startswith(("float", "bfloat")) else v
            elif isinstance(s, ConstSpec):
                out[n] = s.value
        return out

    def run(self, inputs: dict[str, Any]) -> Any:
        """One ``ct.launch`` of the kernel at the grid, arguments in parameter order."""
        import cuda.tile as ct
        import torch
        ct.launch(torch.cuda.current_stream(), self.grid, self.loaded.kernel,
                  tuple(inputs[n] for n in self.bound.names))

    def reference(self, inputs):
        """Always raises: a bare kernel has nothing to check against."""
        raise WorkloadError(f"{self.name} is a bare kernel: it has no reference, so no correctness check",
                            hint="wrap it in a Workload with reference() for checked timings")

    def capture(self, cfg: WorkloadConfig, num_sms: int) -> CaptureSpec:
        """The kernel at its bound specs and grid; integer scalars ride along as capture scalars."""
        return CaptureSpec(kernel=f"{self.loaded.path}::{self.loaded.attr}", args=self.bound.as_dict(), grid=self.grid,
                           scalars={k: v for k, v in self.scalars.items() if isinstance(v, int)} or None)

    def static_count(self):
        """The TileIR count of the kernel at its specs (AOT, no GPU)."""
        return static_count(self.capture(self.configs[0], 0))

    def _counted(self, what: str) -> float:
        sc = self.static_count()
        v = sc.bytes_compulsory if what == "bytes" else sc.flops_total
        if v is None:
            open_ = [n for n, sp in zip(self.bound.names, self.bound.specs)
                     if isinstance(sp, ScalarSpec) and n not in self.scalars]
            raise WorkloadError(f"the static count of {self.name} has no {what} total: "
                                + ("; ".join(sc.unknown) or "see the memory ops"),
                                hint=(f"give the runtime scalars their values, e.g. --arg {open_[0]}=4096" if open_
                                      else "a loop with run-time bounds cannot be counted ahead of time"))
        return float(v)

    def flops(self, cfg: WorkloadConfig) -> float:
        """The static count's FLOPs; raises when run-time values leave it open."""
        return self._counted("flops")

    def bytes(self, cfg: WorkloadConfig) -> float:
        """The static count's compulsory bytes; raises when run-time values leave it open."""
        return self._counted("bytes")

    def compute_unit(self, cfg: WorkloadConfig) -> tuple[str, str]:
        """Read from the static count's ops (tensor-core MMA or CUDA cores)."""
        return compute_unit_of(self.static_count())

    def describe(self) -> dict:
        """The workload's description plus grid (and where it came from), scalars and counts' source."""
        d = super().describe()
        d.update({"grid": list(self.grid), "grid_source": self.grid_source, "scalars": self.scalars,
                  "counts_source": "static estimate (TileIR count at these specs)"})
        return d


def kernel_workload(ref: str, given: dict[str, Any] | None = None, grid: list[int] | None = None) -> KernelWorkload:
    """The kernel workload with its reference and the keyword arguments a subprocess needs to rebuild it."""
    wl = KernelWorkload(ref, {k: (v.text() if hasattr(v, "text") else v) for k, v in (given or {}).items()},
                        grid=grid)
    wl.ref = f"{wl.loaded.path}::{wl.loaded.attr}"
    wl.ref_kwargs = {"kernel_specs": wl.bound.as_dict(), "grid": list(wl.grid), "scalars": wl.scalars,
                     "grid_source": wl.grid_source}
    return wl


__all__ = ["KernelWorkload", "kernel_workload", "grid_from_wrapper", "CONFIG"]
