"""Human-writable kernel argument specs and the ``KernelSignature`` built from them.

``KernelSignature.from_kernel_args`` needs libcuda, so on a CPU the signature is built by
hand, mimicking what the JIT dispatcher derives from real tensors (C-contiguous,
16-byte-aligned base, divisibility from the concrete shape).

Spec grammar (one per kernel parameter, ``--arg NAME=SPEC``):

* array:    ``f16[4096,4096]``  or symbolic ``f16[M,K]`` (dims assumed multiples of 16),
            options after a colon: ``f32[N]:index=i64,align=8,layout=F``
* scalar:   ``f32`` / ``i32`` (a runtime scalar parameter)
* constant: ``128`` / ``0.5`` / ``true`` (for ``ct.Constant[...]`` parameters)
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import UsageError

# spelling -> cuda.tile dtype attribute name
DTYPES = {
    "f16": "float16", "float16": "float16", "half": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "f32": "float32", "float32": "float32", "float": "float32",
    "f64": "float64", "float64": "float64", "double": "float64",
    "tf32": "tfloat32", "tfloat32": "tfloat32",
    "f8e4m3": "float8_e4m3fn", "f8e4m3fn": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2",
    "i8": "int8", "int8": "int8", "i16": "int16", "int16": "int16",
    "i32": "int32", "int32": "int32", "i64": "int64", "int64": "int64",
    "u8": "uint8", "uint8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "bool": "bool_", "i1": "bool_",
}
BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64, "tfloat32": 32,
        "float8_e4m3fn": 8, "float8_e5m2": 8, "int8": 8, "int16": 16, "int32": 32,
        "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64, "bool_": 8}
SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
         "tfloat32": "tf32", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "int8": "i8",
         "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
         "uint32": "u32", "uint64": "u64", "bool_": "bool"}

_ARRAY_RE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*\[([^\]]*)\]\s*(?::(.*))?$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MissingSpecsError(UsageError):
    """A kernel's parameters lack specs (its hint says what to give, with the capture command's
    --arg flag: a caller with other flags says so beside it, from the type)."""


@dataclass(frozen=True)
class ArraySpec:
    """An array parameter: dtype, shape (ints or symbols), index width, alignment and layout."""
    dtype: str                         # cuda.tile dtype name, e.g. "float16"
    shape: tuple[int | str, ...]       # ints or symbolic names
    index_dtype: str = "int32"
    align: int = 16                    # base address divisibility in bytes
    layout: str = "C"                  # "C" (row-major) or "F"

    kind = "array"

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def concrete(self) -> bool:
        """Whether every dimension is an int (no symbolic size)."""
        return all(isinstance(d, int) for d in self.shape)

    def nbytes(self) -> int | None:
        """The array's size in bytes, or None when a dimension is symbolic."""
        if not self.concrete:
            return None
        return math.prod(self.shape) * BITS[self.dtype] // 8

    def text(self) -> str:
        """The spec in the ``parse_spec`` grammar, options only where not the default."""
        opts = []
        if self.index_dtype != "int32":
            opts.append(f"index={SHORT[self.index_dtype]}")
        if self.align != 16:
            opts.append(f"align={self.align}")
        if self.layout != "C":
            opts.append(f"layout={self.layout}")
        base = f"{SHORT[self.dtype]}[{','.join(map(str, self.shape))}]"
        return base + (":" + ",".join(opts) if opts else "")


@dataclass(frozen=True)
class ScalarSpec:
    """A scalar parameter of a cuda.tile dtype (a run-time value)."""
    dtype: str
    kind = "scalar"

    def text(self) -> str:
        """The dtype's short name (e.g. ``i32``)."""
        return SHORT[self.dtype]


@dataclass(frozen=True)
class ConstSpec:
    """A ``ct.Constant`` parameter's value, compiled into the kernel."""
    value: int | float | bool
    kind = "constant"

    def text(self) -> str:
        """The value as written in a spec (booleans lower-case)."""
        return str(self.value).lower() if isinstance(self.value, bool) else str(self.value)


ParamSpec = ArraySpec | ScalarSpec | ConstSpec


def _dtype(word: str, where: str) -> str:
    d = DTYPES.get(word.lower())
    if d is None:
        raise UsageError(f"{where}: unknown dtype '{word}'",
                         hint="use one of f16 bf16 f32 f64 tf32 f8e4m3 f8e5m2 i8 i16 i32 i64 u8 bool")
    return d


