"""Static FLOP and byte counts from a kernel's TileIR (no GPU).

Public API::

    sc = static_count(CaptureSpec(kernel="ex.py::matmul", args={...}, grid=(32, 32)))
    sc = count_entry(entry, arg_values, grid)          # on an already parsed ir_parsers.tileir Entry
    sc.bytes_loaded, sc.bytes_stored, sc.bytes_total, sc.mma_flops, sc.other_flops   # None = unknown
    sc.exact, sc.unknown (reasons), sc.notes, sc.memory_ops, sc.mma_ops
    cross_check(sc, declared_flops, declared_bytes) -> (ratios dict, notes)
    count_workload(wl, cfg, num_sms) -> StaticCount | None     # via wl.capture(cfg, num_sms)

What is counted: every ``load_view_tko`` / ``load_ptr_tko`` (result tile bytes) and
``store_view_tko`` / ``store_ptr_tko`` (stored tile bytes), every ``mmaf``/``mmai``/
``mmaf_scaled`` as 2·M·N·K, and float element-wise ops per element (FMA = 2; reductions
= one combine per reduced element) — each times the trip counts of the loops around it,
times the grid.  Trip counts come from a small evaluator over the entry's integer SSA
values: argument shapes from the capture spec, ``constant``, ``assume``, integer
arithmetic, ``get_index_space_shape`` (ceil(dim / tile dim) of the concrete array shape),
``get_tile_block_id`` / ``get_num_tile_blocks``.  A grid-stride loop
``for i in (%blockId to N, step %gridSize)`` divides N iterations over the grid exactly.

What is not: a loop whose bounds depend on run-time data (or on an outer loop's index) has
no static trip count — its ops are reported with ``None`` and the reason, never guessed; a
``while`` (``loop``) likewise.  An ``if`` whose condition is not static counts its larger
branch (an upper bound, flagged).  Masked pointer accesses and partial edge tiles count
the full tile (the traffic the kernel *issues*, not what the memory system moves).  The
static bytes are tile traffic before cache reuse: for a GEMM they exceed the declared
(compulsory) DRAM bytes by the re-read factor, which is itself worth knowing.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..ir_parsers.tileir_ops import OP_CLASSES
from ..source.ref import ref_file
from ..capture import aot, loader as loader_mod, spec as spec_mod
from ..capture.spec import ArraySpec, ConstSpec, ScalarSpec
from ..ir_parsers.tileir import parse_tileir
from ..toolchain import run_tool

_FLOAT_OPS = set(OP_CLASSES["float"])
_FLOAT_COST = {"fma": 2}
_MMA = {"mmaf", "mmai", "mmaf_scaled"}
_LOADS = {"load_view_tko", "load_ptr_tko"}
_STORES = {"store_view_tko", "store_ptr_tko"}
_OTHER_MEM = set(OP_CLASSES["memory"]) - _LOADS - _STORES


@dataclass(frozen=True)
class _Bid:
    axis: int


@dataclass
class MemOp:
    """One load or store of the TileIR: its access path, tile, bytes per evaluation and evaluations over the grid."""
    op: str
    line: int
    source: str | None
    direction: str                 # load | store
    access: str                    # view (tile, TMA-eligible) | ptr (per-element gather/scatter)
    tile: str
    bytes_per_exec: int | None
    execs: float | None            # over the whole grid
    total_bytes: float | None
    masked: bool = False


@dataclass
class MmaOp:
    """One MMA of the TileIR: its m x n x k, operand element type and FLOPs over the grid."""
    op: str
    line: int
    source: str | None
    m: int
    n: int
    k: int
    operand_elem: str
    execs: float | None
    flops: float | None


@dataclass
class StaticCount:
    """What one launch moves and computes, counted from the TileIR at known sizes; None totals
    when a trip count or size is unknown (``unknown`` says which)."""
    kernel: str
    function: str
    grid: tuple[int, ...]
    bytes_loaded: float | None = 0.0
    bytes_stored: float | None = 0.0
    mma_flops: float | None = 0.0
    other_flops: float | None = 0.0
    memory_ops: list[MemOp] = field(default_factory=list)
    mma_ops: list[MmaOp] = field(default_factory=list)
    exact: bool = True
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    footprint_bytes: float | None = None   # sum of the array arguments' sizes (set from a capture spec)

    @property
    def blocks(self) -> int:
        """The number of programs the grid launches."""
        return math.prod(self.grid)

    @property
    def bytes_total(self) -> float | None:
        """Issued tile traffic, loads plus stores (None when either is unknown)."""
        if self.bytes_loaded is None or self.bytes_stored is None:
            return None
        return self.bytes_loaded + self.bytes_stored

    @property
    def bytes_compulsory(self) -> float | None:
        """Minimum DRAM traffic: the issued tile traffic, capped by the arrays' footprint (each array
        moved once; re-reads are the caches' to absorb).  The bytes a roofline of a bare kernel uses."""
        tb = self.bytes_total
        if tb is None or self.footprint_bytes is None:
            return tb
        return min(tb, self.footprint_bytes)

    @property
    def flops_total(self) -> float | None:
        """MMA plus other FLOPs (None when either is unknown)."""
        if self.mma_flops is None or self.other_flops is None:
            return None
        return self.mma_flops + self.other_flops

    def to_json(self) -> dict:
        """The count as JSON, derived totals and op lists included."""
        return {"kernel": self.kernel, "function": self.function, "grid": list(self.grid), "blocks": self.blocks,
                "bytes_loaded": self.bytes_loaded, "bytes_stored": self.bytes_stored,
                "bytes_total": self.bytes_total, "footprint_bytes": self.footprint_bytes,
                "bytes_compulsory": self.bytes_compulsory, "mma_flops": self.mma_flops, "other_flops": self.other_flops,
                "exact": self.exact, "unknown": self.unknown, "notes": self.notes,
                "memory_ops": [m.__dict__ for m in self.memory_ops], "mma_ops": [m.__dict__ for m in self.mma_ops]}


