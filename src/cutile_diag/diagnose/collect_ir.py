"""Static evidence from TileIR: what the kernel's structure says, with the IR line of each finding.

The analyses are small dataflow walks over one entry:

* address analysis of pointer gathers — an affine abstract value (``lane stride``, known
  divisor, program-position dependence) per SSA value proves ``bid * T + iota(T)`` style
  indices, i.e. gathers that are really one contiguous, tile-aligned block per program;
* backward slices of loop bounds and store indices — persistent grid-stride loops, 2-D tile
  grids, GROUP_SIZE_M-style remaps (each output index mixes a division and a remainder of
  the program position);
* token origins — which loads/stores wait on another memory op;
* hints, math spellings (exp vs exp2, missing flush_to_zero / approx), mma operand dtypes,
  tile sizes, and a tile-level arithmetic intensity of the hottest region.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from ..ir_parsers.tileir import Entry, Module, Op, parse_tileir
from ..ir_parsers.tileir_ops import LOADS, STORES
from ..ir_parsers.tileir_types import ELEM_BITS
from .evidence import Evidence, Site
from ..errors import ParseError
from .redundant import find_rereads
from ..errors import UsageError

_ATOMICS = ("atomic_rmw_tko", "atomic_cas_tko", "atomic_red_view_tko")
_FTZ_OPS = ("exp2", "rsqrt", "sqrt", "divf")
_NONZERO_PADDING = ("neg_inf", "pos_inf", "nan", "neg_zero")
# TMA limits (references/knob-catalog.md): ~16K elements per box (tileiras 13.5 splits a larger
# tile into several boxes of at most 256 rows), and >= 16 contiguous bytes per tile row
TMA_BOX_ELEMS = 16384
TMA_MIN_CONTIG_BYTES = 16


@dataclass(frozen=True)
class Aff:
    """value(lane) = base + stride * lane along the last dimension."""
    stride: int | None        # None: not affine / unknown
    div: int                  # known divisor of base (0: base is exactly 0)
    const: int | None         # exact base value when known and lane-invariant
    pos: bool                 # base depends on the program position (block id / persistent iv)
    desc: str
    # 2-D+ arrays: a lane-invariant index times the stride of an outer dimension (a broadcast row
    # index) selects the row, it does not misalign the tile; ``outer`` marks such a term and
    # ``odiv`` is the known divisor of the base without them (None: same as ``div``)
    outer: bool = False
    odiv: int | None = None

    @property
    def inner_div(self) -> int:
        """Divisor of the in-row part of the base (0: exactly 0)."""
        if self.outer:
            return 0
        return self.div if self.odiv is None else self.odiv

    @staticmethod
    def unknown(desc: str = "?") -> "Aff":
        """An index of unknown form (not affine, divisor 1)."""
        return Aff(None, 1, None, False, desc)


def _gcd(a: int, b: int) -> int:
    return math.gcd(a, b)


def _int_const(op: Op) -> int | None:
    m = re.fullmatch(r"\s*[iu]\d+\s*:\s*(-?\d+)\s*", op.attrs.get("value", ""))
    return int(m.group(1)) if m else None


class _Analysis:
    def __init__(self, entry: Entry, ir_name: str, ir_path: str | None):
        self.entry = entry
        self.ir_name = ir_name
        self.ir_path = ir_path
        self.ops: list[Op] = list(entry.walk())
        self.defs: dict[str, tuple[Op, int]] = {}
        self.block_args: dict[str, tuple[Op, int, int]] = {}
        self.args = {a.name for a in entry.args}
        self.arg_index = {a.name: i for i, a in enumerate(entry.args)}
        for op in self.ops:
            for i, r in enumerate(op.results):
                self.defs[r] = (op, i)
            if op.result_group:
                self.defs[op.result_group] = (op, -1)
            for ri, reg in enumerate(op.regions):
                for ai, a in enumerate(reg.args):
                    self.block_args[a.name] = (op, ri, ai)
        self._aff: dict[tuple, Aff] = {}
        # name -> [(scope of the definition, ("def", op, idx) | ("arg", owner, region, index))]
        self._scoped: dict[str, list[tuple[tuple, tuple]]] = {}
        for op in self.ops:
            sc = self.scope(op)
            for i, r in enumerate(op.results):
                self._scoped.setdefault(r, []).append((sc, ("def", op, i)))
            if op.result_group:
                self._scoped.setdefault(op.result_group, []).append((sc, ("def", op, -1)))
            for ri, reg in enumerate(op.regions):
                for ai, a in enumerate(reg.args):
                    self._scoped.setdefault(a.name, []).append((sc + ((id(op), ri),), ("arg", op, ri, ai)))
        # integer arguments that follow a pointer argument are that array's shape and strides
        # (the calling convention flattens arrays to ptr, shape..., strides...)
        self.dim_args: set[str] = set()
        after_ptr = False
        for a in entry.args:
            t = getattr(a.type, "text", "") or str(a.type)
            if "ptr<" in t:
                after_ptr = True
            elif after_ptr and re.search(r"tile<i(32|64)>", t):
                self.dim_args.add(a.name)
            else:
                after_ptr = False
        self._persistent_fors = {id(op) for op in self.ops if op.name == "for" and self._is_grid_stride(op)}

    # --- sites
    def site(self, op: Op, detail: str | None = None) -> Site:
        src = op.source
        return Site(source=f"{self.ir_name}:{op.line}", detail=detail if detail is not None else op.text,
                    file=self.ir_path, line=op.line, python=src.short if src else None, op=op.name)

    def source_of(self, ops: list[Op]) -> str:
        if not ops:
            return self.ir_name
        first = ops[0]
        py = f" ({first.source.short})" if first.source else ""
        more = f" +{len(ops) - 1}" if len(ops) > 1 else ""
        return f"{self.ir_name}:{first.line}{py}{more}"

    # --- dataflow helpers
    def producer(self, name: str) -> Op | None:
        d = self.defs.get(name) or self.defs.get(name.split("#")[0])
        return d[0] if d else None

    def slice(self, name: str, *, through_loads: bool = False, limit: int = 400) -> list[Op]:
        """Ops the value depends on (index arithmetic; stops at loads unless asked)."""
        seen: set[int] = set()
        out: list[Op] = []
        stack = [name]
        while stack and len(out) < limit:
            n = stack.pop()
            if n in self.block_args:
                owner, ri, ai = self.block_args[n]
                if owner.name == "for" and ai == 0:
                    if id(owner) not in seen:
                        seen.add(id(owner))
                        out.append(owner)
                        stack.extend(u for u, r in zip(owner.operands, owner.operand_roles) if r in ("lower", "step"))
                continue
            op = self.producer(n)
            if op is None or id(op) in seen:
                continue
            seen.add(id(op))
            out.append(op)
            if op.name in LOADS and not through_loads:
                continue
            stack.extend(op.operands)
        return out

    def _is_grid_stride(self, op: Op) -> bool:
        roles = dict(zip(op.operand_roles, op.operands))
        lower, step = roles.get("lower"), roles.get("step")
        if not lower or not step:
            return False
        lo_ops = {o.name for o in self.slice(lower)}
        st_ops = {o.name for o in self.slice(step)}
        return "get_tile_block_id" in lo_ops and "get_num_tile_blocks" in st_ops

    def position_dependent(self, name: str) -> bool:
        """Does the value depend on which program runs (block id or a persistent loop index)?"""
        for op in self.slice(name):
            if op.name == "get_tile_block_id":
                return True
            if op.name == "for" and id(op) in self._persistent_fors:
                return True
        return False

    # --- affine address analysis
    @staticmethod
    def scope(op: Op) -> tuple:
        """Where ``op`` sits: (ancestor, region index) pairs, outermost first."""
        out = []
        child, p = op, op.parent
        while p is not None:
            out.append((id(p), child.region_index))
            child, p = p, p.parent
        return tuple(reversed(out))

    def _resolve(self, name: str, scope: tuple | None):
        """The definition of ``name`` visible from ``scope``: the disassembler reuses SSA names
        in sibling regions (two loops both define %27), so a global name map is ambiguous."""
        if scope is None:
            if name in self.block_args:
                return ("arg",) + self.block_args[name]
            d = self.defs.get(name)
            return ("def",) + d if d else None
        best, best_len = None, -1
        for sc, entry in self._scoped.get(name, ()):
            if len(sc) > best_len and scope[:len(sc)] == sc:
                best, best_len = entry, len(sc)
        return best

    def aff(self, name: str, depth: int = 0, scope: tuple | None = None) -> Aff:
        if name in self.args:
            return Aff(0, 1, None, False, f"arg{self.arg_index[name]}", outer=name in self.dim_args)
        found = self._resolve(name, scope)
        key = (name, id(found[1]) if found else None)
        if key in self._aff:
            return self._aff[key]
        if depth > 60:
            return Aff.unknown()
        self._aff[key] = Aff.unknown()       # cycle guard
        res = self._aff_compute(name, depth, found)
        self._aff[key] = res
        return res

    def _aff_compute(self, name: str, depth: int, found) -> Aff:
        if found is None:
            return Aff.unknown(name)
        if found[0] == "arg":
            _, owner, ri, ai = found
            if owner.name == "for" and ai == 0:
                roles = dict(zip(owner.operand_roles, owner.operands))
                sc = self.scope(owner)
                lo = self.aff(roles["lower"], depth + 1, sc) if "lower" in roles else Aff.unknown()
                st = self.aff(roles["step"], depth + 1, sc) if "step" in roles else Aff.unknown()
                return Aff(0, _gcd(lo.div, st.div) or 1, None, id(owner) in self._persistent_fors, "t")
            return Aff.unknown(name)
        _, op, idx = found
        sc = self.scope(op)
        nm = op.name
        ops = op.operands
        if nm == "iota":
            return Aff(1, 0, None, False, f"iota({op.result_types[0].shape[-1] if op.result_types and op.result_types[0].shape else '?'})")
        if nm == "constant":
            c = _int_const(op)
            if c is None:
                return Aff.unknown("const")
            return Aff(0, abs(c), c, False, str(c))
        if nm == "get_tile_block_id":
            return Aff(0, 1, None, True, "bid." + "xyz"[idx] if 0 <= idx < 3 else "bid")
        if nm == "get_num_tile_blocks":
            return Aff(0, 1, None, False, "nblocks")
        if nm == "assume":
            src = self.aff(ops[0], depth + 1, sc) if ops else Aff.unknown()
            dv = op.attrs.get("div_by")
            if dv and dv.isdigit() and src.stride == 0:
                n = int(dv)
                new_div = src.div * n // _gcd(src.div, n) if src.div else 0
                return Aff(src.stride, new_div, src.const, src.pos, src.desc, src.outer)
            return src
        if nm in ("reshape", "broadcast", "exti", "trunci"):
            if not ops:
                return Aff.unknown()
            src = self.aff(ops[0], depth + 1, sc)
            if nm == "broadcast" and src.stride not in (0, None):
                it = op.operand_types[0] if op.operand_types else None
                rt = op.result_types[0] if op.result_types else None
                if not (it and rt and it.shape and rt.shape and it.shape[-1] == rt.shape[-1]):
                    return Aff.unknown(src.desc)
            return src
        if nm in ("addi", "subi") and len(ops) >= 2:
            a, b = self.aff(ops[0], depth + 1, sc), self.aff(ops[1], depth + 1, sc)
            if a.stride is None or b.stride is None:
                return Aff.unknown()
            sign = 1 if nm == "addi" else -1
            const = (a.const + sign * b.const) if a.const is not None and b.const is not None else None
            return Aff(a.stride + sign * b.stride, _gcd(a.div, b.div), const, a.pos or b.pos,
                       f"{a.desc} {'+' if sign > 0 else '-'} {b.desc}", a.outer and b.outer,
                       _gcd(a.inner_div, b.inner_div))
        if nm in ("muli", "shli") and len(ops) >= 2:
            a, b = self.aff(ops[0], depth + 1, sc), self.aff(ops[1], depth + 1, sc)
            if nm == "shli":
                if b.const is None or b.stride != 0 or b.const < 0:
                    return Aff.unknown()
                b = Aff(0, 1 << b.const, 1 << b.const, False, str(1 << b.const))
            if a.stride is None or b.stride is None:
                return Aff.unknown()
            for x, y in ((a, b), (b, a)):
                if y.stride == 0 and y.const is not None:
                    c = y.const
                    desc = x.desc if c == 1 else f"{c}*({x.desc})" if " " in x.desc else f"{c}*{x.desc}"
                    return Aff(x.stride * c, x.div * abs(c), x.const * c if x.const is not None else None,
                               x.pos, desc, x.outer, None if x.odiv is None else x.odiv * abs(c))
            if a.stride == 0 and b.stride == 0:
                const = a.const * b.const if a.const is not None and b.const is not None else None
                # row * (an array's outer stride): a row offset, whatever the row
                return Aff(0, a.div * b.div, const, a.pos or b.pos, f"{a.desc}*{b.desc}", a.outer or b.outer)
            return Aff.unknown()
        if nm == "offset" and len(ops) >= 2:
            p, i = self.aff(ops[0], depth + 1, sc), self.aff(ops[1], depth + 1, sc)
            if p.stride == 0 and i.stride is not None:
                return Aff(i.stride, i.div, i.const, i.pos or p.pos, i.desc, i.outer, i.odiv)
            return Aff.unknown()
        return Aff.unknown(nm)

    # --- tokens
    def token_origins(self, name: str, seen: set | None = None) -> list[Op]:
        seen = seen if seen is not None else set()
        if name in seen:
            return []
        seen.add(name)
        if name in self.block_args:
            owner, ri, ai = self.block_args[name]
            out: list[Op] = []
            inits = [u for u, r in zip(owner.operands, owner.operand_roles) if r == "init"]
            k = ai - 1 if owner.name == "for" else ai
            if owner.name == "for" and ai == 0:
                return []
            if 0 <= k < len(inits):
                out += self.token_origins(inits[k], seen)
            for carried in self._carried(owner, k):
                out += self.token_origins(carried, seen)
            return out
        op = self.producer(name)
        if op is None or op.name == "make_token":
            return []
        if op.name == "join_tokens":
            return [o for u in op.operands for o in self.token_origins(u, seen)]
        if op.name.endswith("_tko"):
            return [op]
        if op.name in ("for", "loop", "if"):
            idx = self.defs[name][1] if name in self.defs else 0
            return [o for v in self._yielded(op, idx) for o in self.token_origins(v, seen)]
        return []

    def _carried(self, owner: Op, k: int) -> list[str]:
        out = []
        for reg in owner.regions:
            for op in reg.walk():
                if op.name == "continue" and self._enclosing_loop(op) is owner and k < len(op.operands):
                    out.append(op.operands[k])
        return out

    def _yielded(self, owner: Op, k: int) -> list[str]:
        out = []
        term = "yield" if owner.name == "if" else "continue"
        for reg in owner.regions:
            for op in reg.ops:
                if op.name in (term, "break") and k < len(op.operands):
                    out.append(op.operands[k])
        return out

    @staticmethod
    def _enclosing_loop(op: Op) -> Op | None:
        p = op.parent
        while p is not None and p.name not in ("for", "loop"):
            p = p.parent
        return p


def _has_hint(op_or_entry, key: str) -> bool:
    return any(isinstance(d, dict) and key in d for d in op_or_entry.hints.values())


def _hint_value(op_or_entry, key: str):
    d = op_or_entry.hints.get("default", {})
    if key in d:
        return d[key]
    for k, dd in op_or_entry.hints.items():
        if isinstance(dd, dict) and key in dd:
            return dd[key]
    return None


def _store_value_type(op: Op):
    if op.name == "store_ptr_tko":
        return op.operand_types[1] if len(op.operand_types) > 1 else None
    return op.operand_types[0] if op.operand_types else None


def _tma_view(op: Op) -> tuple[tuple[int, ...], int, int] | None:
    """(tile shape, contiguous tile dim, element bytes) of a 2-D+ tile access that may use TMA."""
    i = 0 if op.name == "load_view_tko" else 1
    view = op.operand_types[i] if len(op.operand_types) > i else None
    if view is None or view.kind != "partition_view" or _hint_value(op, "allow_tma") is False:
        return None
    shape, bits = view.tile_shape, ELEM_BITS.get(view.view_elem or "")
    inner = view.inner
    strides = [s.strip() for s in (inner.param.get("strides", "") if inner else "").strip("[]").split(",")]
    if not shape or len(shape) < 2 or not bits or "1" not in strides:
        return None
    contiguous = len(strides) - 1 - strides[::-1].index("1")       # the array dim with stride 1
    dim_map = re.findall(r"\d+", view.param.get("dim_map", ""))     # order="F": tile dim i -> array dim
    if dim_map:
        dims = [int(d) for d in dim_map]
        if contiguous not in dims:
            return None
        contiguous = dims.index(contiguous)
    return shape, contiguous, bits // 8 or 1


def _moved_type(op: Op):
    return (op.result_types[0] if op.result_types else None) if op.name in LOADS else _store_value_type(op)


def _flops(op: Op) -> float:
    cls = op.op_class
    if op.name in ("mmaf", "mmai", "mmaf_scaled") and len(op.operand_types) >= 2:
        a, b = op.operand_types[0].shape, op.operand_types[1].shape
        if len(a) >= 2 and len(b) >= 2 and None not in a + b:
            batch = math.prod(a[:-2]) if len(a) > 2 else 1
            return 2.0 * batch * a[-2] * a[-1] * b[-1]
        return 0.0
    if cls == "float":
        t = op.result_types[0] if op.result_types else None
        n = t.numel if t is not None else None
        return float(n or 0) * (2.0 if op.name == "fma" else 1.0)
    if cls == "reduction":
        t = op.operand_types[0] if op.operand_types else None
        return float((t.numel if t is not None else 0) or 0)
    return 0.0


def collect_tileir(module: Module | str, ev: Evidence | None = None, *, entry: str | None = None,
                   ir_file: str | None = None) -> Evidence:
    """Add the ``ir.*`` facts of one TileIR entry to ``ev`` (new when None): ops, tile sizes,
    MMAs, loops and persistence, hints, re-reads and the FLOP/byte counts per iteration."""
    if isinstance(module, str):
        module = parse_tileir(module, path=ir_file)
    path = ir_file or module.path
    ir_name = Path(path).name if path else "kernel.tileir"
    ent = _pick_entry(module, entry)
    ev = ev if ev is not None else Evidence(kernel=ent.function_name)
    if ev.kernel is None:
        ev.kernel = ent.function_name
    a = _Analysis(ent, ir_name, str(path) if path else None)
    ev.collected.append(f"tileir: {ir_name} (@{ent.function_name})")
    ev.context.setdefault("ir_file", str(path) if path else None)
    ev.context.setdefault("symbol", ent.symbol)
    ent_site = Site(source=f"{ir_name}:{ent.line}", detail=f"entry @{ent.function_name}", file=a.ir_path,
                    line=ent.line, python=ent.source.short if ent.source else None, op="entry")

    def count(key: str, ops: list[Op], what: str, detail_fn=None) -> None:
        sites = [a.site(o, detail_fn(o) if detail_fn else None) for o in ops]
        ev.add(key, len(ops), a.source_of(ops) if ops else ir_name,
               f"{len(ops)} {what}" if ops else f"no {what}", sites)

    ev.add("ir.kernel", ent.function_name, f"{ir_name}:{ent.line}", ent.symbol, [ent_site])
    ev.add("ir.entries", len(module.entries), ir_name,
           "" if len(module.entries) == 1 else f"analysing @{ent.function_name} of {len(module.entries)}")
    if len(module.entries) > 1:
        ev.notes.append(f"{ir_name} holds {len(module.entries)} entries; analysed @{ent.function_name} "
                        "(pick another with --entry)")
    ev.add("ir.ops", len(a.ops), ir_name)

    ops = a.ops
    loads = [o for o in ops if o.name in LOADS]
    stores = [o for o in ops if o.name in STORES]
    view_loads = [o for o in loads if o.name == "load_view_tko"]
    view_stores = [o for o in stores if o.name == "store_view_tko"]
    ptr_loads = [o for o in loads if o.name == "load_ptr_tko"]
    ptr_stores = [o for o in stores if o.name == "store_ptr_tko"]
    count("ir.loads", loads, "global loads")
    count("ir.stores", stores, "global stores")
    count("ir.view_loads", view_loads, "tile-indexed loads")
    count("ir.view_stores", view_stores, "tile-indexed stores")
    count("ir.ptr_loads", ptr_loads, "pointer loads (gathers)")
    count("ir.ptr_stores", ptr_stores, "pointer stores (scatters)")
    count("ir.atomics", [o for o in ops if o.name in _ATOMICS], "atomics")
    count("ir.gather_scatter_views", [o for o in ops if o.name == "make_gather_scatter_view"],
          "gather/scatter views")

    # --- pointer gathers: contiguous and tile-aligned per program?
    contiguous, irregular = [], []
    details: dict[int, str] = {}
    for o in ptr_loads + ptr_stores:
        ptr_t = o.operand_types[0] if o.operand_types else None
        shape = ptr_t.shape if ptr_t is not None else ()
        lanes = shape[-1] if shape else None
        aff = a.aff(o.operands[0], scope=a.scope(o)) if o.operands else Aff.unknown()
        # 2-D gathers: the row term (lane-invariant index x outer stride) selects the row; the
        # in-row offset must still be a whole number of tiles
        aligned = aff.div == 0 or (lanes is not None and (aff.div % lanes == 0 or aff.inner_div % lanes == 0))
        if aff.stride == 1 and len(shape) == 1 and aligned:
            # program-independent (a weight row read by every program) is a tile load all the same
            contiguous.append(o)
            details[id(o)] = (f"{o.name}: addresses {aff.desc} — stride 1, {lanes}-element aligned: "
                              + ("one contiguous tile per program" if aff.pos else
                                 "one contiguous tile, the same in every program"))
        else:
            irregular.append(o)
            why = ("not affine in the lane" if aff.stride is None else
                   f"lane stride {aff.stride}" if aff.stride != 1 else
                   "multi-dimensional" if len(shape) != 1 else
                   "not tile-aligned")
            details[id(o)] = f"{o.name}: {why}"
    count("ir.block_contiguous_gathers", contiguous, "block-contiguous pointer gathers/scatters",
          lambda o: details[id(o)])
    count("ir.irregular_gathers", irregular, "irregular pointer gathers/scatters", lambda o: details[id(o)])

    # --- hints on memory ops
    no_lat = [o for o in loads if not _has_hint(o, "latency")]
    count("ir.loads_without_latency", no_lat, "loads without a latency hint")
    count("ir.loop_loads_without_latency", [o for o in no_lat if o.loop_depth > 0],
          "loop loads without a latency hint")
    count("ir.stores_without_latency", [o for o in stores if not _has_hint(o, "latency")],
          "stores without a latency hint")
    count("ir.view_stores_allow_tma_unset", [o for o in view_stores if not _has_hint(o, "allow_tma")],
          "view stores without allow_tma")
    count("ir.view_stores_allow_tma_false", [o for o in view_stores if _hint_value(o, "allow_tma") is False],
          "view stores with allow_tma = false")
    count("ir.view_loads_allow_tma_false", [o for o in view_loads if _hint_value(o, "allow_tma") is False],
          "view loads with allow_tma = false")
    count("ir.view_loads_allow_tma_unset", [o for o in view_loads if not _has_hint(o, "allow_tma")],
          "view loads without allow_tma")
    padded = [o for o in view_loads if o.operand_types and (o.operand_types[0].padding or "") in _NONZERO_PADDING]
    count("ir.nonzero_padding_loads", padded, "view loads with non-zero padding",
          lambda o: f"padding_value = {o.operand_types[0].padding}: TMA pads only with zero")

    # --- tile shapes vs the TMA limits
    oversize, narrow, tdet = [], [], {}
    for o in view_loads + view_stores:
        tv = _tma_view(o)
        if tv is None:
            continue
        shape, c, nbytes = tv
        tile = "x".join(map(str, shape))
        if math.prod(shape) > TMA_BOX_ELEMS:
            oversize.append(o)
            tdet[(id(o), 0)] = (f"tile {tile} = {math.prod(shape)} elements > one TMA box ({TMA_BOX_ELEMS}): "
                                "several boxes per access")
        if shape[c] * nbytes < TMA_MIN_CONTIG_BYTES:
            narrow.append(o)
            tdet[(id(o), 1)] = (f"tile {tile}: contiguous dimension {shape[c]} x {nbytes} B = {shape[c] * nbytes} B "
                                f"< {TMA_MIN_CONTIG_BYTES} B: not TMA-eligible")
    count("ir.tma_oversize_tiles", oversize, "tiles over one TMA box", lambda o: tdet[(id(o), 0)])
    count("ir.tma_narrow_tiles", narrow, "tiles with a contiguous dimension under 16 bytes",
          lambda o: tdet[(id(o), 1)])

    # --- loops and scheduling structure
    fors = [o for o in ops if o.name == "for"]
    whiles = [o for o in ops if o.name == "loop"]
    persistent = [o for o in fors if id(o) in a._persistent_fors]
    count("ir.for_loops", fors, "for loops")
    count("ir.while_loops", whiles, "while loops")
    ev.add("ir.persistent_loop", bool(persistent), a.source_of(persistent) if persistent else ir_name,
           "grid-stride for loop (lower = block id, step = grid size)" if persistent
           else "no grid-stride loop: one program per tile",
           [a.site(o) for o in persistent])
    pw = []
    for o in whiles:
        body = [x.name for r in o.regions for x in r.walk()]
        if "get_num_tile_blocks" in body or any(x.name == "get_num_tile_blocks" for x in a.slice(o.operands[0])
                                                 if o.operands):
            pw.append(o)
    ev.add("ir.persistent_while", bool(pw), a.source_of(pw) if pw else ir_name,
           "grid-stride loop written as while" if pw else "", [a.site(o) for o in pw])
    depth = max((o.loop_depth + 1 for o in fors + whiles), default=0)
    ev.add("ir.max_loop_depth", depth, ir_name)

    # --- grid: axes used, 2-D output grids, swizzle
    used = {u for o in ops for u in o.operands}
    axes = [i for o in ops if o.name == "get_tile_block_id" for i, r in enumerate(o.results) if r in used]
    bid_ops = [o for o in ops if o.name == "get_tile_block_id" and any(r in used for r in o.results)]
    rank = (max(axes) + 1) if axes else 0
    ev.add("ir.grid_rank", rank, a.source_of(bid_ops) if bid_ops else ir_name,
           f"block-id axes read: {sorted(set('xyz'[i] for i in axes))}" if axes else "the kernel never reads ct.bid",
           [a.site(o) for o in bid_ops])
    grid2d, swz = [], []
    for o in view_stores:
        idx = [u for u, r in zip(o.operands, o.operand_roles) if r == "index"]
        dep = [u for u in idx if a.position_dependent(u)]
        if len(dep) >= 2:
            grid2d.append(o)
            mixes = []
            for u in dep:
                names = {x.name for x in a.slice(u) if x.name in ("divi", "remi") and x.operands
                         and a.position_dependent(x.operands[0])}
                mixes.append({"divi", "remi"} <= names)
            if all(mixes):
                swz.append(o)
    ev.add("ir.tile_grid_2d", bool(grid2d), a.source_of(grid2d) if grid2d else ir_name,
           "output stored as a 2-D grid of tiles indexed by program position" if grid2d else "",
           [a.site(o) for o in grid2d])
    ev.add("ir.swizzled", bool(swz), a.source_of(swz) if swz else ir_name,
           "both output indices mix a division and a remainder of the program position (grouped order)"
           if swz else ("output tile indices follow the program position directly" if grid2d else ""),
           [a.site(o) for o in (swz or grid2d)])

    # --- mma
    mmas = [o for o in ops if o.name in ("mmaf", "mmai", "mmaf_scaled")]
    count("ir.mma_ops", mmas, "mma ops")
    f32 = [o for o in mmas if o.name == "mmaf" and any(t.elem == "f32" for t in o.operand_types[:2])]
    tf32 = [o for o in mmas if o.name == "mmaf" and any(t.elem == "tf32" for t in o.operand_types[:2])]
    count("ir.mma_f32_operands", f32, "mma ops with f32 operands",
          lambda o: f"{o.text.split(':', 1)[0].strip()} : {', '.join(t.text for t in o.operand_types[:2])}")
    count("ir.mma_tf32_operands", tf32, "mma ops with tf32 operands")
    shapes = []
    for o in mmas:
        if len(o.operand_types) >= 2 and len(o.operand_types[0].shape) >= 2 and len(o.operand_types[1].shape) >= 2:
            (m, k), n = o.operand_types[0].shape[-2:], o.operand_types[1].shape[-1]
            shapes.append([m, n, k])
    if mmas:
        ev.add("ir.mma_shapes", shapes, a.source_of(mmas), "[M, N, K] per mma", [a.site(o) for o in mmas])
        dims = [d for s in shapes for d in s if d is not None]
        if dims:
            ev.add("ir.mma_min_dim", min(dims), a.source_of(mmas))

    # --- math spellings
    count("ir.exp_ops", [o for o in ops if o.name == "exp"], "exp ops")
    count("ir.exp2_ops", [o for o in ops if o.name == "exp2"], "exp2 ops")

    def f32_result(o: Op) -> bool:
        return bool(o.result_types) and o.result_types[0].elem == "f32"
    ftz = [o for o in ops if o.name in _FTZ_OPS and f32_result(o) and "flush_to_zero" not in o.keywords]
    count("ir.ftz_candidates", ftz, "f32 ops without flush_to_zero")
    divs = [o for o in ops if o.name == "divf" and f32_result(o) and o.attrs.get("rounding") != "approx"]
    count("ir.f32_div_full_precision", divs, "full-precision f32 divisions")

    # --- tokens
    count("ir.make_tokens", [o for o in ops if o.name == "make_token"], "make_token ops")
    count("ir.join_tokens", [o for o in ops if o.name == "join_tokens"], "join_tokens ops")
    ordered_loads, ordered_stores = [], []
    tdetail: dict[int, str] = {}
    for o in loads + stores:
        toks = [u for u, r in zip(o.operands, o.operand_roles) if r == "token"]
        origins = [p for t in toks for p in a.token_origins(t) if p is not o or o.name in STORES]
        if origins:
            (ordered_loads if o in loads else ordered_stores).append(o)
            tdetail[id(o)] = ("waits on " + ", ".join(sorted({f"{p.name} (line {p.line})" for p in origins})))
    count("ir.token_ordered_loads", ordered_loads, "token-ordered loads", lambda o: tdetail[id(o)])
    count("ir.token_ordered_stores", ordered_stores, "token-ordered stores", lambda o: tdetail[id(o)])

    # --- entry hints
    occ = _hint_value(ent, "occupancy")
    ctas = _hint_value(ent, "num_cta_in_cga")
    nww = _hint_value(ent, "num_worker_warps_per_cta")
    hint_txt = ", ".join(f"{k} = {{{', '.join(f'{a_}={b}' for a_, b in d.items())}}}"
                         for k, d in ent.hints.items()) or "none"
    for key, val in (("ir.hint_occupancy", occ), ("ir.hint_num_ctas", ctas), ("ir.hint_num_worker_warps", nww)):
        ev.add(key, int(val) if isinstance(val, (int, float)) and not isinstance(val, bool) else 0,
               f"{ir_name}:{ent.line}", f"optimization_hints=<{hint_txt}>", [ent_site])
    ev.add("ir.kernel_hints_set", any(v is not None for v in (occ, ctas, nww)), f"{ir_name}:{ent.line}",
           f"optimization_hints=<{hint_txt}>", [ent_site])

    # --- tiles
    moved = [(o, _moved_type(o)) for o in loads + stores]
    sized = [(o, t) for o, t in moved if t is not None and t.numel]
    if sized:
        o_max, t_max = max(sized, key=lambda p: p[1].numel)
        ev.add("ir.max_tile_elems", int(t_max.numel), a.source_of([o_max]), t_max.text, [a.site(o_max)])
        ob, tb = max(sized, key=lambda p: p[1].nbytes() or 0)
        ev.add("ir.max_tile_bytes", int(tb.nbytes() or 0), a.source_of([ob]), tb.text, [a.site(ob)])
    else:
        ev.add("ir.max_tile_elems", 0, ir_name, "no memory ops")
        ev.add("ir.max_tile_bytes", 0, ir_name, "no memory ops")
    f32_tiles = [(o, o.result_types[0]) for o in ops if o.op_class in ("float", "reduction") and o.result_types
                 and o.result_types[0].elem == "f32" and o.result_types[0].numel]
    if f32_tiles:
        of, tf = max(f32_tiles, key=lambda p: p[1].numel)
        ev.add("ir.max_f32_tile_elems", int(tf.numel), a.source_of([of]), tf.text, [a.site(of)])
    else:
        ev.add("ir.max_f32_tile_elems", 0, ir_name, "no f32 element-wise tiles")
    count("ir.reductions", [o for o in ops if o.name in ("reduce", "scan")], "reductions")
    count("ir.debug_ops", [o for o in ops if o.name in ("print_tko", "assert")], "print/assert ops")
    _rereads(a, ev)

    _intensity(a, ev, mmas, loads, stores)
    return ev


def _rereads(a: _Analysis, ev: Evidence) -> None:
    """The same array loaded with the same index expression in more than one pass."""
    rep = find_rereads(a.entry, _moved_type)
    sites, srcs = [], []
    for g in rep.groups:
        first = g.loads[0]
        for k, ld in enumerate(g.loads):
            role = "first read" if k == 0 else f"re-read (pass {k + 1} of {g.passes})"
            sites.append(a.site(ld, f"{role} of {g.array or 'the array'}, {g.tile_bytes} B per tile"
                                    + (f"; same index as line {first.source.short}" if k and first.source else "")))
        srcs.extend(g.loads)
    detail = (f"{rep.redundant_loads} load(s) re-read data an earlier pass loaded with the same index"
              if rep.groups else "every array/index is loaded in one pass")
    ev.add("ir.redundant_loads", rep.redundant_loads, a.source_of(srcs) if srcs else a.ir_name, detail, sites)
    ev.add("ir.read_passes", rep.max_passes, a.ir_name,
           f"the most-read tile is loaded in {rep.max_passes} passes" if rep.groups else "")
    if rep.groups:
        trips = "" if all(g.trips_known for g in rep.groups) else " (some trip counts are dynamic: one tile per pass)"
        ev.add("ir.reread_bytes_per_program", rep.reread_bytes, a.source_of(srcs),
               " + ".join(f"{g.reread_bytes} B ({g.tile_bytes} B tiles x {len(g.rereads)} re-read pass(es))"
                          for g in rep.groups) + trips)
        if rep.reread_share is not None:
            ev.add("ir.reread_share", round(rep.reread_share, 4), a.source_of(srcs),
                   f"{rep.reread_bytes} of the {rep.moved_bytes} B one program loads and stores")


def _intensity(a: _Analysis, ev: Evidence, mmas: list[Op], loads: list[Op], stores: list[Op]) -> None:
    """FLOP/byte of the steady state: the loop body holding the mma, else the whole entry."""
    region_ops = a.ops
    where = "whole entry"
    if mmas:
        hot = max(mmas, key=lambda o: len(o.region_path))
        path = hot.region_path
        if path:
            region_ops = [o for o in a.ops if o.region_path[:len(path)] == path]
            loop = hot.parent
            where = f"loop at line {loop.line}" if loop is not None else "entry"
    mem = [o for o in region_ops if o.name in LOADS or o.name in STORES]
    nbytes = float(sum((_moved_type(o).nbytes() or 0) if _moved_type(o) is not None else 0 for o in mem))
    flops = float(sum(_flops(o) for o in region_ops))
    src = f"static cost model: {a.ir_name} ({where})"
    if nbytes <= 0:
        a_missing = "no global loads/stores" if not (loads or stores) else "tile sizes are dynamic"
        ev.missing("arithmetic intensity (static)", a_missing)
        return
    ev.add("ir.flops_per_iter", flops, src, "mma 2*M*N*K + one per element of float/reduction ops")
    ev.add("ir.bytes_per_iter", nbytes, src, "tile bytes of every load and store")
    ev.add("ir.tile_intensity", flops / nbytes, src,
           f"{flops:.0f} FLOP / {nbytes:.0f} B per program iteration (L2 reuse across programs not modelled)")


def _pick_entry(module: Module, name: str | None) -> Entry:
    if not module.entries:
        raise ParseError("no entry in the TileIR module", path=module.path)
    if name is None:
        return module.entries[0]
    try:
        return module.entry(name)
    except KeyError:
        raise UsageError(f"no entry '{name}' in {module.path or 'the TileIR text'}",
                         hint="entries: " + ", ".join(e.function_name for e in module.entries[:8])) from None


__all__ = ["collect_tileir", "Aff"]