def parse_spec(text, where: str = "spec") -> ParamSpec:
    """Parse one spec string (or a Python int/float/bool for constants)."""
    if isinstance(text, bool) or isinstance(text, (int, float)):
        return ConstSpec(text)
    if not isinstance(text, str):
        raise UsageError(f"{where}: cannot use {type(text).__name__} as an argument spec")
    s = text.strip()
    if not s:
        raise UsageError(f"{where}: empty spec")
    if s.lower() in ("true", "false"):
        return ConstSpec(s.lower() == "true")
    if re.fullmatch(r"[-+]?\d+", s):
        return ConstSpec(int(s))
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", s):
        return ConstSpec(float(s))
    m = _ARRAY_RE.match(s)
    if m:
        dt = _dtype(m.group(1), where)
        dims: list[int | str] = []
        raw_dims = [d.strip() for d in m.group(2).split(",")] if m.group(2).strip() else []
        if not raw_dims:
            raise UsageError(f"{where}: array spec '{s}' has no dimensions")
        for d in raw_dims:
            if re.fullmatch(r"\d+", d):
                if int(d) <= 0:
                    raise UsageError(f"{where}: dimension {d} must be positive")
                dims.append(int(d))
            elif _NAME_RE.match(d):
                dims.append(d)
            else:
                raise UsageError(f"{where}: bad dimension '{d}' in '{s}'",
                                 hint="dimensions are positive integers or names like M")
        kw: dict = {}
        for opt in filter(None, (o.strip() for o in (m.group(3) or "").split(","))):
            if "=" not in opt:
                raise UsageError(f"{where}: option '{opt}' needs a value (index=, align=, layout=)")
            k, v = (x.strip() for x in opt.split("=", 1))
            if k == "index":
                idx = _dtype(v, where)
                if idx not in ("int32", "int64"):
                    raise UsageError(f"{where}: index must be i32 or i64, not '{v}'")
                kw["index_dtype"] = idx
            elif k == "align":
                if not v.isdigit() or int(v) <= 0 or int(v) & (int(v) - 1):
                    raise UsageError(f"{where}: align must be a power of two (bytes), not '{v}'")
                kw["align"] = int(v)
            elif k == "layout":
                if v.upper() not in ("C", "F"):
                    raise UsageError(f"{where}: layout must be C or F, not '{v}'")
                kw["layout"] = v.upper()
            else:
                raise UsageError(f"{where}: unknown array option '{k}'",
                                 hint="options are index=, align=, layout=")
        return ArraySpec(dt, tuple(dims), **kw)
    if s.lower() in DTYPES:
        return ScalarSpec(_dtype(s, where))
    raise UsageError(f"{where}: cannot read spec '{s}'",
                     hint="arrays look like f16[M,K] or f32[4096], scalars like f32, constants like 128")


def parse_assignments(items: list[str]) -> dict[str, ParamSpec]:
    """``["A=f16[M,K]", "TM=128"]`` -> {name: spec}."""
    out: dict[str, ParamSpec] = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--arg '{item}' must look like NAME=SPEC (e.g. A=f16[M,K] or TILE=128)")
        name, spec = (x.strip() for x in item.split("=", 1))
        if not _NAME_RE.match(name):
            raise UsageError(f"--arg '{item}': '{name}' is not a parameter name")
        if name in out:
            raise UsageError(f"--arg {name} given twice")
        out[name] = parse_spec(spec, where=f"--arg {name}")
    return out


@dataclass
class BoundSpec:
    """Specs matched to a kernel's parameters, in parameter order."""
    names: list[str]
    specs: list[ParamSpec]
    dims: dict[str, int] = field(default_factory=dict)   # symbolic dim values, if known

    def as_dict(self) -> dict[str, str]:
        """Parameter name -> spec text."""
        return {n: s.text() for n, s in zip(self.names, self.specs)}

    def constants(self) -> dict[str, int | float | bool]:
        """The constant parameters' values."""
        return {n: s.value for n, s in zip(self.names, self.specs) if isinstance(s, ConstSpec)}

    def arrays(self) -> dict[str, ArraySpec]:
        """The array parameters' specs."""
        return {n: s for n, s in zip(self.names, self.specs) if isinstance(s, ArraySpec)}


