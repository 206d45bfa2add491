"""What a "kernel" is to cutile-diag: a *workload*.

A workload says, for each named configuration (shapes, dtypes), how to build fresh random
inputs, how to run the kernel (usually the op's launch wrapper), what the right answer is
(a higher-precision reference), how many FLOPs and bytes one run needs, which tensors are
its outputs, and how close the answer must be.  The benchmark harness (``cutile_diag.harness``)
times ``run``; the roofline (``cutile_diag.roofline``) turns the time into TB/s, TFLOP/s and a
verdict; the static cost model cross-checks ``flops``/``bytes`` against the TileIR.

Public API::

    class MyOp(Workload):                       # plain Python, in the user's repo
        name = "my_op"
        configs = [WorkloadConfig("4k-f16", {"M": 4096, "N": 4096, "dtype": "f16"})]
        outputs = ("y",)                        # tensors run() writes (poisoned before each check);
                                                # empty -> run()'s return value is the output
        kernel_name = "my_kernel"               # cuTile function name (ncu kernel filter), optional
        def make_inputs(self, cfg, seed, device="cuda") -> dict: ...
        def run(self, inputs): ...
        def reference(self, inputs): ...        # higher precision; same structure as the outputs
        def flops(self, cfg) -> float: ...      # per run
        def bytes(self, cfg) -> float: ...      # minimum DRAM traffic per run (read + write)
        def compute_unit(self, cfg) -> ("f16", "tensor") | ("f32", "cuda") ...  # which roof
        def capture(self, cfg, num_sms) -> CaptureSpec | None   # AOT spec for the static count

    workload(name=..., configs=..., make_inputs=f, run=f, reference=f, flops=f, bytes=f)  # no class
    # resolving a reference is ``cutile_diag.workloads.load_workload`` (the model never imports the resolver)
    wl.config("name") / wl.select(["a", "b"]) -> WorkloadConfig(s)
    wl.tolerance(cfg, dtype) -> Tolerance(rtol, atol)       # per-dtype defaults: TileGym's table
    torch_dtype("bf16") -> torch.bfloat16;  dtype_name(torch.float16) -> "f16"

Errors are ``WorkloadError`` (a ``CutileDiagError``): one line, exit code 2.
"""
from __future__ import annotations

import contextlib

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import CutileDiagError, UsageError


class WorkloadError(CutileDiagError):
    """A workload reference does not resolve, or the workload is incomplete."""


# ---------------------------------------------------------------------------------------
# dtypes and tolerances

_DTYPE_ALIASES = {
    "f16": "float16", "float16": "float16", "half": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "f32": "float32", "float32": "float32", "float": "float32",
    "f64": "float64", "float64": "float64", "double": "float64",
    "f8e4m3": "float8_e4m3fn", "f8e4m3fn": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2",
    "i8": "int8", "int8": "int8", "i16": "int16", "int16": "int16",
    "i32": "int32", "int32": "int32", "i64": "int64", "int64": "int64",
    "u8": "uint8", "uint8": "uint8", "bool": "bool",
}
_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
          "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "int8": "i8", "int16": "i16",
          "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool"}


def dtype_name(dtype: Any) -> str:
    """``torch.float16`` / ``"half"`` / ``"f16"`` -> ``"f16"``."""
    text = str(dtype)
    if text.startswith("torch."):
        text = text[len("torch."):]
    canon = _DTYPE_ALIASES.get(text.lower(), text)
    return _SHORT.get(canon, canon)


@contextlib.contextmanager
def exact_matmul():
    """torch matmuls without TF32 inside, the setting restored after: a GEMM reference must not
    round the way the kernel under test may."""
    import torch
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def gemm_flops(cfg) -> float:
    """2·M·N·K of a GEMM configuration."""
    return 2.0 * cfg["M"] * cfg["N"] * cfg["K"]