# ---------------------------------------------------------------------------------------
# the integer evaluator

def _int_const(op) -> int | None:
    v = op.attrs.get("value", "")
    if not op.result_types or op.result_types[0].shape != ():
        return None
    elem, _, num = v.partition(":")
    num = num.strip()
    if elem.strip().startswith("i"):
        try:
            return int(num, 0)
        except ValueError:
            if num in ("true", "false"):
                return int(num == "true")
    return None


def _floordiv(a: int, b: int, rounding: str | None) -> int:
    if rounding == "negative_inf":
        return a // b
    if rounding == "positive_inf":
        return -((-a) // b)
    q = abs(a) // abs(b)                 # default: toward zero
    return q if (a >= 0) == (b > 0) else -q


_CMP = {"equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b, "less_than": lambda a, b: a < b,
        "less_than_or_equal": lambda a, b: a <= b, "greater_than": lambda a, b: a > b,
        "greater_than_or_equal": lambda a, b: a >= b}


class _Counter:
    def __init__(self, entry, arg_values: dict[str, int | None], grid: tuple[int, ...]):
        self.entry = entry
        self.grid3 = tuple(list(grid) + [1] * (3 - len(grid)))[:3]
        self.env: dict[str, Any] = dict(arg_values)
        self.defs: dict[str, Any] = {}

    def val(self, name: str):
        return self.env.get(name)

    # -- value semantics ---------------------------------------------------------------
    def evaluate(self, op) -> None:
        for r in op.results:
            self.defs[r] = op
        name, ops = op.name, op.operands
        out: list[Any] = [None] * len(op.results)
        try:
            if name == "constant":
                out = [_int_const(op)]
            elif name == "assume" and ops:
                out = [self.val(ops[0])]
            elif name in ("exti", "trunci", "bitcast") and ops:
                v = self.val(ops[0])
                out = [v if isinstance(v, int) else None]
            elif name in ("addi", "subi", "muli", "divi", "remi", "maxi", "mini") and len(ops) >= 2:
                a, b = self.val(ops[0]), self.val(ops[1])
                if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
                    if name == "addi":
                        out = [a + b]
                    elif name == "subi":
                        out = [a - b]
                    elif name == "muli":
                        out = [a * b]
                    elif name == "divi" and b != 0:
                        out = [_floordiv(a, b, op.attrs.get("rounding"))]
                    elif name == "remi" and b != 0:
                        out = [int(math.fmod(a, b))]
                    elif name == "maxi":
                        out = [max(a, b)]
                    elif name == "mini":
                        out = [min(a, b)]
            elif name == "cmpi" and len(ops) >= 2:
                a, b = self.val(ops[0]), self.val(ops[1])
                pred = next((k for k in op.keywords if k in _CMP), None)
                if isinstance(a, int) and isinstance(b, int) and pred:
                    out = [_CMP[pred](a, b)]
            elif name == "select" and len(ops) >= 3:
                c = self.val(ops[0])
                if isinstance(c, bool):
                    out = [self.val(ops[1] if c else ops[2])]
            elif name == "get_tile_block_id":
                out = [_Bid(i) for i in range(len(op.results))]
            elif name == "get_num_tile_blocks":
                out = [self.grid3[i] if i < 3 else None for i in range(len(op.results))]
            elif name == "get_index_space_shape" and ops:
                out = self._index_space(ops[0], len(op.results))
            elif name == "get_tensor_shape" and ops:
                shape = self._view_shape(ops[0])
                out = list(shape) if shape and len(shape) == len(op.results) else out
        except (TypeError, ValueError, ZeroDivisionError):
            pass
        for r, v in zip(op.results, out):
            self.env[r] = v

    def _view_shape(self, name: str) -> list[int | None] | None:
        """Concrete shape of a tensor_view value (through make_tensor_view)."""
        op = self.defs.get(name)
        if op is None or op.name != "make_tensor_view":
            return None
        lst = op.attrs.get("shape", "")
        items = [x.strip() for x in lst.strip("[]").split(",") if x.strip()]
        shape_ops = [o for o, r in zip(op.operands, op.operand_roles) if r == "shape"]
        out, k = [], 0
        for it in items:
            if it.startswith("%"):
                v = self.val(shape_ops[k]) if k < len(shape_ops) else None
                k += 1
                out.append(v if isinstance(v, int) and not isinstance(v, bool) else None)
            else:
                try:
                    out.append(int(it))
                except ValueError:
                    out.append(None)
        static = op.result_types[0].shape if op.result_types else ()
        for i, d in enumerate(static):
            if i < len(out) and out[i] is None and isinstance(d, int):
                out[i] = d
        return out

    def _index_space(self, pview: str, n: int) -> list[int | None]:
        pop = self.defs.get(pview)
        if pop is None or pop.name != "make_partition_view" or not pop.operands:
            return [None] * n
        ptype = pop.result_types[0] if pop.result_types else None
        tile = ptype.tile_shape if ptype is not None else None
        if tile is None or "dim_map" in ptype.param:
            return [None] * n            # permuted index spaces: not modelled
        shape = self._view_shape(pop.operands[0])
        if shape is None or len(shape) != len(tile):
            return [None] * n
        out = [(-(-d // t)) if isinstance(d, int) else None for d, t in zip(shape, tile)]
        return out[:n] + [None] * (n - len(out))

    # -- trip counts -------------------------------------------------------------------
    def trips(self, op) -> tuple[float | None, str]:
        vals = {}
        for role in ("lower", "upper", "step"):
            if role in op.operand_roles:
                vals[role] = self.val(op.operands[op.operand_roles.index(role)])
            else:
                lit = op.attrs.get(role)
                try:
                    vals[role] = int(lit) if lit is not None else None
                except ValueError:
                    vals[role] = None
        lb, ub, st = vals.get("lower"), vals.get("upper"), vals.get("step")
        where = f"for at line {op.line}"
        if not isinstance(ub, int) or isinstance(ub, bool):
            return None, f"{where}: upper bound not known before the run"
        if not isinstance(st, int) or st <= 0:
            return None, f"{where}: step not a known positive constant"
        if isinstance(lb, int) and not isinstance(lb, bool):
            return float(max(0, -(-(ub - lb) // st))), ""
        if isinstance(lb, _Bid):
            g = self.grid3[lb.axis]
            # block b runs ceil((ub - b) / st) iterations (none when b >= ub): exact average over the grid
            total = _grid_stride_total(ub, st, g)
            return total / g, "grid-stride"
        return None, f"{where}: lower bound depends on run-time values"


def _grid_stride_total(ub: int, step: int, g: int) -> int:
    """sum over b in [0, g) of max(0, ceil((ub - b) / step))."""
    if ub <= 0:
        return 0
    if g <= 1 << 20:
        return sum(-(-(ub - b) // step) for b in range(min(g, ub)))
    # closed form for the usual step == g case
    if step == g:
        return ub
    return sum(-(-(ub - b) // step) for b in range(min(g, ub)))


def _src(op) -> str | None:
    s = getattr(op, "source", None)
    return f"{Path(s.file).name}:{s.line}" if s else None


def _walk(cnt: _Counter, region, mult: float | None, sc: StaticCount) -> None:
    for op in region.ops:
        cnt.evaluate(op)
        name = op.name
        if name in _LOADS or name in _STORES:
            if name in _LOADS:
                t = op.result_types[0] if op.result_types else None
            elif name == "store_view_tko":
                t = op.operand_types[0] if op.operand_types else None
            else:   # store_ptr_tko: pointers, values, [mask]
                t = op.operand_types[1] if len(op.operand_types) > 1 else None
            nb = t.nbytes() if t is not None else None
            masked = name.endswith("ptr_tko") and len(op.operand_types) > (1 if name in _LOADS else 2)
            execs = mult * sc.blocks if mult is not None else None
            total = nb * execs if (nb is not None and execs is not None) else None
            sc.memory_ops.append(MemOp(name, op.line, _src(op), "load" if name in _LOADS else "store",
                                       "ptr" if "ptr" in name else "view", t.text if t else "?", nb, execs, total,
                                       masked))
            key = "bytes_loaded" if name in _LOADS else "bytes_stored"
            cur = getattr(sc, key)
            setattr(sc, key, None if (cur is None or total is None) else cur + total)
            if nb is None:
                sc.unknown.append(f"{name} at line {op.line}: tile size not static")
        elif name in _OTHER_MEM:
            sc.notes.append(f"{name} at line {op.line} is not counted (atomics and multimem are outside the model)")
            sc.exact = False
        elif name in _MMA:
            ta = op.operand_types[0] if op.operand_types else None
            tb = op.operand_types[1] if len(op.operand_types) > 1 else None
            if ta is None or tb is None or len(ta.shape) < 2 or len(tb.shape) < 2 or None in ta.shape + tb.shape:
                sc.unknown.append(f"{name} at line {op.line}: operand shapes not static")
                sc.mma_flops = None
                continue
            m, k = ta.shape[-2], ta.shape[-1]
            n = tb.shape[-1]
            batch = math.prod(ta.shape[:-2]) if len(ta.shape) > 2 else 1
            per = 2.0 * m * n * k * batch
            execs = mult * sc.blocks if mult is not None else None
            fl = per * execs if execs is not None else None
            sc.mma_ops.append(MmaOp(name, op.line, _src(op), m, n, k, ta.elem or "?", execs, fl))
            sc.mma_flops = None if (sc.mma_flops is None or fl is None) else sc.mma_flops + fl
        elif name in _FLOAT_OPS:
            t = op.result_types[0] if op.result_types else None
            n_el = t.numel if t is not None and t.kind == "tile" else None
            if n_el is not None and mult is not None and sc.other_flops is not None:
                sc.other_flops += _FLOAT_COST.get(name, 1) * n_el * mult * sc.blocks
            elif mult is None:
                sc.other_flops = None
        elif name in ("reduce", "scan"):
            tin = op.operand_types[0] if op.operand_types else None
            tout = op.result_types[0] if op.result_types else None
            body_ops = sum(1 for r in op.regions for o in r.walk() if o.name in _FLOAT_OPS)
            if tin is not None and tin.numel is not None and mult is not None and sc.other_flops is not None:
                combines = tin.numel - (tout.numel if tout is not None and tout.numel else 0) \
                    if name == "reduce" else tin.numel
                sc.other_flops += max(0, combines) * max(1, body_ops) * mult * sc.blocks
            elif mult is None:
                sc.other_flops = None
            continue                      # the combiner region holds scalar ops only
        if name == "for":
            body = op.regions[0] if op.regions else None
            trips, how = cnt.trips(op)
            if trips is None:
                sc.unknown.append(how)
                sc.exact = False
                inner = None
            else:
                inner = None if mult is None else mult * trips
                if how == "grid-stride":
                    sc.notes.append(f"for at line {op.line}: grid-stride loop, {trips * sc.blocks:.0f} iterations "
                                    f"shared by {sc.blocks} blocks")
            if body is not None:
                for a in body.args:
                    cnt.env[a.name] = None
                _walk(cnt, body, inner, sc)
        elif name == "loop":
            sc.unknown.append(f"loop (while) at line {op.line}: no static trip count")
            sc.exact = False
            for r in op.regions:
                for a in r.args:
                    cnt.env[a.name] = None
                _walk(cnt, r, None, sc)
        elif name == "if" and op.regions:
            cond = cnt.val(op.operands[0]) if op.operands else None
            if isinstance(cond, bool):
                idx = 0 if cond else 1
                if idx < len(op.regions):
                    _walk(cnt, op.regions[idx], mult, sc)
            else:
                # count each branch apart, keep the one with more bytes (upper bound)
                best = None
                for r in op.regions:
                    trial = StaticCount(sc.kernel, sc.function, sc.grid)
                    _walk(cnt, r, mult, trial)
                    size = trial.bytes_total if trial.bytes_total is not None else math.inf
                    if best is None or size > best[0]:
                        best = (size, trial)
                if best is not None:
                    _merge(sc, best[1])
                sc.exact = False
                sc.notes.append(f"if at line {op.line}: condition not static, the larger branch is counted "
                                "(upper bound)")
        else:
            for r in op.regions:
                _walk(cnt, r, mult, sc)


def _merge(dst: StaticCount, src: StaticCount) -> None:
    for key in ("bytes_loaded", "bytes_stored", "mma_flops", "other_flops"):
        a, b = getattr(dst, key), getattr(src, key)
        setattr(dst, key, None if (a is None or b is None) else a + b)
    dst.memory_ops += src.memory_ops
    dst.mma_ops += src.mma_ops
    dst.unknown += src.unknown
    dst.notes += src.notes
    dst.exact = dst.exact and src.exact


def count_entry(entry, arg_values: dict[str, int | None], grid: tuple[int, ...], *, kernel: str = "",
                function: str = "") -> StaticCount:
    """Count one TileIR entry at ``arg_values`` (sizes by argument name) over ``grid`` (1-3
    positive ints; ValueError otherwise)."""
    if not grid or any((not isinstance(g, int)) or g <= 0 for g in grid) or len(grid) > 3:
        raise ValueError(f"grid must be 1-3 positive ints, not {grid!r}")
    sc = StaticCount(kernel or entry.symbol, function or entry.function_name, tuple(grid))
    cnt = _Counter(entry, arg_values, tuple(grid))
    _walk(cnt, entry.body, 1.0, sc)
    if sc.unknown:
        sc.exact = False
    if any(m.access == "ptr" for m in sc.memory_ops):
        sc.notes.append("pointer (gather/scatter) accesses are counted as full tiles; masks may move fewer bytes")
    if any(m.access == "view" for m in sc.memory_ops):
        sc.notes.append("tile (view) accesses count whole tiles, including partial edge tiles")
    # an f32 mma without a tf32 cast runs on FMA units, not tensor cores
    if any(m.operand_elem == "f32" for m in sc.mma_ops):
        sc.notes.append("mma on f32 operands: no tensor cores (FMA fallback); cast to tf32 for the tensor roof")
    return sc


# ---------------------------------------------------------------------------------------
# from a capture spec

def arg_values_from_bound(bound, entry, scalars=None) -> tuple[dict[str, int | None], str | None]:
    """Flattened entry argument values (array base, shapes, strides per array param; integer scalars
    whose value ``scalars`` gives)."""
    vals: list[int | None] = []
    for name, s in zip(bound.names, bound.specs):
        if isinstance(s, ArraySpec):
            shape = [d if isinstance(d, int) else None for d in s.shape]
            nd = len(shape)
            order = list(range(nd)) if s.layout == "C" else list(reversed(range(nd)))
            strides: list[int | None] = [None] * nd
            acc: int | None = 1
            for i in reversed(order):
                strides[i] = acc
                acc = acc * shape[i] if (acc is not None and shape[i] is not None) else None
            vals += [None, *shape, *strides]
        elif isinstance(s, ScalarSpec):
            v = (scalars or {}).get(name)
            vals.append(v if isinstance(v, int) and not isinstance(v, bool) else None)
        elif isinstance(s, ConstSpec):
            continue
    if len(vals) != len(entry.args):
        return {}, (f"the entry has {len(entry.args)} arguments but the spec flattens to {len(vals)}: "
                    "array shapes are unknown to the counter")
    return {a.name: v for a, v in zip(entry.args, vals)}, None


def tileir_of_capture(capture) -> tuple[str, Any, Any]:
    """(TileIR text, LoadedKernel, BoundSpec) for a capture spec; no tileiras run."""
    loaded = loader_mod.load_kernel(capture.kernel)
    specs = {k: (v if isinstance(v, (spec_mod.ArraySpec, spec_mod.ScalarSpec, spec_mod.ConstSpec))
                 else spec_mod.parse_spec(v, where=k)) for k, v in capture.args.items()}
    bound = spec_mod.bind(loaded, specs)
    bc = aot.export_bytecode(loaded, bound, hints=dict(capture.hints) if capture.hints else None)
    with tempfile.TemporaryDirectory(prefix="cutile-diag-sc-") as tmp:
        p = Path(tmp) / "kernel.tileirbc"
        p.write_bytes(bc)
        text = run_tool("tileirdisasm", [str(p)], timeout=120).stdout
    return text, loaded, bound


_CACHE: dict[Any, StaticCount] = {}


def static_count(capture) -> StaticCount:
    """The count of a capture spec: compiled to TileIR (AOT) and counted, with the arrays'
    footprint; cached per spec, hints, scalars and the source file's mtime."""
    try:
        mtime = Path(ref_file(capture.kernel)).stat().st_mtime
    except OSError:
        mtime = None
    scalars = getattr(capture, "scalars", None) or {}
    key = (capture.kernel, tuple(sorted((k, str(v)) for k, v in capture.args.items())), tuple(capture.grid),
           tuple(sorted((capture.hints or {}).items())), tuple(sorted((k, str(v)) for k, v in scalars.items())), mtime)
    if key in _CACHE:
        return _CACHE[key]
    text, loaded, bound = tileir_of_capture(capture)
    mod = parse_tileir(text, path=f"{capture.kernel} (tileirdisasm)")
    entry = mod.entries[0]
    values, why = arg_values_from_bound(bound, entry, scalars)
    sc = count_entry(entry, values, tuple(capture.grid), kernel=entry.symbol, function=loaded.function_name)
    if why:
        sc.notes.append(why)
    sizes = [s.nbytes() for s in bound.specs if hasattr(s, "nbytes")]
    sc.footprint_bytes = float(sum(sizes)) if sizes and None not in sizes else None
    _CACHE[key] = sc
    return sc


def count_workload(wl, cfg, num_sms: int) -> StaticCount | None:
    """The count of a workload configuration's capture spec, or None when it has none."""
    cap = wl.capture(cfg, num_sms)
    if cap is None:
        return None
    return static_count(cap)


def cross_check(sc: StaticCount, declared_flops: float, declared_bytes: float,
                compute_unit: tuple[str, str] | None = None) -> tuple[dict[str, float | None], list[str]]:
    """Compare declared FLOPs/bytes with the static count; notes say what a mismatch means."""
    notes: list[str] = []
    ratios: dict[str, float | None] = {"bytes": None, "mma_flops": None}
    tb = sc.bytes_total
    if tb is not None and declared_bytes > 0:
        r = tb / declared_bytes
        ratios["bytes"] = r
        if r < 0.95:
            notes.append(f"the kernel issues {tb / 1e6:.1f} MB but the workload declares {declared_bytes / 1e6:.1f} MB "
                         f"as the minimum: the declared byte count is too high (achieved TB/s would be inflated), "
                         "or the kernel skips work")
        elif r > 1.05:
            notes.append(f"tile traffic is {r:.1f}x the declared minimum bytes: re-reads the caches must absorb"
                         + (" (expected for a tiled GEMM)" if sc.mma_ops else ""))
        else:
            notes.append(f"static bytes match the declared bytes ({r:.2f}x)")
    elif tb is None:
        notes.append("static bytes unknown: " + ("; ".join(sc.unknown) or "see the memory ops"))
    if sc.mma_ops and sc.mma_flops is not None and declared_flops > 0:
        r = sc.mma_flops / declared_flops
        ratios["mma_flops"] = r
        if abs(r - 1) > 0.05:
            notes.append(f"mma FLOPs in the TileIR are {r:.2f}x the declared FLOPs (padding of edge tiles, or a "
                         "declared count that does not match the kernel)")
        if compute_unit and compute_unit[1] == "tensor" and any(m.operand_elem == "f32" for m in sc.mma_ops):
            notes.append("the workload's roof is the tensor core, but the mma runs on f32 operands (FMA fallback)")
    return ratios, notes
