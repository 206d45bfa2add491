"""TileIR entries as networkx multigraphs with canonical names and structural hashes.

One ``IRGraph`` per entry; its ``nx`` is a ``networkx.MultiDiGraph`` built through the
public API (``add_nodes_from`` / ``add_edge``).  Nodes (integers): the entry itself (node 0,
carrying the entry hints), one node per entry argument (1..nargs), then every op in
pre-order.  Node attributes: ``kind`` (entry | arg | op), ``name`` (the opcode), ``label``
(the printed op with SSA names erased), ``cname`` (canonical id), ``result_types``,
``keywords``, ``attrs``, ``hints``, ``line``, ``source`` (Python ``file:line:col`` with
``-g``), ``parent`` / ``region`` (owning op and region index), ``region_path``.

Edges carry ``kind``:

* ``data``  -- def-use: from the op (or argument) defining a value to each op using it,
  keyed by operand position (``pos``; ``port`` >= 0 is the result index, a negative port a
  block argument of the owning region op: ``for`` iteration values, ``reduce`` operands);
* ``token`` -- the same, for token values: the memory-ordering chain;
* ``order`` -- implicit program order between untokened side effects (``assert``), key -1;
* ``contains`` -- from a region op (or the entry) to each op of its regions, key
  ``"contains"``, with ``region`` (the region index).

Every edge has ``kind``, ``pos``, ``port``, ``role`` (the operand's role: ``token``,
``index``, ``step`` ...; ``order`` / ``region`` for the structural kinds) and ``value``
(the canonical name of the value it carries, '' for structural edges).

All edges point forward in program order, so the graph is a DAG (``topological_generations``
gives dataflow levels).  Values leaving a region through its terminator (``yield``) are the
owner's results; ``impact.py`` takes that hop when it follows a change downstream.

The matcher and delta builder read the same nodes through positional columns
(``IRGraph.name[v]``, ``operands[v]`` ...): a 10,000-op entry is walked millions of times
there, and list indexing is ~20x cheaper than networkx's adjacency views.

Canonical naming: arguments are ``%a<i>``, results ``%v<n>`` in definition order
(``%v<n>#k`` for the k-th result of a multi-result op), block arguments ``%b<n>``.  Two
dumps that differ only in the printer's SSA names therefore give equal graphs.

Structural hash (Merkle style): an op's hash covers its own label (the printed op with SSA
names erased: name, keywords, attributes, hints, types), the hashes of the values it uses
(block arguments by de Bruijn-like position: regions up, region index, argument index) and
the *multiset* of hashes of the ops in each of its regions.  Region contents are hashed as
multisets because TileIR orders memory effects through tokens, not through text order:
reordering independent ops changes nothing.  Equal hashes mean isomorphic computations.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import networkx as nx

from ..ir_parsers.tileir import SSA_USE, Entry, Module, Op, Region
from ..ir_parsers.tileir_ops import KNOWN_OPS

_SSA_TOKEN = re.compile(SSA_USE)
# an SSA name, or a string literal to step over ('%d' in a print_tko format is no value)
_SSA_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|' + SSA_USE)
# untokened ops whose relative order is observable
_ORDERED_UNTOKENED = frozenset({"assert"})
_BA = 1 << 10          # block-argument port encoding: -(1 + region * _BA + index)

ROOT = 0
_NONE: tuple = ()


def blockarg_port(region: int, index: int) -> int:
    """The (negative) port of block argument ``index`` of region ``region``."""
    return -(1 + region * _BA + index)


def decode_port(port: int) -> tuple[str, int, int]:
    """('result', k, 0) or ('blockarg', region, index)."""
    if port >= 0:
        return ("result", port, 0)
    r, i = divmod(-port - 1, _BA)
    return ("blockarg", r, i)


def erase_ssa(text: str) -> str:
    """Replace every SSA name by ``%`` (string literals kept): a text's shape without its names."""
    if '"' not in text:
        return _SSA_TOKEN.sub("%", text)
    return _SSA_OR_STRING.sub(lambda m: m.group(0) if m.group(0)[0] == '"' else "%", text)


