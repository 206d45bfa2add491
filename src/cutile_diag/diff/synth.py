"""Semantics-preserving rewrites of TileIR text, for tests and the benchmark.

* ``renumber``  -- rename every SSA value (entry arguments, results, block arguments)
  consistently, the way the printer does when anything earlier in the entry changes;
* ``shuffle``   -- reorder independent ops inside each region (a random topological order
  of the def-use and token dependencies; terminators and untokened side effects keep their
  places);
* ``unroll``    -- replicate the bodies of innermost ``for`` loops (iteration k's block
  arguments become iteration k-1's ``continue`` operands), which turns a real dump into a
  large but realistic input;
* ``set_op_hint`` -- add or change an op-level ``optimization_hints`` entry on chosen lines.

All of them work on the printed text line by line (guided by the parsed model), so every
other byte -- attributes, types, ``loc(...)`` suffixes, the alias table -- is kept.
"""
from __future__ import annotations

import random
import re
from typing import Iterable

from ..ir_parsers.tileir import Module, Op, Region, parse_tileir
from ..ir_parsers.tileir_ops import TERMINATORS
from .graph import sub_ssa

_BLOCKARG_LINE = ("reduce", "scan")     # ops whose block arguments sit on the next line
_ORDERED_UNTOKENED = frozenset({"assert"})


# ---------------------------------------------------------------------------------------
# scoped walk

def _walk_scoped(region: Region, scopes: list[dict], visit) -> None:
    """Pre-order walk; ``visit(op, scopes)`` sees the scope chain in effect *at* the op."""
    local: dict = {}
    for a in region.args:
        local[a.name] = a
    scopes.append(local)
    try:
        for op in region.ops:
            visit(op, scopes)
            for r in op.regions:
                _walk_scoped(r, scopes, visit)
            for res in op.results:
                local[res] = op
            if op.result_group:
                local[op.result_group] = op
    finally:
        scopes.pop()


def _sub_line(line: str, resolve) -> str:
    """Replace every SSA token of a line (outside its trailing ``loc(...)``) via ``resolve``."""
    cut = line.rfind(" loc(")
    head, tail = (line, "") if cut < 0 else (line[:cut], line[cut:])
    return sub_ssa(head, resolve) + tail


def _lookup(name: str, chain: list[dict]):
    for d in reversed(chain):
        if name in d:
            return d[name]
    return None


# ---------------------------------------------------------------------------------------
# renumber

def renumber(text: str, seed: int = 0, *, style: str = "fresh") -> str:
    """Rename every SSA value of every entry consistently.

    ``style="fresh"`` uses new names (``%q17`` ...) in a shuffled order; ``"shuffle"``
    permutes the entry's own names among its values (so ``%tile`` and ``%tile_38`` swap
    meaning), which is the harder case for anything that matches on names.
    """
    mod = parse_tileir(text)
    lines = text.split("\n")
    rng = random.Random(seed)
    for entry in mod.entries:
        defs: list[str] = [a.name for a in entry.args]

        def collect(op: Op, _scopes) -> None:
            for res in op.results:
                if op.result_group is None:
                    defs.append(res)
            if op.result_group:
                defs.append(op.result_group)
            for r in op.regions:
                defs.extend(a.name for a in r.args)

        _walk_scoped(entry.body, [], collect)
        n = len(defs)
        if style == "shuffle":
            pool = list(dict.fromkeys(d.split("#")[0] for d in defs))
            while len(pool) < n:
                pool.append(f"%r{len(pool)}")
            rng.shuffle(pool)
            new_names = pool[:n]
        else:
            nums = list(range(n))
            rng.shuffle(nums)
            prefixes = ["q", "t", "v_", "x"]
            new_names = [f"%{rng.choice(prefixes)}{k}" for k in nums]
        # one fresh name per definition *site*; names reused in sibling regions get
        # distinct new names, which is allowed
        it = iter(new_names)
        arg_map = {a.name: next(it) for a in entry.args}

        def rename_token(tok: str, local: dict, chain: list[dict]) -> str:
            base, sep, idx = tok.partition("#")
            if base in local:
                return local[base] + sep + idx
            for d in reversed(chain):
                if base in d:
                    return d[base] + sep + idx
            return tok          # undefined value: left as is

        # entry line
        lines[entry.line - 1] = _sub_line(lines[entry.line - 1],
                                          lambda t: rename_token(t, arg_map, []))

        def rewrite_region(region: Region, chain: list[dict], args_map: dict) -> None:
            scope = dict(args_map)
            chain.append(scope)
            for op in region.ops:
                local: dict = {}
                bases = [op.result_group] if op.result_group else op.results
                for b in bases:
                    local[b] = next(it)
                region_maps = []
                for r in op.regions:
                    m = {a.name: next(it) for a in r.args}
                    region_maps.append(m)
                # for/loop print block args of region 0 on the op line
                line_local = dict(local)
                if op.name not in _BLOCKARG_LINE and region_maps:
                    line_local.update(region_maps[0])
                lines[op.line - 1] = _sub_line(lines[op.line - 1],
                                               lambda t: rename_token(t, line_local, chain))
                if op.name in _BLOCKARG_LINE and region_maps:
                    lines[op.line] = _sub_line(lines[op.line],
                                               lambda t: rename_token(t, region_maps[0], chain))
                for r, m in zip(op.regions, region_maps):
                    rewrite_region(r, chain, m)
                scope.update(local)
            chain.pop()

        rewrite_region(entry.body, [arg_map], {})
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# line spans of ops (an op with regions spans its nested lines and closers)