def gemm_bytes(cfg, elem_bytes: float) -> float:
    """A, B read once and C written once."""
    m, n, k = cfg["M"], cfg["N"], cfg["K"]
    return float(m * k + k * n + m * n) * elem_bytes


def seeded_randn(shape, dtype, seed, device, scale=1.0):
    """Fresh normal inputs from their own seeded generator (a workload's inputs replay by seed)."""
    import torch
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    x = torch.randn(*shape, generator=g, device=device, dtype=torch.float32)
    return (x * scale if scale != 1.0 else x).to(torch_dtype(dtype))


def torch_dtype(name: Any):
    """The torch dtype of a short or long name (f16, bfloat16, ...); UsageError when unknown."""
    import torch
    if isinstance(name, torch.dtype):
        return name
    canon = _DTYPE_ALIASES.get(str(name).lower())
    if canon is None or not hasattr(torch, canon):
        raise UsageError(f"unknown dtype '{name}'", hint="use f16, bf16, f32, f64, f8e4m3, i8, i32 ...")
    return getattr(torch, canon)


@dataclass(frozen=True)
class Tolerance:
    """Relative and absolute tolerance of an output comparison."""
    rtol: float
    atol: float


# TileGym's get_dtype_tolerances (tilegym-facts §4.2); integers and bool compare exactly.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "f64": Tolerance(1e-12, 1e-15),
    "f32": Tolerance(1e-5, 1e-8),
    "f16": Tolerance(1e-2, 1e-2),
    "bf16": Tolerance(1e-2, 2e-2),
    "f8e4m3": Tolerance(1e-1, 1e-1),
    "f8e5m2": Tolerance(5e-1, 5e-1),
    "i8": Tolerance(0, 0), "i16": Tolerance(0, 0), "i32": Tolerance(0, 0), "i64": Tolerance(0, 0),
    "u8": Tolerance(0, 0), "bool": Tolerance(0, 0),
}


def default_tolerance(dtype: Any) -> Tolerance:
    """The default tolerance of ``dtype`` (1e-5/1e-8 for dtypes without one)."""
    return DEFAULT_TOLERANCES.get(dtype_name(dtype), Tolerance(1e-5, 1e-8))


# ---------------------------------------------------------------------------------------
# configurations and capture specs

@dataclass
class WorkloadConfig:
    """One named configuration: free-form parameters (shapes, dtypes, tile sizes...)."""
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def __getitem__(self, key: str) -> Any:
        try:
            return self.params[key]
        except KeyError:
            raise WorkloadError(f"configuration '{self.name}' has no parameter '{key}'",
                                hint="parameters: " + ", ".join(self.params)) from None

    def get(self, key: str, default: Any = None) -> Any:
        """The parameter ``key``, or ``default``."""
        return self.params.get(key, default)

    def to_json(self) -> dict:
        """The configuration as JSON."""
        return {"name": self.name, "params": {k: _jsonable_param(v) for k, v in self.params.items()},
                "description": self.description}


def _jsonable_param(v: Any) -> Any:
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable_param(x) for x in v]
    return str(v)


@dataclass(frozen=True)
class CaptureSpec:
    """How to capture the workload's main kernel ahead of time for one configuration.

    ``kernel`` is a ``path/file.py::kernel_name`` reference, ``args`` maps every kernel
    parameter to a spec (``"f16[4096,4096]"``, a constant, see ``capture.spec``), ``grid``
    is the launch grid the wrapper would use (the static count multiplies by it).
    """
    kernel: str
    args: Mapping[str, Any]
    grid: tuple[int, ...]
    hints: Mapping[str, Any] | None = None
    # values of runtime scalar parameters, when known (an observed launch): loops bounded by them count
    scalars: Mapping[str, Any] | None = None


# ---------------------------------------------------------------------------------------
# the workload base class

