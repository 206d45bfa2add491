"""The impact slice of a change: the ops of the after program whose inputs it reaches.

Seeds are the after-side ops of the structural deltas a change explains (for a removed op,
the counterparts of its users).  From there values are followed downstream on the graph's
``data`` edges with networkx's ``bfs_layers`` (token and order edges order memory effects
and carry no value; ``contains`` edges are nesting), so the slice ends at the stores, whose
only result is a token.  A value handed to a region terminator leaves the region: a
``for``'s ``continue`` operand i becomes the loop's result i and its iteration value i
(block argument i + 1, after the induction variable), a ``loop``'s ``continue`` its
iteration value, ``break`` / ``yield`` the owner's result; the slice continues at the users
of exactly those values, so a changed accumulator does not drag in the loop's index math.

``value_flow(G)`` builds that relation as a networkx DiGraph from a graph of ``load_graph``,
for networkx's own ``descendants`` / ``ancestors`` ("what does this op feed", "which ops
feed this store"); the differ computes the same sets for all changes at once (``_Reach``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import networkx as nx

from ..ir_parsers.tileir_ops import STORES
from .graph import ROOT, IRGraph, blockarg_port
from .model import REMOVED, Change, EntryDetail

_TERMINATORS = frozenset({"yield", "continue", "break"})
_TRAVERSALS = 16        # changes per entry served by one traversal each; more: one table
_SIDE_EFFECTS = STORES | frozenset({"atomic_rmw_tko", "atomic_cas_tko", "print_tko", "assert"})


@dataclass
class Impact:
    """One change's impact slice: the after-side ops its value flow reaches and the stores it ends at."""
    entry: str
    seeds: list[str]                    # display ids of the changed ops (after side)
    ops: int                            # ops reached
    nodes: list[str]                    # display ids of the reached ops (program order); [] past ``limit``
    stores: list[dict] = field(default_factory=list)   # side effects reached: op, id, line, source
    by_op: dict[str, int] = field(default_factory=dict)
    bits: int = field(default=0, repr=False)   # every reached after-graph node, as a bit set

    def node_ids(self) -> list[int]:
        """The reached nodes' ids, from the slice's bit set."""
        return list(_bits(self.bits))

    def to_json(self) -> dict:
        """The slice as JSON; a node list cut at ``limit`` says how many it omits."""
        d = {"entry": self.entry, "seeds": self.seeds, "ops": self.ops, "by_op": self.by_op,
             "stores": self.stores, "nodes": self.nodes}
        if len(self.nodes) < self.ops:
            # hundreds of changes with thousands of ops each: the lists are in --graphml
            d["nodes_omitted"] = self.ops - len(self.nodes)
        return d


def value_flow(G: nx.MultiDiGraph) -> nx.DiGraph:
    """The op-level value-flow graph of an entry graph (``load_graph``'s): its ``data``
    edges plus, for each region terminator, edges to the users of exactly the owner values
    its operands become.  ``nx.descendants(value_flow(G), op)`` is what ``op`` feeds;
    ``nx.ancestors(...)`` what feeds it."""
    F = nx.DiGraph()
    F.add_nodes_from(G)
    F.add_edges_from((u, v) for u, v, kind in G.edges(data="kind") if kind == "data")
    nodes = G.nodes
    for t, d in nodes(data=True):
        name = d["name"]
        if name not in _TERMINATORS:
            continue
        owner, ridx = d["parent"], d["region"]
        if owner <= ROOT:
            continue
        oname = nodes[owner]["name"]
        users_by_port: dict[int, list[int]] = {}
        for _o, u, e in G.out_edges(owner, data=True):
            if e["kind"] == "data":
                users_by_port.setdefault(e["port"], []).append(u)
        for _s, _t, e in G.in_edges(t, data=True):
            if e["kind"] != "data":
                continue
            for port in _flow_ports(name, oname, ridx, e["pos"]):
                F.add_edges_from((t, u) for u in users_by_port.get(port, ()))
    return F


