"""Redundant loads: one program loading the same array with the same index expression in more
than one pass (two loops over the row, or a loop and a straight-line section).

Two loads are the same read when their address operands have the same *canonical form*: each
SSA value is replaced by the expression that computes it — constants by their value, kernel
arguments by their position, a for-loop's induction variable by its (lower, upper, step) — so
the second loop's ``%loopIdx`` equals the first one's when both walk the same range.  Values
that differ per evaluation (loaded data, loop-carried values, results of ops with regions)
stay opaque, so loads that depend on them never match.  The compiler cannot merge such loads
across loops (the data may have been overwritten in between); a read-once rewrite (keep the
row in registers/shared memory, or fuse the passes with running statistics) can.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir_parsers.tileir import Entry, Op
from ..ir_parsers.tileir_ops import LOADS, STORES

_OPAQUE_OPS = LOADS | {"make_token", "join_tokens"}


@dataclass
class RereadGroup:
    """Loads of one address expression: ``loads[0]`` is the first pass, the rest re-read it."""
    loads: list[Op]
    passes: int                      # distinct enclosing loops / straight-line sections
    tile_bytes: int                  # bytes one evaluation of one load moves
    reread_bytes: int                # bytes the re-reads move per program (trip counts applied)
    trips_known: bool = True
    array: str = ""                  # kernel argument the address derives from, when found

    @property
    def rereads(self) -> list[Op]:
        """The loads after the first pass."""
        return self.loads[1:]


@dataclass
class RereadReport:
    """The re-read groups of one entry and the bytes one program moves in all."""
    groups: list[RereadGroup] = field(default_factory=list)
    moved_bytes: int = 0             # every load and store of one program (trip counts applied)

    @property
    def reread_share(self) -> float | None:
        """Share of one program's global traffic that the re-reads are."""
        return self.reread_bytes / self.moved_bytes if self.moved_bytes else None

    @property
    def redundant_loads(self) -> int:
        """How many loads re-read what an earlier pass loaded."""
        return sum(len(g.rereads) for g in self.groups)

    @property
    def reread_bytes(self) -> int:
        """The bytes one program re-reads, summed over the groups."""
        return sum(g.reread_bytes for g in self.groups)

    @property
    def max_passes(self) -> int:
        """The most passes any address expression is read in (1 without groups)."""
        return max((g.passes for g in self.groups), default=1)