_SSA_SPLIT = re.compile(f"({SSA_USE})")


def map_ssa(text: str, mapping: dict[str, str]) -> str:
    """Rename SSA names through ``mapping`` (others kept); faster than ``sub_ssa`` with a
    callback: one split, one list comprehension, one join."""
    if '"' in text:
        return sub_ssa(text, lambda t: mapping.get(t, t))
    parts = _SSA_SPLIT.split(text)
    get = mapping.get
    parts[1::2] = [get(t, t) for t in parts[1::2]]
    return "".join(parts)


def sub_ssa(text: str, fn) -> str:
    """Replace every SSA name (outside string literals) by ``fn(name)``."""
    if '"' not in text:
        return _SSA_TOKEN.sub(lambda m: fn(m.group(0)), text)
    return _SSA_OR_STRING.sub(lambda m: m.group(0) if m.group(0)[0] == '"' else fn(m.group(0)), text)


@dataclass
class IRGraph:
    """One entry as a graph: ``nx`` (the networkx MultiDiGraph, see the module docstring)
    and per-node columns over the same node ids, read by the matcher's hot loops."""
    entry: Entry
    ops: list[Op | None]                       # node -> Op (None for the entry and args)
    kind: list[str]                            # 'entry' | 'arg' | 'op'
    name: list[str]                            # op name; 'entry'; 'arg'
    label: list[str]                           # exact local signature
    parent: list[int]                          # owning node (-1 for the entry)
    region: list[int]                          # region index inside the owner
    depth: list[int]                           # region nesting depth (0: entry body)
    children: list[list[list[int]]]            # node -> regions -> node ids (text order)
    operands: list[list[tuple[int, int]]]      # node -> [(src node, port)] by position
    roles: list[list[str]]
    users: list[list[tuple[int, int]]]         # node -> [(user node, position)]
    order_pred: list[int]                      # implicit order predecessor or -1
    hash: list[int]
    height: list[int]
    res_names: list[list[str]]                 # canonical names of results
    barg_names: list[list[list[str]]]          # canonical names of block args per region
    cid: list[str]                             # canonical id of the node
    token_values: set[tuple[int, int]] = field(default_factory=set)
    nx: nx.MultiDiGraph = field(default_factory=nx.MultiDiGraph, repr=False)
    _paths: dict[int, str] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        """The number of nodes (root, arguments and ops)."""
        return len(self.kind)

    @property
    def op_nodes(self) -> range:
        """The node ids of the ops (after the root and the arguments)."""
        return range(1 + len(self.entry.args), len(self.kind))

    def value_name(self, src: int, port: int) -> str:
        """The canonical name of value (src, port)."""
        return value_label(self.res_names, self.barg_names, self.cid, src, port)

    def region_path(self, node: int) -> str:
        """'for %v12/if %v30.else' -- canonical, stable across renumbering."""
        cached = self._paths.get(node)
        if cached is None:
            cached = self._paths[node] = region_path(self, self.cid, node)
        return cached

    def walk_region(self, node: int) -> Iterator[int]:
        """Every node nested (at any depth) inside ``node``'s regions."""
        stack = [c for r in reversed(self.children[node]) for c in reversed(r)]
        while stack:
            n = stack.pop()
            yield n
            for r in reversed(self.children[n]):
                stack.extend(reversed(r))


def value_label(res: list[list[str]], bargs: list[list[list[str]]], cid: list[str], src: int, port: int) -> str:
    """The name of value (src, port) in a naming (the graph's canonical one, or a diff side's)."""
    if port >= 0:
        rn = res[src]
        return rn[port] if port < len(rn) else f"{cid[src]}#{port}"
    _, r, i = decode_port(port)
    try:
        return bargs[src][r][i]
    except IndexError:
        return f"{cid[src]}.b{r}.{i}"