class Workload:
    """Base class of every workload; override the methods marked *required*."""

    name: str = ""
    description: str = ""
    configs: Sequence[WorkloadConfig] = ()
    outputs: Sequence[str] = ()
    kernel_name: str | None = None
    # dtype name -> Tolerance (or (rtol, atol)) overriding DEFAULT_TOLERANCES
    tolerances: Mapping[str, Any] = {}
    framework: str = "cutile"
    # running run() again on the same inputs gives the same outputs (no in-place
    # accumulation): the harness then re-checks the outputs of the timed runs too
    repeatable: bool = True
    # which built-in or file reference produced this instance (set by load_workload)
    ref: str | None = None
    ref_kwargs: dict[str, Any] = {}

    # -- required -----------------------------------------------------------------------
    def make_inputs(self, cfg: WorkloadConfig, seed: int, device: str = "cuda") -> dict[str, Any]:
        """*Required*: the inputs of one run at ``cfg``, seeded; keys starting ``_`` ride along to ``run``."""
        raise NotImplementedError

    def run(self, inputs: dict[str, Any]) -> Any:
        """*Required*: one call of the kernel on ``inputs``; returns the outputs unless ``outputs`` names them."""
        raise NotImplementedError

    def reference(self, inputs: dict[str, Any]) -> Any:
        """*Required*: the expected outputs, computed in higher precision."""
        raise NotImplementedError

    def flops(self, cfg: WorkloadConfig) -> float:
        """*Required*: the FLOPs of one run at ``cfg``."""
        raise NotImplementedError

    def bytes(self, cfg: WorkloadConfig) -> float:
        """*Required*: the minimum DRAM bytes one run at ``cfg`` moves."""
        raise NotImplementedError

    # -- optional -----------------------------------------------------------------------
    def compute_unit(self, cfg: WorkloadConfig) -> tuple[str, str]:
        """(dtype, unit) whose peak is the compute roof: unit is "tensor" or "cuda"."""
        return ("f32", "cuda")

    def capture(self, cfg: WorkloadConfig, num_sms: int) -> CaptureSpec | None:
        """The AOT capture spec of ``cfg`` (kernel, argument specs, grid), or None when there is none."""
        return None

    def tolerance(self, cfg: WorkloadConfig, dtype: Any) -> Tolerance:
        """The tolerance for an output of ``dtype``: ``tolerances`` when it names the dtype, else the default."""
        name = dtype_name(dtype)
        over = self.tolerances.get(name) if self.tolerances else None
        if over is not None:
            return over if isinstance(over, Tolerance) else Tolerance(*over)
        return default_tolerance(dtype)

    def available(self) -> str | None:
        """None when the workload can run here, else why not (e.g. a missing package)."""
        return None

    def reset(self, inputs: dict[str, Any]) -> None:
        """Just before the timed runs (with the outputs' poisoning): put back inputs the kernel writes
        in place (a replay restores its recorded bytes).  Nothing by default: inputs are fresh."""

    # -- helpers ------------------------------------------------------------------------
    def config(self, name: str) -> WorkloadConfig:
        """The configuration ``name``; WorkloadError listing the configurations when absent."""
        for c in self.configs:
            if c.name == name:
                return c
        raise WorkloadError(f"workload '{self.name}' has no configuration '{name}'",
                            hint="configurations: " + ", ".join(c.name for c in self.configs))

    def select(self, names: Iterable[str] | None) -> list[WorkloadConfig]:
        """The configurations named (every one when none are)."""
        names = list(names or [])
        if not names:
            return list(self.configs)
        return [self.config(n) for n in names]

    def describe(self) -> dict:
        """The workload's name, reference, outputs and configurations as JSON."""
        return {"name": self.name, "ref": self.ref, "description": self.description,
                "outputs": list(self.outputs), "kernel_name": self.kernel_name,
                "configs": [c.to_json() for c in self.configs]}

    def __repr__(self) -> str:
        return f"<Workload {self.name or type(self).__name__} ({len(self.configs)} configs)>"


_REQUIRED = ("make_inputs", "run", "reference", "flops", "bytes")