def _flow_ports(name: str, oname: str, ridx: int, pos: int) -> list[int]:
    """The owner values a terminator's operand ``pos`` becomes (see the module docstring)."""
    if name == "break" or oname not in ("for", "loop"):
        return [pos]
    if oname == "for":                     # continue: the next iteration, and the result
        return [pos, blockarg_port(ridx, pos + 1)]
    return [blockarg_port(ridx, pos)]


class _Reach:
    """What ops of one after-graph reach, as bit sets over node ids.

    A few changes: one traversal each.  Many (hundreds when a hint is set on every load):
    every op's set at once (``table``), then one OR per seed.  Node ids are pre-order, so every def-use edge runs
    from a lower id to a higher one and
    one pass in reverse id order settles the DAG; only a terminator's edges to the users of
    its loop's iteration values run backwards, and each further pass settles one more level
    of loop nesting.  The same relation as ``nx.descendants`` on ``value_flow(g.nx)``
    (tests/diff/test_impact.py checks it), at list speed: a networkx traversal per change
    costs seconds on a 10,000-op entry with hundreds of changes.
    """

    def __init__(self, g: IRGraph):
        n = g.size
        tokens, operands = g.token_values, g.operands
        succ: list[list[int]] = [[] for _ in range(n)]
        for v in range(n):
            out = succ[v]
            for u, pos in g.users[v]:
                if pos >= 0 and operands[u][pos] not in tokens:
                    out.append(u)
        back = False
        for t in g.op_nodes:
            name = g.name[t]
            owner = g.parent[t]
            if name not in _TERMINATORS or owner <= ROOT:
                continue
            by_port: dict[int, list[int]] = {}
            for u, upos in g.users[owner]:
                if upos >= 0:
                    by_port.setdefault(operands[u][upos][1], []).append(u)
            for pos, (src, port) in enumerate(operands[t]):
                if src < 0 or (src, port) in tokens:
                    continue
                for p in _flow_ports(name, g.name[owner], g.region[t], pos):
                    for u in by_port.get(p, ()):
                        succ[t].append(u)
                        back = back or u < t
        self.succ, self.back, self.n = succ, back, n
        self.reach: list[int] | None = None
        self.by_name: dict[str, int] = {}
        names: dict[str, bytearray] = {}
        for v in g.op_nodes:
            m = names.get(g.name[v])
            if m is None:
                m = names[g.name[v]] = bytearray(n)
            m[v] = 1
        self.by_name = {k: _to_int(m) for k, m in names.items()}

    def table(self) -> None:
        n, succ, back = self.n, self.succ, self.back
        reach = [0] * n
        changed = True
        while changed:
            changed = False
            for v in range(n - 1, -1, -1):
                bits = reach[v] | (1 << v)
                for u in succ[v]:
                    bits |= reach[u]
                if bits != reach[v]:
                    reach[v] = bits
                    changed = True
            changed = changed and back
        self.reach = reach

    def of(self, seeds: set[int]) -> int:
        """The ops reachable from ``seeds``, the seeds themselves left out."""
        if self.reach is not None:
            bits = 0
            for s in seeds:
                bits |= self.reach[s]
            for s in seeds:
                bits &= ~(1 << s)
            return bits
        succ = self.succ
        mark = bytearray(self.n)
        stack = list(seeds)
        for s in stack:
            mark[s] = 1
        while stack:
            for u in succ[stack.pop()]:
                if not mark[u]:
                    mark[u] = 1
                    stack.append(u)
        for s in seeds:
            mark[s] = 0
        return _to_int(mark)


def _to_int(mark: bytearray) -> int:
    """A 0/1 byte per node -> a bit set (``bytes.translate`` + ``int(..., 2)``, in C)."""
    return int(mark[::-1].translate(_DIGITS) or b"0", 2)


_DIGITS = bytes.maketrans(b"\x00\x01", b"01")


