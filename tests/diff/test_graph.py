"""The networkx graph model: def-use edges by operand position, token edges, region
containment edges, canonical names (renumbered copies give equal graphs), structural hashes."""
from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest

from cutile_diag.diff.graph import build_graph
from cutile_diag.ir_parsers.tileir import parse_tileir

from .test_differ import rename_all, swap_adjacent

NAMES = ["matmul", "matmul_tuned", "softmax", "gather_scale", "vector_add_persistent",
         "feature:while_loop", "feature:if_else", "feature:scan_rows", "feature:histogram",
         "feature:debug_print"]


def graph(text):
    (e,) = parse_tileir(text).entries
    return build_graph(e)


@pytest.mark.parametrize("name", NAMES)
def test_the_graph_is_a_dag_of_every_op_with_its_columns(all_dumps, name):
    g = graph(all_dumps[name].text(loc=True))
    G = g.nx
    assert type(G) is nx.MultiDiGraph
    assert G.number_of_nodes() == g.size == 1 + len(g.entry.args) + sum(1 for _ in g.entry.walk())
    assert nx.is_directed_acyclic_graph(G)
    assert any(str(d["source"]).split(":")[0].endswith(".py") for _v, d in G.nodes(data=True))
    # the columns the matcher reads describe the same nodes and edges
    for v in g.op_nodes:
        d = G.nodes[v]
        assert (d["name"], d["label"], d["cname"], d["parent"]) == (g.name[v], g.label[v], g.cid[v], g.parent[v])
        assert d["region_path"] == g.region_path(v)
        assert d["result_types"] == [t.text for t in g.ops[v].result_types]
        assert d["source"] == (str(g.ops[v].source) if g.ops[v].source else None)
        ins = {k: u for u, _v, k, e in G.in_edges(v, keys=True, data=True) if e["kind"] in ("data", "token")}
        assert ins == {pos: src for pos, (src, _p) in enumerate(g.operands[v]) if src >= 0}
        (owner,) = [u for u, _v, e in G.in_edges(v, data=True) if e["kind"] == "contains"]
        assert owner == g.parent[v]


def test_edges_carry_position_role_and_kind(all_dumps):
    g = graph(all_dumps["matmul"].text())
    G = g.nx
    by_name = {}
    for v, d in G.nodes(data=True):
        by_name.setdefault(d["name"], []).append(v)
    (mma,) = by_name["mmaf"]
    ins = sorted((d["pos"], G.nodes[u]["name"]) for u, _v, d in G.in_edges(mma, data=True) if d["kind"] != "contains")
    # A and B tiles from the loads, the accumulator from the for's block argument
    assert ins == [(0, "load_view_tko"), (1, "load_view_tko"), (2, "for")]
    (loop,) = by_name["for"]
    assert G.nodes[mma]["parent"] == loop
    acc = [d for u, _v, d in G.in_edges(mma, data=True) if d["pos"] == 2][0]
    assert acc["port"] < 0 and acc["kind"] == "data"           # a block argument
    load = by_name["load_view_tko"][0]
    roles = {d["role"]: d["kind"] for _u, _v, d in G.in_edges(load, data=True)}
    assert roles["token"] == "token" and roles["index"] == "data"
    kinds = Counter(d["kind"] for _u, _v, d in G.edges(data=True))
    assert kinds["token"] >= 3 and kinds["data"] > kinds["token"]
    # region nesting: a typed edge from the owner, and node attributes
    assert g.region_path(mma).startswith("for %v") and G.nodes[mma]["region_path"] == g.region_path(mma)
    assert all(G.nodes[v]["parent"] == loop for v in g.children[loop][0])
    assert sorted(v for _u, v, d in G.out_edges(loop, data=True) if d["kind"] == "contains") == sorted(g.children[loop][0])
    assert G.has_edge(loop, mma, key="contains")


def test_untokened_side_effects_are_ordered(all_dumps):
    g = graph(all_dumps["feature:debug_print"].text())
    order = [d for _u, _v, d in g.nx.edges(data=True) if d["kind"] == "order"]
    asserts = [v for v, d in g.nx.nodes(data=True) if d["name"] == "assert"]
    assert asserts and all(g.nx.in_degree(v) >= 1 for v in asserts)
    assert all(d["role"] == "order" for d in order)


@pytest.mark.parametrize("name", NAMES)
def test_renumbered_copies_give_equal_graphs(all_dumps, name):
    text = all_dumps[name].text()
    g1, g2 = graph(text), graph(rename_all(text, 5, "permute"))
    assert g1.cid == g2.cid and g1.label == g2.label and g1.hash == g2.hash
    strip = lambda G: {v: {k: x for k, x in d.items() if k != "line"} for v, d in G.nodes(data=True)}  # noqa: E731
    assert strip(g1.nx) == strip(g2.nx)
    assert sorted(g1.nx.edges(keys=True, data=True), key=repr) == sorted(g2.nx.edges(keys=True, data=True), key=repr)


@pytest.mark.parametrize("name", NAMES)
def test_reordered_copies_give_isomorphic_graphs(all_dumps, name):
    text = all_dumps[name].text()
    new, swaps = swap_adjacent(rename_all(text, 9, "fresh"), 9)
    assert swaps > 0
    g1, g2 = graph(text), graph(new)
    assert Counter(g1.hash) == Counter(g2.hash)
    assert g1.hash[0] == g2.hash[0]                      # the entry's hash covers everything
    nm = lambda a, b: a["label"] == b["label"]           # noqa: E731
    em = lambda a, b: sorted((d["pos"], d["kind"]) for d in a.values()) == \
        sorted((d["pos"], d["kind"]) for d in b.values())  # noqa: E731
    assert nx.is_isomorphic(g1.nx, g2.nx, node_match=nm, edge_match=em)


def test_a_changed_op_changes_its_hash_and_its_users(all_dumps):
    text = all_dumps["vector_add"].text()
    g1 = graph(text)
    g2 = graph(text.replace(" addf ", " subf ", 1))
    diff = [v for v in range(g1.size) if g1.hash[v] != g2.hash[v]]
    names = {g1.name[v] for v in diff}
    assert names == {"entry", "addf", "store_view_tko"}