class _Canon:
    """Canonical forms of SSA values.  The printer reuses value names in sibling regions (both
    loops of a two-pass kernel define their own ``%24``), so definitions are looked up per
    region, innermost enclosing region first."""

    def __init__(self, entry: Entry):
        self.args = {a.name: i for i, a in enumerate(entry.args)}
        self.defs: dict[tuple[int, str], tuple[Op, int]] = {}
        self.block_args: dict[tuple[int, str], tuple[Op, int]] = {}
        self.parent: dict[int, Op | None] = {}
        self.chain: dict[int, tuple[int, ...]] = {}       # op -> enclosing region ids, outermost first
        self.ops: list[Op] = []
        self._walk(entry.body, (id(entry.body),), None)
        self._memo: dict[tuple[int, str], tuple] = {}

    def _walk(self, region, chain: tuple[int, ...], owner: Op | None) -> None:
        for op in region.ops:
            self.ops.append(op)
            self.parent[id(op)] = owner
            self.chain[id(op)] = chain
            for i, r in enumerate(op.results):
                self.defs[(chain[-1], r)] = (op, i)
            for reg in op.regions:
                for ai, a in enumerate(reg.args):
                    self.block_args[(id(reg), a.name)] = (op, ai)
                self._walk(reg, chain + (id(reg),), op)

    def _lookup(self, name: str, chain: tuple[int, ...]):
        for rid in reversed(chain):
            for key in ((rid, name), (rid, name.split("#")[0])):
                if key in self.block_args:
                    return "arg", key, self.block_args[key]
                if key in self.defs:
                    return "def", key, self.defs[key]
        return None, None, None

    def form(self, name: str, chain: tuple[int, ...], depth: int = 0) -> tuple:
        if name in self.args:
            return ("arg", self.args[name])
        kind, key, hit = self._lookup(name, chain)
        if kind is None:
            return ("opaque", name)
        if key in self._memo:
            return self._memo[key]
        out = self._form(kind, hit, name, depth)
        self._memo[key] = out
        return out

    def _form(self, kind: str, hit, name: str, depth: int) -> tuple:
        if depth > 200:
            return ("opaque", name, id(hit[0]))
        op, idx = hit
        if kind == "arg":
            if op.name == "for" and idx == 0:
                bounds = [self.form(o, self.chain[id(op)], depth + 1) for o, r in zip(op.operands, op.operand_roles)
                          if r in ("lower", "upper", "step")]
                return ("iv", *bounds)
            return ("opaque", name, id(op))     # loop-carried: differs per iteration and per loop
        if op.name in _OPAQUE_OPS or op.regions:
            return ("opaque", name, id(op))
        ch = self.chain[id(op)]
        operands = tuple(self.form(o, ch, depth + 1) for o, r in zip(op.operands, op.operand_roles) if r != "token")
        return (op.name, idx, tuple(sorted(op.attrs.items())), tuple(op.keywords),
                tuple(t.text for t in op.result_types), operands)

    def address(self, load: Op) -> tuple:
        ch = self.chain[id(load)]
        operands = tuple(self.form(o, ch) for o, r in zip(load.operands, load.operand_roles) if r != "token")
        return (load.name, tuple(t.text for t in load.result_types[:1]), operands)

    def loops(self, op: Op) -> list[Op]:
        """Enclosing loops, innermost first."""
        out, cur = [], self.parent.get(id(op))
        while cur is not None:
            if cur.name in ("for", "loop"):
                out.append(cur)
            cur = self.parent.get(id(cur))
        return out

    def trip_product(self, op: Op) -> int:
        """Evaluations of ``op`` per program (dynamic trip counts count once)."""
        n = 1
        for lp in self.loops(op):
            n *= self.trips(lp) or 1
        return n

    def trips(self, loop: Op) -> int | None:
        if loop.name != "for":
            return None
        vals = {}
        for o, r in zip(loop.operands, loop.operand_roles):
            if r in ("lower", "upper", "step"):
                kind, _, hit = self._lookup(o, self.chain[id(loop)])
                vals[r] = _int_value(hit[0]) if kind == "def" else None
        lo, hi, st = vals.get("lower"), vals.get("upper"), vals.get("step")
        if None in (lo, hi, st) or not st:
            return None
        return max(0, -(-(hi - lo) // st))

    def root_arg(self, load: Op) -> int | None:
        """The kernel argument an address is computed from: follow the first operand (view base,
        offset base, assume, broadcast, reshape) back to an entry argument."""
        op = load
        for _ in range(64):
            name = op.operands[0] if op.operands else ""
            if name in self.args:
                return self.args[name]
            kind, _, hit = self._lookup(name, self.chain[id(op)])
            if kind != "def" or hit[0].name in _OPAQUE_OPS:
                return None
            op = hit[0]
        return None


def _int_value(op: Op) -> int | None:
    if op.name != "constant":
        return None
    v = op.attrs.get("value", "")
    head, _, num = v.partition(":")
    try:
        return int(num.strip()) if head.strip().startswith(("i", "u")) else None
    except ValueError:
        return None


def find_rereads(entry: Entry, moved_type=None) -> RereadReport:
    """``moved_type(op)``: the tile type a load/store moves (for the traffic share)."""
    c = _Canon(entry)
    groups: dict[tuple, list[Op]] = {}
    for op in c.ops:
        if op.name in LOADS:
            groups.setdefault(c.address(op), []).append(op)
    report = RereadReport()
    for loads in groups.values():
        if len(loads) < 2:
            continue
        # a pass = the outermost loop around the load below what all of them share, or the
        # straight-line code; two loads in one pass are a plain CSE candidate, not a second pass
        shared = set.intersection(*({id(lp) for lp in c.loops(ld)} for ld in loads))
        def pass_of(ld: Op) -> int:
            own = [lp for lp in c.loops(ld) if id(lp) not in shared]
            return id(own[-1]) if own else 0
        passes = {}
        for ld in loads:
            passes.setdefault(pass_of(ld), ld)
        if len(passes) < 2:
            continue
        firsts = list(passes.values())
        res = loads[0].result_types[0] if loads[0].result_types else None
        tile = int(res.nbytes() or 0) if res is not None else 0
        total, known = 0, True
        for ld in firsts[1:]:
            n = 1
            for lp in c.loops(ld):
                if id(lp) in shared:
                    continue
                t = c.trips(lp)
                if t is None:
                    known = False
                    continue
                n *= t
            total += tile * n
        arg_i = c.root_arg(loads[0])
        array = f"argument {arg_i}" if arg_i is not None else ""
        report.groups.append(RereadGroup(firsts, len(passes), tile, total, known, array))
    report.groups.sort(key=lambda g: -g.reread_bytes)
    if moved_type is not None and report.groups:
        for op in c.ops:
            t = moved_type(op) if op.name in LOADS or op.name in STORES else None
            if t is not None:
                report.moved_bytes += int(t.nbytes() or 0) * c.trip_product(op)
    return report