def _bits(x: int, limit: int | None = None) -> Iterator[int]:
    """The set bits of ``x``, lowest first (one ``bin`` and ``str.find`` per bit: shifting a
    10,000-bit integer per bit would cost more than the whole slice)."""
    s = bin(x)[:1:-1]
    i = s.find("1")
    n = 0
    while i >= 0 and (limit is None or n < limit):
        yield i
        n += 1
        i = s.find("1", i + 1)


def impact_slices(changes: list[Change], details: list[EntryDetail], delta_index: dict, *,
                  limit: int = 200) -> None:
    """Attach ``Change.impact`` to every IR-level change (``delta_index``: delta id -> delta;
    a slice of more than ``limit`` ops lists no display ids; its count, ``by_op``, ``stores``
    and ``node_ids()`` are always complete)."""
    by_entry = {d.name: d for d in details}
    reaches: dict[str, _Reach] = {}
    per_entry: dict[str, int] = {}
    for c in changes:
        if c.level != "cubin" and c.explains and c.entry:
            per_entry[c.entry] = per_entry.get(c.entry, 0) + 1
    for c in changes:
        if c.level == "cubin" or not c.explains:
            continue
        det = by_entry.get(c.entry or "")
        if det is None:
            continue
        m = det.matching
        A, B = m.a, m.b
        seeds: set[int] = set()
        for i in c.explains:
            d = delta_index.get(i)
            if d is None or d.entry != det.name:
                continue
            if d.kind == REMOVED:
                seeds.update(m.a2b[u] for _a, u, kind in A.nx.out_edges(d.a, data="kind")
                             if kind == "data" and m.a2b[u] > ROOT)
            elif d.b > ROOT:
                seeds.add(d.b)
        if not seeds:
            continue
        r = reaches.get(det.name)
        if r is None:
            r = reaches[det.name] = _Reach(B)
            if per_entry.get(det.name, 0) > _TRAVERSALS:
                r.table()
        bits = r.of(seeds)
        cid = det.names_b.cid
        stores = []
        side = 0
        for nm in _SIDE_EFFECTS:
            side |= r.by_name.get(nm, 0)
        for v in _bits(bits & side):
            op = B.ops[v]
            stores.append({"op": B.name[v], "id": cid[v], "line": op.line,
                           "source": f"{op.source.file}:{op.source.line}" if op.source else None})
        by_op = {nm: (bits & mask).bit_count() for nm, mask in r.by_name.items()}
        n = bits.bit_count()
        c.impact = Impact(entry=det.name, seeds=[cid[v] for v in sorted(seeds)], ops=n,
                          nodes=[cid[v] for v in _bits(bits)] if n <= limit else [], stores=stores,
                          by_op=dict(sorted(((k, n) for k, n in by_op.items() if n), key=lambda x: -x[1])),
                          bits=bits)


def impacted_nodes(changes: list[Change], entry: str) -> set[int]:
    """The after-graph nodes any change of ``entry`` reaches (for renderers)."""
    bits = 0
    for c in changes:
        if c.impact is not None and c.impact.entry == entry:
            bits |= c.impact.bits
    return set(_bits(bits))


def impact_summary(changes: list[Change]) -> str:
    """One line for people over changes shown together: '37 ops → 1 store: store_view_tko kernels.py:50'."""
    bits = 0
    stores: dict[str, dict] = {}
    for c in changes:
        if c.impact is not None:
            bits |= c.impact.bits
            for st in c.impact.stores:
                stores.setdefault(st["id"], st)
    if not bits and not stores:
        return ""
    n = bits.bit_count()
    out = f"{n} op{'s' if n != 1 else ''}"
    if stores:
        first = next(iter(stores.values()))
        where = first["source"].rsplit("/", 1)[-1] if first["source"] else f"line {first['line']}"
        out += f" → {len(stores)} side effect{'s' if len(stores) != 1 else ''}: {first['op']} {where}"
        if len(stores) > 1:
            out += " …"
    return out
