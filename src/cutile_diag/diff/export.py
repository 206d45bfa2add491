"""The diff as one graph for standard graph viewers (yEd, Gephi, Cytoscape): GraphML.

Nodes are the after program's nodes (``after:<n>``) plus the ops only the before program
has (``before:<n>``); with several entry pairs every id is prefixed by the entry name.
Node attributes (all scalars, as GraphML wants): ``side``, ``entry``, ``name`` (opcode),
``id`` (the display name used by the report: ``%v12``, ``%new3``), ``text`` (the op in
display names), ``region_path``, ``line``, ``source``, ``change`` (the structural delta
kinds, comma-separated: attribute / added / removed / moved / rewired; '' when unchanged),
``changed`` (bool), ``changes`` (the ids of the semantic changes explaining it),
``impact`` (bool: in the impact slice of some change) and ``generation`` (the op's
topological generation in its graph: data dependences and nesting).  Edges keep
``kind`` (data / token / order / contains), ``pos``, ``role`` and ``value``.
"""
from __future__ import annotations

import networkx as nx

from .delta import text as op_text
from .impact import impacted_nodes
from .model import REMOVED, DiffResult


def _generations(G: nx.MultiDiGraph) -> dict[int, int]:
    return {v: k for k, gen in enumerate(nx.topological_generations(G)) for v in gen}


def diff_graph(r: DiffResult) -> nx.MultiDiGraph:
    """The diff of ``r`` (from ``diff_paths`` / ``diff_modules``) as one MultiDiGraph."""
    D = nx.MultiDiGraph(before=r.before.path, after=r.after.path, equivalent=r.equivalent)
    multi = len(r.details) > 1
    for det in r.details:
        m, na, nb = det.matching, det.names_a, det.names_b
        A, B = m.a, m.b
        pre = f"{det.name}:" if multi else ""
        kinds_b: dict[int, list[str]] = {}
        changes_of: dict[tuple[str, int], set[int]] = {}
        for d in det.deltas:
            side, v = ("before", d.a) if d.kind == REMOVED else ("after", d.b)
            if v < 0:
                continue
            if side == "after":
                kinds_b.setdefault(v, []).append(d.kind)
            changes_of.setdefault((side, v), set()).update(d.explained_by)
        reached = impacted_nodes(r.changes, det.name)

        def node(side: str, g, names, v: int, change: str, gen: dict[int, int]) -> tuple[str, dict]:
            op = g.ops[v]
            return (f"{pre}{side}:{v}", {
                "side": side, "entry": det.name, "name": g.name[v], "id": names.cid[v],
                "text": op_text(g, names, v), "region_path": g.nx.nodes[v]["region_path"],
                "line": op.line if op is not None else (g.entry.line or -1),
                "source": str(op.source) if op is not None and op.source else "",
                "change": change, "changed": bool(change),
                "changes": ",".join(map(str, sorted(changes_of.get((side, v), ())))),
                "impact": side == "after" and v in reached, "generation": gen.get(v, -1)})

        gen_b, gen_a = _generations(B.nx), _generations(A.nx)
        D.add_nodes_from(node("after", B, nb, v, ",".join(dict.fromkeys(kinds_b.get(v, ()))), gen_b)
                         for v in range(B.size))
        removed = [v for v in A.op_nodes if m.a2b[v] < 0]
        D.add_nodes_from(node("before", A, na, v, REMOVED, gen_a) for v in removed)
        for u, v, k, e in B.nx.edges(keys=True, data=True):
            D.add_edge(f"{pre}after:{u}", f"{pre}after:{v}", key=str(k), kind=e["kind"], pos=e["pos"],
                       role=e["role"], value=e["value"])
        gone = set(removed)
        for v in removed:
            for u, w, k, e in list(A.nx.in_edges(v, keys=True, data=True)) + list(A.nx.out_edges(v, keys=True, data=True)):
                ends = []
                for x in (u, w):
                    if x in gone:
                        ends.append(f"{pre}before:{x}")
                    elif m.a2b[x] >= 0:
                        ends.append(f"{pre}after:{m.a2b[x]}")
                    else:
                        break
                if len(ends) == 2 and not D.has_edge(ends[0], ends[1], key=f"before:{k}"):
                    D.add_edge(ends[0], ends[1], key=f"before:{k}", kind=e["kind"], pos=e["pos"],
                               role=e["role"], value=e["value"])
    return D


def graphml(r: DiffResult) -> str:
    """The GraphML text of ``diff_graph(r)``."""
    return "\n".join(nx.generate_graphml(diff_graph(r))) + "\n"