def _region_segment(g: IRGraph, cid: list[str], owner: int, ridx: int) -> str:
    seg = f"{g.name[owner]} {cid[owner]}"
    if g.name[owner] == "if":
        seg += ".else" if ridx == 1 else ".then"
    elif len(g.children[owner]) > 1:
        seg += f"[{ridx}]"
    return seg


def region_path(g: IRGraph, cid: list[str], node: int) -> str:
    """The regions enclosing ``node``, outermost first, each named by its owner's id in ``cid``
    (the graph's canonical ids, or a side's display ids in a diff)."""
    parts = []
    child, p = node, g.parent[node]
    while p > ROOT:
        parts.append(_region_segment(g, cid, p, g.region[child]))
        child, p = p, g.parent[p]
    return "/".join(reversed(parts))


def region_of(g: IRGraph, cid: list[str], owner: int, ridx: int) -> str:
    """The path of region ``ridx`` of ``owner`` ('' for the entry body)."""
    if owner == ROOT:
        return ""
    base = region_path(g, cid, owner)
    seg = _region_segment(g, cid, owner, ridx)
    return f"{base}/{seg}" if base else seg


def _entry_label(entry: Entry) -> str:
    parts = []
    for arch in sorted(entry.hints):
        items = ", ".join(f"{k} = {v}" for k, v in sorted(entry.hints[arch].items()))
        parts.append(f"{arch} = {{{items}}}")
    return "entry <" + ", ".join(parts) + ">"