def _closers(lines: list[str]) -> dict[int, list[int]]:
    """0-based opener line -> closer lines (``} else {`` continues an ``if``)."""
    out: dict[int, list[int]] = {}
    stack: list[int] = []
    for i, raw in enumerate(lines):
        s = raw.split(" loc(")[0].strip() if " loc(" in raw else raw.strip()
        if s.startswith("}"):
            if not stack:
                continue
            opener = stack.pop()
            out.setdefault(opener, []).append(i)
            if s.endswith("{"):          # '} else {'
                stack.append(opener)
            continue
        if s.endswith("{"):
            stack.append(i)
    return out


def _op_lines(op: Op, closers: dict[int, list[int]], emit_region) -> list[int]:
    first = op.line - 1
    if not op.regions:
        return [first]
    opener = first + 1 if op.name in _BLOCKARG_LINE else first
    out = [first] if opener == first else [first, opener]
    ends = closers.get(opener, [])
    for ri, r in enumerate(op.regions):
        out.extend(emit_region(r))
        if ri < len(ends):
            out.append(ends[ri])
    return out


def _uses_of(op: Op) -> set[str]:
    names = {u.split("#")[0] for u in op.operands}
    for r in op.regions:
        for inner in r.walk():
            names.update(u.split("#")[0] for u in inner.operands)
    return names


def shuffle(text: str, seed: int = 0) -> str:
    """Reorder independent ops within every region (a random valid topological order)."""
    mod = parse_tileir(text)
    lines = text.split("\n")
    closers = _closers(lines)
    rng = random.Random(seed)

    def emit_region(region: Region) -> list[int]:
        ops = region.ops
        defs_here: dict[str, int] = {}
        for k, op in enumerate(ops):
            for res in op.results:
                defs_here[res.split("#")[0]] = k
            if op.result_group:
                defs_here[op.result_group] = k
        deps: list[set[int]] = []
        last_effect = None
        for k, op in enumerate(ops):
            d = {defs_here[u] for u in _uses_of(op) if u in defs_here and defs_here[u] < k}
            if op.name in _ORDERED_UNTOKENED or op.name in TERMINATORS:
                if last_effect is not None:
                    d.add(last_effect)
                last_effect = k
            if op.name in TERMINATORS:
                d.update(range(k))       # terminators stay last
            deps.append(d)
        # Kahn's algorithm, taking a random ready op each step
        indeg = [len(d) for d in deps]
        succ: list[list[int]] = [[] for _ in ops]
        for k, d in enumerate(deps):
            for j in sorted(d):
                succ[j].append(k)
        ready = [k for k in range(len(ops)) if indeg[k] == 0]
        seq: list[int] = []
        while ready:
            i = rng.randrange(len(ready))
            ready[i], ready[-1] = ready[-1], ready[i]
            k = ready.pop()
            seq.append(k)
            for s2 in succ[k]:
                indeg[s2] -= 1
                if indeg[s2] == 0:
                    ready.append(s2)
        out: list[int] = []
        for k in seq:
            out.extend(_op_lines(ops[k], closers, emit_region))
        return out

    result: list[str] = []
    pos = 0
    for entry in mod.entries:
        start = entry.line - 1
        body = emit_region(entry.body)
        # lines before the entry (aliases / previous closer) stay where they are
        while pos <= start:
            result.append(lines[pos])
            pos += 1
        result.extend(lines[i] for i in body)
        pos = max([start] + body) + 1
    result.extend(lines[pos:])
    return "\n".join(result)


# ---------------------------------------------------------------------------------------
# unroll