def bind(loaded, given: dict[str, ParamSpec]) -> BoundSpec:
    """Check specs against the kernel's parameters: every one given, kinds matching."""
    names = loaded.param_names
    consts = loaded.constant_params()
    unknown = [n for n in given if n not in names]
    if unknown:
        raise UsageError(f"kernel {loaded.attr} has no parameter {', '.join(unknown)}",
                         hint="parameters: " + ", ".join(names))
    given = {**_constant_defaults(loaded, consts, given), **given}
    missing = [n for n in names if n not in given]
    if missing:
        raise MissingSpecsError(f"no spec for parameter{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} of {loaded.attr}",
                         hint=_missing_hint(loaded, missing))
    specs = []
    for n in names:
        s = given[n]
        if n in consts and not isinstance(s, ConstSpec):
            raise UsageError(f"parameter {n} is a ct.Constant: give its value (e.g. {n}=128), "
                             f"not '{s.text()}'")
        if n not in consts and isinstance(s, ConstSpec):
            raise UsageError(f"parameter {n} is not a ct.Constant: give its type "
                             f"(e.g. {n}=f16[M,K] or {n}=f32), not '{s.text()}'")
        specs.append(s)
    return BoundSpec(names, specs)


def param_kinds(loaded) -> dict[str, str]:
    """What each parameter is, read from the kernel's annotations and how its body uses it (the
    libcst model of the kernel, ``source.locate``): ``"ct.Constant[float]"``, ``"2-D array"``,
    ``"array"``, ``"scalar float"`` (annotated), ``"scalar"`` (never a made-up shape)."""
    import inspect
    import typing
    names = loaded.param_names
    consts = loaded.constant_params()
    sig = loaded.kernel._annotated_function.pysig
    out: dict[str, str] = {}
    for n in names:
        if n in consts:
            args = typing.get_args(sig.parameters[n].annotation)
            t = getattr(args[0], "__name__", None) if args else None
            out[n] = f"ct.Constant[{t}]" if t else "ct.Constant"
    rank: dict[str, int] = {}
    arrays: set[str] = set()
    try:
        from ..source.locate import locate
        loc = locate(inspect.getsourcefile(loaded.pyfunc) or loaded.path, loaded.function_name)
    except Exception:           # a kernel built at run time has no source to read: kinds from annotations
        loc = None
    if loc is not None:
        arrays |= set(loc.shape_reads)
        for op in loc.memory_ops:
            arrays.add(op.array)
            if op.index_rank is not None and (op.kind not in ("gather", "scatter") or op.index_rank > 1
                                              or op.array not in rank):
                rank[op.array] = op.index_rank
    for n in names:
        if n in out:
            continue
        if n in arrays:
            out[n] = f"{rank[n]}-D array" if n in rank else "array"
        elif sig.parameters[n].annotation in (int, float, bool):      # `eps: float`
            out[n] = f"scalar {sig.parameters[n].annotation.__name__}"
        else:
            out[n] = "scalar"
    return out


def spec_hint(loaded, names: list[str] | None = None, known: dict[str, ParamSpec] | None = None,
              flag: str = "--arg", alternative: str = "") -> str:
    """What to give for a kernel without (enough) specs, the one message every command shows:
    the real parameters with their real kinds (``X=DTYPE[d0,d1] (2-D array), N=DTYPE (scalar: i32,
    f32, ...), EPS=<float> (ct.Constant[float])``; the specs of a seen launch where there is one),
    then a complete example built from those parameters, with concrete sizes (``roofline``
    needs them) and each constant's Python default where it has one.  ``alternative``: another way
    the command has, e.g. `` (or --workload REF: the specs of its launch)``."""
    parts, example = _typed(loaded, names, known)
    return (f"give {flag} NAME=SPEC for each{alternative}: " + ", ".join(parts)
            + "; e.g. " + " ".join(f"{flag} {e}" for e in example))


def _typed(loaded, names: list[str] | None, known: dict[str, ParamSpec] | None = None
           ) -> tuple[list[str], list[str]]:
    """Each parameter with its real kind, and an example spec for it."""
    import inspect
    kinds = param_kinds(loaded)
    try:
        defaults = {n: p.default for n, p in inspect.signature(loaded.pyfunc).parameters.items()
                    if p.default is not inspect.Parameter.empty}
    except (TypeError, ValueError, AttributeError):
        defaults = {}
    parts, example = [], []
    for n in names or loaded.param_names:
        k = kinds.get(n, "?")
        if known and n in known:
            parts.append(f"{n}={known[n].text()}")
            example.append(f"{n}={known[n].text()}")
        elif k.startswith("ct.Constant"):
            t = k[len("ct.Constant["):-1] if "[" in k else "value"
            parts.append(f"{n}=<{t}> ({k})")
            v = defaults.get(n, {"float": 0.5, "bool": True}.get(t, 128))
            example.append(f"{n}={str(v).lower() if isinstance(v, bool) else v}")
        elif "array" in k:
            rank = int(k.split("-")[0]) if k[0].isdigit() else None
            dims = ",".join(f"d{i}" for i in range(rank)) if rank else "..."
            parts.append(f"{n}=DTYPE[{dims}] ({k})")
            example.append(f"{n}=f32[{','.join(['4096'] * (rank or 1))}]")
        else:
            dtype = {"scalar float": "f32", "scalar bool": "bool"}.get(k, "i32")
            parts.append(f"{n}=DTYPE ({k}: {dtype}, ...)" if k != "scalar" else f"{n}=DTYPE ({k}: i32, f32, ...)")
            example.append(f"{n}={dtype}")
    return parts, example