def build_graph(entry: Entry) -> IRGraph:
    """Build the graph of one entry (see the module docstring)."""
    args = entry.args
    nargs = len(args)
    ops: list[Op | None] = [None] * (1 + nargs)
    kind = ["entry"] + ["arg"] * nargs
    name = ["entry"] + ["arg"] * nargs
    label = [_entry_label(entry)] + [f"arg {i}: {a.type.text}" for i, a in enumerate(args)]
    parent = [-1] + [ROOT] * nargs
    region = [0] * (1 + nargs)
    depth = [0] * (1 + nargs)
    children: list[list[list[int]]] = [[]] + [[] for _ in range(nargs)]
    operands: list[list[tuple[int, int]]] = [[] for _ in range(1 + nargs)]
    roles: list[list[str]] = [[] for _ in range(1 + nargs)]
    order_pred = [-1] * (1 + nargs)
    hsh = [0] * (1 + nargs)
    height = [1] * (1 + nargs)
    res_names: list[list[str]] = [[]] + [[f"%a{i}"] for i in range(nargs)]
    barg_names: list[list[list[str]]] = [[] for _ in range(1 + nargs)]
    cid = ["entry"] + [f"%a{i}" for i in range(nargs)]
    token_values: set[tuple[int, int]] = set()
    for i, a in enumerate(args):
        hsh[1 + i] = hash(("arg", i, a.type.text))
        if a.type.kind == "token":
            token_values.add((1 + i, 0))
    # the visible names: one flat dict, each region undoing its own definitions on exit
    # (a scope chain costs a dict lookup per level per operand; this is the hot path)
    env: dict[str, tuple[int, int]] = {a.name: (1 + i, 0) for i, a in enumerate(args)}
    nv = nb = 0
    nameless: dict[str, int] = {}
    ops_append, kind_append, name_append = ops.append, kind.append, name.append
    parent_append, region_append, depth_append = parent.append, region.append, depth.append
    children_append, barg_append, operands_append = children.append, barg_names.append, operands.append
    roles_append, order_append, cid_append = roles.append, order_pred.append, cid.append
    res_append, hsh_append, height_append, label_append = (res_names.append, hsh.append,
                                                          height.append, label.append)

    def lookup(use: str) -> tuple[int, int] | None:
        hit = env.get(use)
        if hit is not None:
            return hit
        base, sep, idx = use.partition("#")
        if sep:
            hit = env.get(base)
            if hit is not None:
                return (hit[0], int(idx)) if hit[1] >= 0 and idx.isdigit() else hit
        return None

    def build_region(reg: Region, owner: int, ridx: int, d: int) -> list[int]:
        nonlocal nv, nb
        undo: list[tuple[str, tuple[int, int] | None]] = []

        def define(nm: str, val: tuple[int, int]) -> None:
            undo.append((nm, env.get(nm)))
            env[nm] = val

        if owner != ROOT:
            names = []
            for j, a in enumerate(reg.args):
                port = blockarg_port(ridx, j)
                define(a.name, (owner, port))
                names.append(f"%b{nb}")
                nb += 1
                if a.type.kind == "token":
                    token_values.add((owner, port))
            barg_names[owner].append(names)
        ids: list[int] = []
        last_effect = -1
        for op in reg.ops:
            nid = len(kind)
            ids.append(nid)
            ops_append(op)
            kind_append("op")
            opname = op.name
            name_append(opname)
            parent_append(owner)
            region_append(ridx)
            depth_append(d)
            # leaf ops (most) share one empty tuple; region ops get lists below
            children_append(_NONE)
            barg_append(_NONE)
            # operands
            opnds = []
            contrib = []
            hmax = 0
            for use in op.operands:
                hit = env.get(use)
                if hit is None:
                    hit = lookup(use)
                if hit is None:
                    # undefined value (the parser warned): an opaque input
                    hit = (-1, 0)
                    contrib.append(("undef", use))
                    opnds.append(hit)
                    continue
                src, port = hit
                opnds.append(hit)
                if port < 0:
                    contrib.append(("ba", d - depth[src] - 1 if src != ROOT else d, port))
                else:
                    contrib.append((hsh[src], port))
                    h = height[src]
                    if h > hmax:
                        hmax = h
            operands_append(opnds)
            roles_append(op.operand_roles)
            op_pred = -1
            if opname in _ORDERED_UNTOKENED or opname not in KNOWN_OPS:
                op_pred = last_effect
                last_effect = nid
            order_append(op_pred)
            # results: canonical names
            results = op.results
            if op.result_group:
                base = f"%v{nv}"
                nv += 1
                rn = [f"{base}#{k}" for k in range(len(results))]
                cid_append(base)
            elif results:
                rn = [f"%v{nv + k}" for k in range(len(results))]
                nv += len(results)
                cid_append(rn[0])
            else:
                rn = []
                k = nameless.get(opname, 0)
                nameless[opname] = k + 1
                cid_append(f"^{opname}{k}")
            res_append(rn)
            hsh_append(0)
            height_append(0)
            lab = op.erased or erase_ssa(op.text)
            if op.regions and opname in ("reduce", "scan"):
                lab += " |(" + ", ".join(a.type.text for a in op.regions[0].args) + ")"
            label_append(lab)
            # regions (post-order for the hash)
            region_hashes = []
            if op.regions:
                children[nid] = []
                barg_names[nid] = []
            for ri, r in enumerate(op.regions):
                kids = build_region(r, nid, ri, d + 1)
                children[nid].append(kids)
                region_hashes.append(hash(tuple(sorted(hsh[k] for k in kids))))
                for k in kids:
                    if height[k] > hmax:
                        hmax = height[k]
            if op_pred >= 0:
                contrib.append(("order", hsh[op_pred]))
                if height[op_pred] > hmax:
                    hmax = height[op_pred]
            hsh[nid] = hash((lab, tuple(contrib), tuple(region_hashes)))
            height[nid] = hmax + 1
            rtypes = op.result_types
            for k, r in enumerate(results):
                undo.append((r, env.get(r)))
                env[r] = (nid, k)
                if k < len(rtypes) and rtypes[k].kind == "token":
                    token_values.add((nid, k))
            if op.result_group:
                undo.append((op.result_group, env.get(op.result_group)))
                env[op.result_group] = (nid, 0)
        for nm, old in reversed(undo):
            if old is None:
                del env[nm]
            else:
                env[nm] = old
        return ids

    top = build_region(entry.body, ROOT, 0, 0)
    children[ROOT] = [top]
    hsh[ROOT] = hash((label[ROOT], tuple(sorted(hsh[k] for k in top))))
    height[ROOT] = 1 + max((height[k] for k in top), default=0)

    n = len(kind)
    users: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for v in range(n):
        for pos, (src, _port) in enumerate(operands[v]):
            if src >= 0:
                users[src].append((v, pos))
        if order_pred[v] >= 0:
            users[order_pred[v]].append((v, -1))

    g = IRGraph(entry=entry, ops=ops, kind=kind, name=name, label=label, parent=parent,  # type: ignore[arg-type]
                region=region, depth=depth, children=children, operands=operands, roles=roles,
                users=users, order_pred=order_pred, hash=hsh, height=height, res_names=res_names,
                barg_names=barg_names, cid=cid, token_values=token_values)
    g.nx = _to_networkx(g)
    return g


