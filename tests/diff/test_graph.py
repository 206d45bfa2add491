"""The networkx graph model: def-use edges by operand position, token edges, region
nesting, canonical names (renumbered copies give equal graphs), structural hashes."""
from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest

from cutile_diag.diff.graph import _to_networkx_public, build_graph
from cutile_diag.ir_parsers.tileir import parse_tileir

from .test_differ import rename_all, swap_adjacent

NAMES = ["matmul", "matmul_tuned", "softmax", "gather_scale", "vector_add_persistent",
         "feature:while_loop", "feature:if_else", "feature:scan_rows", "feature:histogram",
         "feature:debug_print"]


def graph(text):
    (e,) = parse_tileir(text).entries
    return build_graph(e)


@pytest.mark.parametrize("name", NAMES)
def test_fast_networkx_fill_matches_the_public_api(all_dumps, name):
    g = graph(all_dumps[name].text(loc=True))
    fast, public = g.nx, _to_networkx_public(g)
    assert nx.utils.graphs_equal(fast, public)
    assert sorted(fast.edges(keys=True, data=True), key=repr) == sorted(public.edges(keys=True, data=True), key=repr)
    assert fast.number_of_nodes() == 1 + len(g.entry.args) + sum(1 for _ in g.entry.walk())
    assert nx.is_directed_acyclic_graph(fast)


def test_edges_carry_position_role_and_kind(all_dumps):
    g = graph(all_dumps["matmul"].text())
    G = g.nx
    by_name = {}
    for v, d in G.nodes(data=True):
        by_name.setdefault(d["name"], []).append(v)
    (mma,) = by_name["mmaf"]
    ins = sorted((d["pos"], G.nodes[u]["name"]) for u, _v, d in G.in_edges(mma, data=True))
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
    # region nesting is a node attribute, not an edge
    assert g.region_path(mma).startswith("for %v")
    assert all(G.nodes[v]["parent"] == loop for v in g.children[loop][0])


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