def unroll(text: str, factor: int, *, max_ops: int | None = None) -> str:
    """Replicate the body of every innermost ``for`` ``factor`` times (see module doc).

    Copy j reads the induction variable plus j (a new ``constant`` and ``addi``), as a real
    unroller would, so the copies are distinct computations; carried values chain from one
    copy to the next.  With ``max_ops`` the factor is lowered per loop so that the module
    stays near that size.
    """
    if factor < 1:
        raise ValueError("factor must be >= 1")
    mod = parse_tileir(text)
    lines = text.split("\n")
    closers = _closers(lines)
    inserts: dict[int, list[str]] = {}       # 0-based line index -> new lines before it
    replace: dict[int, str] = {}
    total = sum(1 for _ in mod.walk())
    loops = [op for op in mod.walk() if op.name == "for" and op.regions
             and not any(inner.regions for inner in op.regions[0].ops)]
    budget = None if max_ops is None else max(0, max_ops - total)
    for op in loops:
        body = op.regions[0]
        cont = body.ops[-1] if body.ops and body.ops[-1].name == "continue" else None
        straight = body.ops[:-1] if cont is not None else list(body.ops)
        if not straight or op.line - 1 not in closers:
            continue
        k = factor
        if budget is not None:
            per = len(straight) + 2
            k = min(factor, 1 + budget // (per * max(1, len(loops))))
        if k <= 1:
            continue
        iv, ivtype = body.args[0].name, body.args[0].type.text
        iter_args = [a.name for a in body.args[1:]]
        carried = list(cont.operands) if cont is not None else []
        first = lines[straight[0].line - 1]
        indent = first[: len(first) - len(first.lstrip())]
        new_lines: list[str] = []
        prev = dict(zip(iter_args, carried))                 # iteration 1 reads iteration 0
        for j in range(1, k):
            rename: dict[str, str] = {iv: f"{iv}_u{j}"}
            for inner in straight:
                bases = [inner.result_group] if inner.result_group else inner.results
                for b in bases:
                    rename[b] = f"{b}_u{j}"
            new_lines.append(f"{indent}{iv}_c{j} = constant <{ivtype[5:-1]}: {j}> : {ivtype}")
            new_lines.append(f"{indent}{iv}_u{j} = addi {iv}, {iv}_c{j} : {ivtype}")

            def res_tok(tok: str, rename=rename, prev=prev) -> str:
                base, sep, idx = tok.partition("#")
                if base in rename:
                    return rename[base] + sep + idx
                if base in prev and not sep:      # a block argument: last copy's value
                    return prev[base]
                return tok

            for inner in straight:
                new_lines.append(_sub_line(lines[inner.line - 1], res_tok))
            prev = {a: res_tok(c) for a, c in zip(iter_args, carried)}
        if cont is not None:
            inserts[cont.line - 1] = new_lines
            # the loop's own 'continue' now passes the last copy's values, position by position
            final = iter(prev[a] for a in iter_args)
            replace[cont.line - 1] = _sub_line(lines[cont.line - 1], lambda t: next(final, t))
        else:
            inserts[closers[op.line - 1][0]] = new_lines
        if budget is not None:
            budget -= (len(straight) + 2) * (k - 1)
    out: list[str] = []
    for i, line in enumerate(lines):
        if i in inserts:
            out.extend(inserts[i])
            out.append(replace.get(i, line))
        else:
            out.append(line)
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# perturbations

_HINTS_RE = re.compile(r"optimization_hints = <default = \{([^}]*)\}>")


def set_op_hint(text: str, lines_1based: Iterable[int], key: str, value) -> str:
    """Set ``key = value`` in the op-level hints of the given lines (memory ops)."""
    lines = text.split("\n")
    v = str(value).lower() if isinstance(value, bool) else str(value)
    for ln in lines_1based:
        line = lines[ln - 1]
        m = _HINTS_RE.search(line)
        if m:
            items = dict(p.split(" = ", 1) for p in m.group(1).split(", ") if p)
            items[key] = v
            body = ", ".join(f"{k} = {items[k]}" for k in sorted(items))
            line = line[:m.start()] + f"optimization_hints = <default = {{{body}}}>" + line[m.end():]
        else:
            cut = line.find(" : ")
            if cut < 0:
                raise ValueError(f"line {ln} has no ' : ' to put hints before")
            line = line[:cut] + f" optimization_hints = <default = {{{key} = {v}}}>" + line[cut:]
        lines[ln - 1] = line
    return "\n".join(lines)


def op_lines(text: str, name: str) -> list[int]:
    """1-based lines of every op called ``name``."""
    return [op.line for op in parse_tileir(text).walk() if op.name == name]


def module_size(mod: Module) -> int:
    """The number of ops in ``mod``."""
    return sum(1 for _ in mod.walk())
