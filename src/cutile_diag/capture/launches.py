"""Observe ``ct.launch`` calls: which kernel, which grid, which arguments.

A launch is what the JIT sees: the kernel object, the grid and the argument tuple.  From it
we derive, without a GPU, everything a spec-based AOT capture needs (``LaunchRecord.specs``)
and the launch facts the diagnosis judges grids on.  Two uses share this module:

* in-process (``intercept_launches``): a workload's ``run`` or a launch wrapper is called with
  ``ct.launch`` replaced; with ``execute=False`` nothing reaches the driver, so CPU tensors
  work (``cpu_cuda`` makes the usual ``torch.cuda`` stream/device queries answer on a CPU);
* in a child process (the user's command): the same records, written as JSON lines.
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterator

from ..errors import CutileDiagError
from .spec import BITS, ArraySpec, ConstSpec, ParamSpec, ScalarSpec

SCHEMA = "cutile-diag.launch/1"
_INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class ArgInfo:
    """One argument of one launch, as the dispatcher would classify it."""
    name: str                             # kernel parameter name
    kind: str                             # array | scalar | constant | other
    dtype: str | None = None              # cuda.tile dtype name (float16, int32, ...)
    shape: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None  # in elements
    align: int | None = None              # base address divisibility in bytes (capped at 16)
    value: Any = None                     # constants and scalars
    type_name: str | None = None          # Python type of an 'other' argument

    def spec(self) -> ParamSpec | None:
        """The capture spec this argument stands for (None for 'other')."""
        if self.kind == "constant":
            return ConstSpec(self.value)
        if self.kind == "scalar":
            return ScalarSpec(self.dtype)
        if self.kind != "array":
            return None
        numel = math.prod(self.shape) if self.shape else 1
        big = numel > _INT32_MAX or any(s * d > _INT32_MAX for s, d in zip(self.strides or (), self.shape))
        return ArraySpec(self.dtype, tuple(self.shape), index_dtype="int64" if big else "int32",
                         align=self.align or 16, layout=_layout(self.shape, self.strides))

    def text(self) -> str:
        """The spec as written on a command line, or ``<type>`` for an argument without one."""
        s = self.spec()
        return s.text() if s is not None else f"<{self.type_name}>"


@dataclass(frozen=True)
class LaunchRecord:
    """One ``ct.launch`` of one kernel."""
    kernel: str                           # the kernel's Python function name
    module: str | None
    file: str | None
    grid: tuple[int, ...]
    args: tuple[ArgInfo, ...]
    device_ms: float | None = None        # measured around the launch (child observer, GPU)
    extra: dict = field(default_factory=dict)

    @property
    def grid_blocks(self) -> int:
        """The number of blocks the grid launches."""
        return math.prod(self.grid) if self.grid else 1

    def specs(self) -> dict[str, ParamSpec]:
        """Parameter name -> spec; raises ValueError naming an argument with no spec."""
        out = {}
        for a in self.args:
            s = a.spec()
            if s is None:
                raise ValueError(f"argument {a.name} of {self.kernel} is a {a.type_name}, "
                                 f"which has no capture spec")
            out[a.name] = s
        return out

    def shape_key(self) -> tuple:
        """Identity of a launch configuration: kernel + grid + argument specs."""
        return (self.kernel, self.grid, tuple((a.name, a.text()) for a in self.args))

    def to_json(self) -> dict:
        """The record as a JSON-able dict, stamped with the launch schema."""
        d = asdict(self)
        d["schema"] = SCHEMA
        return d

    @classmethod
    def from_json(cls, d: dict) -> "LaunchRecord":
        """The record ``to_json`` wrote (shapes and strides back to tuples)."""
        args = tuple(ArgInfo(**{k: (tuple(v) if k in ("shape", "strides") and v is not None else v)
                                for k, v in a.items()}) for a in d["args"])
        return cls(d["kernel"], d.get("module"), d.get("file"), tuple(d["grid"]), args,
                   d.get("device_ms"), d.get("extra") or {})


def _layout(shape, strides) -> str:
    if not shape or strides is None or len(shape) < 2:
        return "C"
    return "F" if strides[0] == 1 and strides[-1] != 1 else "C"


def _ct_dtype(torch_dtype) -> str:
    name = str(torch_dtype).rsplit(".", 1)[-1]
    return {"bool": "bool_", "half": "float16", "float": "float32", "double": "float64"}.get(name, name)


def kernel_name(kernel) -> str:
    """The Python function name of a ``ct.kernel`` object (or of whatever it is given)."""
    f = getattr(kernel, "_pyfunc", None)
    return getattr(f, "__name__", None) or getattr(kernel, "__name__", type(kernel).__name__)


def _param_info(kernel) -> tuple[list[str], set[str]]:
    ann = getattr(kernel, "_annotated_function", None)
    if ann is None:
        return [], set()
    names = list(ann.pysig.parameters)
    consts = {n for n, a in zip(names, ann.parameter_annotations) if getattr(a, "constant", False)}
    return names, consts


def describe_arg(name: str, value, constant: bool) -> ArgInfo:
    """What a launch argument is for capture: a constant, an array (dtype, shape, strides, the
    base pointer's alignment up to 16), a scalar (int32/int64 by value, float32, bool) or other."""
    if constant:
        return ArgInfo(name, "constant", value=value)
    if hasattr(value, "data_ptr") and hasattr(value, "stride") and hasattr(value, "dtype"):
        dtype = _ct_dtype(value.dtype)
        ptr = value.data_ptr()
        align = 16
        while align > 1 and ptr % align:
            align //= 2
        if dtype not in BITS:
            return ArgInfo(name, "other", type_name=f"tensor of {dtype}")
        return ArgInfo(name, "array", dtype, tuple(int(d) for d in value.shape),
                       tuple(int(s) for s in value.stride()), align)
    if isinstance(value, bool):
        return ArgInfo(name, "scalar", "bool_", value=value)
    if isinstance(value, int):
        return ArgInfo(name, "scalar", "int32" if -_INT32_MAX - 1 <= value <= _INT32_MAX else "int64",
                       value=value)
    if isinstance(value, float):
        return ArgInfo(name, "scalar", "float32", value=value)
    return ArgInfo(name, "other", type_name=type(value).__name__)


class LaunchArgumentsError(CutileDiagError):
    """A launch whose arguments do not bind to the kernel's parameters (cuTile rejects it too)."""


def check_launch_args(kernel, args) -> None:
    """Raise ``LaunchArgumentsError`` when ``args`` do not bind to ``kernel``'s parameters:
    a record made from them would silently drop (or lack) an argument."""
    ann = getattr(kernel, "_annotated_function", None)
    if ann is None:
        return
    try:
        ann.pysig.bind(*args)
    except TypeError:
        names = list(ann.pysig.parameters)
        raise LaunchArgumentsError(f"the launch of {kernel_name(kernel)} passes {len(args)} argument(s); the "
                                   f"kernel takes {len(names)} ({', '.join(names)})") from None


def describe_launch(kernel, grid, args) -> LaunchRecord:
    """The record of ``ct.launch(stream, grid, kernel, args)``: arguments bound to parameter
    names (checked first), and the arguments that alias one array noted under ``extra``."""
    check_launch_args(kernel, args)
    names, consts = _param_info(kernel)
    names = names or [f"arg{i}" for i in range(len(args))]
    f = getattr(kernel, "_pyfunc", None)
    code = getattr(f, "__code__", None)
    grid_t = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    infos = tuple(describe_arg(n, v, n in consts) for n, v in zip(names, args))
    rec = LaunchRecord(kernel_name(kernel), getattr(f, "__module__", None),
                       code.co_filename if code else None, grid_t, infos)
    same = same_arrays(names, args)
    return replace(rec, extra={**rec.extra, "same_array": same}) if same else rec


def same_arrays(names, args) -> dict[str, str]:
    """Array arguments that are another argument's very memory (``launch(a, a, c)``): name -> the
    earlier one's name.  Such an array moves its bytes once (``roofline.observed`` counts it once)."""
    seen: dict[tuple, str] = {}
    out: dict[str, str] = {}
    for n, v in zip(names, args):
        try:
            key = (int(v.data_ptr()), tuple(v.shape), tuple(v.stride()), str(v.dtype))
        except Exception:               # not a tensor (a scalar, a constant, another array type)
            continue
        if key in seen:
            out[n] = seen[key]
        else:
            seen[key] = n
    return out


@contextlib.contextmanager
def intercept_launches(*, execute: bool = False,
                       on_launch: Callable[[LaunchRecord], None] | None = None
                       ) -> Iterator[list[LaunchRecord]]:
    """Replace ``cuda.tile.launch`` (and module globals bound to it by ``from cuda.tile import
    launch``) for the duration; yields the list of records.  ``execute=False`` records only."""
    import cuda.tile as ct

    original = ct.launch
    records: list[LaunchRecord] = []

    def launch(stream, grid, kernel, kernel_args, /, **kw):
        rec = describe_launch(kernel, grid, kernel_args)
        records.append(rec)
        if on_launch is not None:
            on_launch(rec)
        if execute:
            return original(stream, grid, kernel, kernel_args, **kw)
        return None

    rebound = [m for m in list(sys.modules.values())
               if m is not None and getattr(m, "__dict__", {}).get("launch") is original and m is not ct]
    ct.launch = launch
    for m in rebound:
        m.launch = launch
    try:
        yield records
    finally:
        ct.launch = original
        for m in rebound:
            m.launch = original


class _CpuStream:
    """Stands in for a CUDA stream when nothing is launched."""
    cuda_stream = 0

    def synchronize(self):
        return None

    def wait_stream(self, _other):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@dataclass
class _CpuProps:
    name: str
    multi_processor_count: int
    major: int = 9
    minor: int = 0
    total_memory: int = 141 * 1024 ** 3


@contextlib.contextmanager
def cpu_cuda(sm_count: int = 132, name: str = "NVIDIA H200 (CPU stand-in)") -> Iterator[None]:
    """Let launch wrappers ask torch.cuda for a stream and the SM count on a machine without a
    GPU (only while launches are intercepted with ``execute=False``)."""
    import torch

    cuda = torch.cuda
    if cuda.is_available():
        yield
        return
    props = _CpuProps(name, sm_count)
    patches = {
        "current_stream": lambda *a, **k: _CpuStream(),
        "default_stream": lambda *a, **k: _CpuStream(),
        "synchronize": lambda *a, **k: None,
        "current_device": lambda: 0,
        "device_count": lambda: 1,
        "get_device_properties": lambda *a, **k: props,
        "get_device_capability": lambda *a, **k: (props.major, props.minor),
    }
    saved = {k: getattr(cuda, k) for k in patches if hasattr(cuda, k)}
    for k, v in patches.items():
        setattr(cuda, k, v)
    try:
        yield
    finally:
        for k in patches:
            if k in saved:
                setattr(cuda, k, saved[k])
            else:
                delattr(cuda, k)


def write_jsonl(records: list[LaunchRecord], path) -> None:
    """Append the records to ``path``, one JSON line each."""
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r.to_json()) + "\n")


def read_jsonl(path) -> list[LaunchRecord]:
    """The records in ``path``; a truncated last line (a killed writer) is skipped."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(LaunchRecord.from_json(json.loads(line)))
                except json.JSONDecodeError:     # the last line of a writer killed mid-write
                    continue
    return out