def _missing_hint(loaded, missing: list[str]) -> str:
    """Where a spec can go: the module's CAPTURE_SPECS when it has the kernel's (the only way
    inside `loop record`, which edits that file and takes no --arg), else --arg."""
    if (getattr(loaded.module, "CAPTURE_SPECS", None) or {}).get(loaded.attr):
        return (f"add {' and '.join(missing)} to CAPTURE_SPECS[{loaded.attr!r}] in {loaded.path.name}: "
                f"{', '.join(_typed(loaded, missing)[0])} (the capture command also takes --arg NAME=SPEC)")
    return spec_hint(loaded, missing)


def _constant_defaults(loaded, consts, given) -> dict[str, "ConstSpec"]:
    """``ROWS: ct.Constant[int] = 4`` needs no spec: its Python default is the value (the
    loop's structural transforms add constants this way, so fixed --capture-arg lists still bind)."""
    import inspect
    try:
        sig = inspect.signature(loaded.pyfunc)
    except (TypeError, ValueError, AttributeError):
        return {}
    return {n: ConstSpec(p.default) for n, p in sig.parameters.items()
            if n in consts and n not in given and p.default is not inspect.Parameter.empty
            and isinstance(p.default, (bool, int, float))}


def _ct():
    import cuda.tile as ct
    return ct


def array_constraint(a: ArraySpec):
    """The ArrayConstraint the JIT dispatcher would derive for a tensor matching ``a``."""
    ct = _ct()
    from cuda.tile.compilation import ArrayConstraint
    bits = BITS[a.dtype]
    shape = list(a.shape)
    nd = len(shape)
    order = list(range(nd)) if a.layout == "C" else list(reversed(range(nd)))
    # strides in elements; symbolic dims contribute "unknown but assumed multiple of 16"
    strides: list[int | None] = [None] * nd
    acc: int | None = 1
    for i in reversed(order):
        strides[i] = acc
        d = shape[i]
        acc = (acc * d) if (acc is not None and isinstance(d, int)) else None
    if a.index_dtype == "int32":
        limit = (1 << 31) - 1
        for i, (d, s) in enumerate(zip(shape, strides)):
            if (isinstance(d, int) and d > limit) or (s is not None and s > limit):
                raise UsageError(f"dimension {i} of {a.text()} exceeds the int32 index range",
                                 hint="add :index=i64")
    stride_div = (128 // bits) if 128 % bits == 0 else 1
    stride_constant, sdiv, hdiv = [], [], []
    for i in range(nd):
        d, s = shape[i], strides[i]
        last = (i == order[-1])
        stride_constant.append(1 if last or s == 1 else None)
        hdiv.append(16 if (not isinstance(d, int) or d % 16 == 0) else 1)
        if last:
            sdiv.append(1)
        elif s is None:
            sdiv.append(stride_div)
        else:
            sdiv.append(stride_div if s % stride_div == 0 else 1)
    return ArrayConstraint(
        getattr(ct, a.dtype), nd,
        index_dtype=getattr(ct, a.index_dtype),
        stride_lower_bound_incl=0,
        alias_groups=(),
        may_alias_internally=False,
        stride_constant=tuple(stride_constant),
        stride_divisible_by=tuple(sdiv),
        shape_divisible_by=tuple(hdiv),
        base_addr_divisible_by=a.align,
    )


def build_signature(bound: BoundSpec):
    """KernelSignature in the calling convention the JIT uses (cutile_python_v1, symbol ``_Kt1_``).

    v1 has no shape constants, so unit dims are not folded either (as in the JIT)."""
    ct = _ct()
    from cuda.tile.compilation import CallingConvention, KernelSignature, ScalarConstraint
    params = []
    for s in bound.specs:
        if isinstance(s, ArraySpec):
            params.append(array_constraint(s))
        elif isinstance(s, ScalarSpec):
            params.append(ScalarConstraint(getattr(ct, s.dtype)))
        else:
            params.append(s.value)
    return KernelSignature(params, CallingConvention.cutile_python_v1())