def _to_networkx(g: IRGraph) -> nx.MultiDiGraph:
    """The MultiDiGraph of an entry, through networkx's public API (see the module docstring)."""
    G = nx.MultiDiGraph(symbol=g.entry.symbol, function=g.entry.function_name)
    entry = g.entry
    region_paths: dict[tuple[int, int], str] = {}
    nodes = [(ROOT, {"kind": "entry", "name": "entry", "label": g.label[ROOT], "cname": "entry",
                     "parent": -1, "region": 0, "region_path": "", "hints": entry.hints,
                     "symbol": entry.symbol, "line": entry.line,
                     "source": str(entry.source) if entry.source else None})]
    for i, a in enumerate(entry.args):
        nodes.append((1 + i, {"kind": "arg", "name": "arg", "label": g.label[1 + i], "cname": g.cid[1 + i],
                              "parent": ROOT, "region": 0, "region_path": "", "type": a.type.text}))
    cid, label, parent, region, name, ops = g.cid, g.label, g.parent, g.region, g.name, g.ops
    for v in g.op_nodes:
        op = ops[v]
        key = (parent[v], region[v])
        rp = region_paths.get(key)
        if rp is None:
            rp = region_paths[key] = region_of(g, cid, *key)
        src = op.source
        nodes.append((v, {"kind": "op", "name": name[v], "label": label[v], "cname": cid[v],
                          "parent": key[0], "region": key[1], "region_path": rp,
                          "result_types": [t.text for t in op.result_types], "keywords": op.keywords,
                          "attrs": op.attrs, "hints": op.hints, "line": op.line,
                          "source": str(src) if src else None}))
    G.add_nodes_from(nodes)
    add = G.add_edge
    tokens, res_names, operands, roles_of, order_pred = (g.token_values, g.res_names, g.operands, g.roles,
                                                         g.order_pred)
    for v in range(g.size):
        roles = roles_of[v]
        nroles = len(roles)
        for pos, (src, port) in enumerate(operands[v]):
            if src < 0:
                continue
            rn = res_names[src]
            value = rn[port] if 0 <= port < len(rn) else g.value_name(src, port)
            add(src, v, pos, kind="token" if (src, port) in tokens else "data", pos=pos, port=port,
                role=roles[pos] if pos < nroles else "", value=value)
        p = order_pred[v]
        if p >= 0:
            add(p, v, -1, kind="order", pos=-1, port=0, role="order", value="")
    for v, regions in enumerate(g.children):
        for r, kids in enumerate(regions):
            for k in kids:
                add(v, k, "contains", kind="contains", pos=-1, port=0, role="region", value="", region=r)
    return G


def build_graphs(module: Module) -> list[IRGraph]:
    """One graph per entry of ``module``."""
    return [build_graph(e) for e in module.entries]