def missing_methods(wl: Workload) -> list[str]:
    """Required methods a workload does not implement (inherited base stubs)."""
    out = []
    for name in _REQUIRED:
        impl = getattr(type(wl), name, None)
        if isinstance(wl, _FunctionWorkload):
            if getattr(wl, f"_{name}") is None:
                out.append(name)
        elif impl is getattr(Workload, name):
            out.append(name)
    return out


def validate(wl: Workload, where: str = "") -> Workload:
    """Check that ``wl`` implements the required methods and has uniquely named configurations
    (one line naming what is missing); it is named after its class when unnamed."""
    label = where or wl.name or type(wl).__name__
    miss = missing_methods(wl)
    if "reference" in miss:
        raise WorkloadError(f"workload {label} has no reference(): its output cannot be checked",
                            hint="implement reference(inputs) in higher precision (e.g. torch in float32/float64)")
    if miss:
        raise WorkloadError(f"workload {label} does not implement {', '.join(miss)}")
    if not wl.configs:
        raise WorkloadError(f"workload {label} declares no configurations",
                            hint="set configs = [WorkloadConfig('name', {...}), ...]")
    names = [c.name for c in wl.configs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise WorkloadError(f"workload {label} has duplicate configuration names: {', '.join(dup)}")
    if not wl.name:
        wl.name = type(wl).__name__
    return wl


# ---------------------------------------------------------------------------------------
# building a workload from plain functions

class _FunctionWorkload(Workload):
    def __init__(self, name, configs, make_inputs, run, reference, flops, bytes, *, outputs=(),
                 kernel_name=None, compute_unit=None, capture=None, tolerances=None, description=""):
        self.name = name
        self.description = description
        self.configs = [c if isinstance(c, WorkloadConfig) else WorkloadConfig(**c) for c in configs]
        self.outputs = tuple(outputs)
        self.kernel_name = kernel_name
        self.tolerances = dict(tolerances or {})
        self._make_inputs, self._run, self._reference = make_inputs, run, reference
        self._flops, self._bytes = flops, bytes
        self._compute_unit, self._capture = compute_unit, capture

    def make_inputs(self, cfg, seed, device="cuda"):
        return self._make_inputs(cfg, seed, device)

    def run(self, inputs):
        return self._run(inputs)

    def reference(self, inputs):
        return self._reference(inputs)

    def flops(self, cfg):
        return self._flops(cfg)

    def bytes(self, cfg):
        return self._bytes(cfg)

    def compute_unit(self, cfg):
        return self._compute_unit(cfg) if self._compute_unit else super().compute_unit(cfg)

    def capture(self, cfg, num_sms):
        return self._capture(cfg, num_sms) if self._capture else None


def workload(*, name: str, configs: Sequence[WorkloadConfig | dict], make_inputs: Callable,
             run: Callable, reference: Callable | None, flops: Callable, bytes: Callable,
             **kw) -> Workload:
    """A workload from plain functions (no subclass needed)."""
    return _FunctionWorkload(name, configs, make_inputs, run, reference, flops, bytes, **kw)


# ---------------------------------------------------------------------------------------
# loading

def instantiate(obj, label: str, kwargs: dict) -> Workload:
    """A workload from a class (or an instance, which takes no arguments); bad arguments are a WorkloadError."""
    if isinstance(obj, Workload):
        if kwargs:
            raise WorkloadError(f"{label} is a workload instance; it takes no arguments "
                                f"(got {', '.join(kwargs)})")
        return obj
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):          # no signature to check: let the call say
        sig = None
    if sig is not None:
        try:
            sig.bind(**kwargs)
        except TypeError as e:
            kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            takes = [n for n, p in sig.parameters.items() if p.kind in kinds]
            raise WorkloadError(f"cannot create workload {label}: {e}",
                                hint=("it takes: " + ", ".join(takes)) if takes else "it takes no arguments") from None
    try:
        return obj(**kwargs)
    except TypeError as e:
        raise WorkloadError(f"cannot create workload {label}: {e}") from None
