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
from ..ir_parsers.tileir_ops import LOADS

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
        return self.loads[1:]


@dataclass
class RereadReport:
    groups: list[RereadGroup] = field(default_factory=list)

    @property
    def redundant_loads(self) -> int:
        return sum(len(g.rereads) for g in self.groups)

    @property
    def reread_bytes(self) -> int:
        return sum(g.reread_bytes for g in self.groups)

    @property
    def max_passes(self) -> int:
        return max((g.passes for g in self.groups), default=1)


class _Canon:
    def __init__(self, entry: Entry):
        self.args = {a.name: i for i, a in enumerate(entry.args)}
        self.defs: dict[str, tuple[Op, int]] = {}
        self.block_args: dict[str, tuple[Op, int]] = {}
        self.parent: dict[int, Op | None] = {}
        self.ops = list(entry.walk())
        for op in self.ops:
            for i, r in enumerate(op.results):
                self.defs[r] = (op, i)
            for reg in op.regions:
                for ai, a in enumerate(reg.args):
                    self.block_args[a.name] = (op, ai)
                for child in reg.walk():
                    self.parent.setdefault(id(child), None)
                for child in reg.ops:
                    self.parent[id(child)] = op
        self._memo: dict[str, tuple] = {}
        self._roots: dict[str, set[int]] = {}

    def form(self, name: str, depth: int = 0) -> tuple:
        if name in self._memo:
            return self._memo[name]
        out = self._form(name, depth)
        self._memo[name] = out
        return out

    def _form(self, name: str, depth: int) -> tuple:
        if depth > 200:
            return ("opaque", name)
        if name in self.args:
            return ("arg", self.args[name])
        if name in self.block_args:
            owner, ai = self.block_args[name]
            if owner.name == "for" and ai == 0:
                bounds = [self.form(o, depth + 1) for o, r in zip(owner.operands, owner.operand_roles)
                          if r in ("lower", "upper", "step")]
                return ("iv", *bounds)
            return ("opaque", name)          # loop-carried: differs per iteration and per loop
        d = self.defs.get(name) or self.defs.get(name.split("#")[0])
        if d is None:
            return ("opaque", name)
        op, idx = d
        if op.name in _OPAQUE_OPS or op.regions:
            return ("opaque", name)
        operands = tuple(self.form(o, depth + 1) for o, r in zip(op.operands, op.operand_roles) if r != "token")
        return (op.name, idx, tuple(sorted(op.attrs.items())), tuple(op.keywords),
                tuple(t.text for t in op.result_types), operands)

    def address(self, load: Op) -> tuple:
        operands = tuple(self.form(o) for o, r in zip(load.operands, load.operand_roles) if r != "token")
        return (load.name, tuple(t.text for t in load.result_types[:1]), operands)

    def loops(self, op: Op) -> list[Op]:
        """Enclosing loops, innermost first."""
        out, cur = [], self.parent.get(id(op))
        while cur is not None:
            if cur.name in ("for", "loop"):
                out.append(cur)
            cur = self.parent.get(id(cur))
        return out

    def trips(self, loop: Op) -> int | None:
        if loop.name != "for":
            return None
        vals = {}
        for o, r in zip(loop.operands, loop.operand_roles):
            if r in ("lower", "upper", "step"):
                d = self.defs.get(o)
                vals[r] = _int_value(d[0]) if d else None
        lo, hi, st = vals.get("lower"), vals.get("upper"), vals.get("step")
        if None in (lo, hi, st) or not st:
            return None
        return max(0, -(-(hi - lo) // st))

    def root_arg(self, name: str) -> int | None:
        """The kernel argument an address is computed from: follow the first operand (view base,
        offset base, assume, broadcast, reshape) back to an entry argument."""
        for _ in range(64):
            if name in self.args:
                return self.args[name]
            d = self.defs.get(name)
            if d is None or d[0].name in _OPAQUE_OPS or not d[0].operands:
                return None
            name = d[0].operands[0]
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


def find_rereads(entry: Entry) -> RereadReport:
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
        arg_i = c.root_arg(next((o for o, r in zip(loads[0].operands, loads[0].operand_roles) if r != "token"), ""))
        array = f"argument {arg_i}" if arg_i is not None else ""
        report.groups.append(RereadGroup(firsts, len(passes), tile, total, known, array))
    report.groups.sort(key=lambda g: -g.reread_bytes)
    return report
