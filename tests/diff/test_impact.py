"""The public graph API (``load_graph``, ``value_flow``), the Weisfeiler-Lehman signature
stage of the matcher, each change's impact slice (JSON, rich) and the GraphML export."""
from __future__ import annotations

import json
import random

import networkx as nx
import pytest

from cutile_diag.diff import load_graph, value_flow
from cutile_diag.diff.core import diff_paths, diff_texts
from cutile_diag.diff.graph import build_graph
from cutile_diag.diff.impact import _Reach
from cutile_diag.diff.match import MatchOptions, _Matcher
from cutile_diag.errors import UsageError
from cutile_diag.ir_parsers.tileir import parse_tileir

from .test_differ import rename_all, run_cli

NAMES = ["matmul", "matmul_tuned", "softmax", "gather_scale", "vector_add_persistent",
         "feature:while_loop", "feature:if_else", "feature:scan_rows", "feature:histogram"]


def test_load_graph_from_a_file_a_capture_and_a_module(all_dumps, example_captures):
    d = all_dumps["matmul"]
    G = load_graph(d.loc)
    assert isinstance(G, nx.MultiDiGraph) and G.graph["function"] == "matmul"
    assert {e for _u, _v, e in G.edges(data="kind")} == {"data", "token", "contains"}
    assert nx.is_directed_acyclic_graph(G)
    # the same graph from bytecode, a capture folder (path or object) and a parsed module
    cap = example_captures["matmul"]
    for other in (load_graph(d.bytecode), load_graph(cap.path), load_graph(cap),
                  load_graph(parse_tileir(d.text()))):
        assert other.number_of_edges() == G.number_of_edges()
        assert [x["name"] for _v, x in other.nodes(data=True)] == [x["name"] for _v, x in G.nodes(data=True)]
    # a question a kernel author asks: which ops feed the store?
    F = value_flow(G)
    (store,) = [v for v, x in G.nodes(data=True) if x["name"] == "store_view_tko"]
    feeders = {G.nodes[v]["name"] for v in nx.ancestors(F, store)}
    assert {"mmaf", "load_view_tko", "for"} <= feeders


def test_load_graph_entry_selection(all_dumps, tmp_path):
    both = tmp_path / "two.tileir"
    both.write_text(all_dumps["matmul"].text() + all_dumps["softmax"].text())
    with pytest.raises(UsageError, match="2 entries"):
        load_graph(both)
    assert load_graph(both, entry="softmax").graph["function"] == "softmax"
    with pytest.raises(UsageError, match="no entry named nope"):
        load_graph(both, entry="nope")


@pytest.mark.parametrize("name", NAMES)
def test_reach_sets_are_networkx_descendants_of_the_value_flow(all_dumps, name):
    """The differ's one-pass reach sets equal nx.descendants on value_flow (loops included)."""
    (e,) = parse_tileir(all_dumps[name].text()).entries
    g = build_graph(e)
    F = value_flow(g.nx)
    walk, table = _Reach(g), _Reach(g)
    table.table()
    rng = random.Random(len(name))
    for s in rng.sample(list(g.op_nodes), min(40, len(g.op_nodes))) + list(range(1, 1 + len(e.args))):
        want = nx.descendants(F, s) - {s}
        for r in (walk, table):               # one traversal per change / one table for many
            got = {v for v in range(g.size) if r.of({s}) >> v & 1}
            assert got == want, (name, g.name[s])
    seeds = set(rng.sample(list(g.op_nodes), 3))
    assert walk.of(seeds) == table.of(seeds)


def test_a_loop_carried_value_reaches_the_store_after_the_loop_not_the_index_math(ir_dump):
    res = diff_paths(ir_dump("matmul").loc, ir_dump("knob:matmul_latency").loc)
    hints = [c for c in res.semantic() if c.kind == "op_hint"]
    assert len(hints) == 2
    for c in hints:
        im = c.impact
        assert im is not None and len(im.seeds) == 1
        # load -> mma -> continue -> the loop's accumulator -> conversion -> the store
        assert set(im.by_op) == {"mmaf", "continue", "ftof", "store_view_tko"}, im.by_op
        assert [s["op"] for s in im.stores] == ["store_view_tko"]
        assert im.stores[0]["source"].endswith(".py:" + im.stores[0]["source"].rsplit(":", 1)[1])
        assert im.ops == len(im.nodes) == sum(im.by_op.values())


def test_impact_in_json_and_rich(capsys, ir_dump):
    code, out, _ = run_cli(capsys, ir_dump("softmax").loc, ir_dump("knob:softmax_pad_zero").loc, "--json")
    assert code == 1
    (c,) = json.loads(out)["changes"]
    im = c["impact"]
    assert c["kind"] == "padding" and im["ops"] > 3 and im["stores"]
    assert im["stores"][0]["op"] == "store_view_tko" and "nodes_omitted" not in im and len(im["nodes"]) == im["ops"]
    assert set(im) >= {"entry", "seeds", "ops", "by_op", "stores", "nodes"}
    # the padded row load feeds the max, the exp, the sum and the division
    assert {"exp", "divf"} <= set(im["by_op"])
    code, out, _ = run_cli(capsys, ir_dump("softmax").loc, ir_dump("knob:softmax_pad_zero").loc)
    flat = " ".join(out.split())
    assert "Impact slices" in flat and f"{im['ops']} ops → 1 side effect" in flat, out


def test_html_says_when_a_slice_reaches_no_ops(ir_dump):
    """A change whose slice is empty (an unused op's attribute) shows a plain line in the HTML
    report's impact column, not an expander that opens on nothing."""
    from dataclasses import replace
    from cutile_diag.diff.output import render_html
    res = diff_paths(ir_dump("softmax").loc, ir_dump("knob:softmax_pad_zero").loc)
    (c,) = res.changes
    full = render_html(res)
    assert full.count("<details class=impact>") == 1 and "no ops reached" not in full
    c.impact = replace(c.impact, ops=0, nodes=[], stores=[], by_op={}, bits=0)
    page = render_html(res)
    assert "<details class=impact>" not in page and page.count("no ops reached") == 1


def test_no_impact_for_entry_hints_and_equivalent_inputs(ir_dump):
    res = diff_paths(ir_dump("matmul").plain, ir_dump("matmul", hints={"occupancy": 2}).plain)
    (c,) = res.changes
    assert c.kind == "entry_hint" and c.impact is None        # no op's inputs change
    assert all(c.impact is None for c in diff_paths(ir_dump("matmul").plain, ir_dump("matmul").loc).changes)


def test_wl_signatures_pair_ops_alone(all_dumps):
    """With only the entry and the arguments paired, the signature stage by itself pairs a
    renamed copy's ops, and only correctly (canonical ids are name-independent)."""
    for name in ("softmax", "gather_scale", "vector_add_persistent"):
        text = all_dumps[name].text()
        (ea,) = parse_tileir(text).entries
        (eb,) = parse_tileir(rename_all(text, 3, "fresh")).entries
        A, B = build_graph(ea), build_graph(eb)
        m = _Matcher(A, B, MatchOptions())
        m.pair(0, 0, "root")
        for i in range(len(ea.args)):
            m.pair(1 + i, 1 + i, "arg")
        before = len(m.how)
        m.propagate = lambda: None       # type: ignore[method-assign]  # the stage alone
        m.signatures()
        paired = [(a, m.a2b[a]) for a in A.op_nodes if m.a2b[a] >= 0]
        assert len(m.how) > before and len(paired) > len(list(A.op_nodes)) // 3, name
        assert all(A.cid[a] == B.cid[b] for a, b in paired), name


def test_graphml_export_marks_changed_and_impacted_ops(capsys, ir_dump, tmp_path):
    out = tmp_path / "diff.graphml"
    code, _, err = run_cli(capsys, ir_dump("vector_add").loc, ir_dump("knob:vector_add_acquire").loc,
                           "--graphml", out)
    assert code == 1 and str(out) in err
    D = nx.read_graphml(out)
    res = diff_paths(ir_dump("vector_add").loc, ir_dump("knob:vector_add_acquire").loc)
    changed = {n for n, d in D.nodes(data=True) if d["changed"]}
    want = {f"after:{d.b}" for d in res.structural if d.kind != "removed" and d.b >= 0} | \
        {f"before:{d.a}" for d in res.structural if d.kind == "removed"}
    assert changed == want and changed
    assert all(D.nodes[n]["change"] for n in changed)
    impacted = {n for n, d in D.nodes(data=True) if d["impact"]}
    assert impacted == {f"after:{v}" for c in res.changes if c.impact for v in c.impact.node_ids()}
    kinds = {d["kind"] for _u, _v, d in D.edges(data=True)}
    assert {"data", "token", "contains"} <= kinds
    # an equivalent pair: nothing marked
    code, _, _ = run_cli(capsys, ir_dump("vector_add").plain, ir_dump("vector_add").loc, "--graphml", out)
    D = nx.read_graphml(out)
    assert code == 0 and not any(d["changed"] or d["impact"] for _n, d in D.nodes(data=True))
    code, _, err = run_cli(capsys, ir_dump("vector_add").plain, ir_dump("vector_add").loc, "--graphml", tmp_path)
    assert code == 2 and "is a directory" in err


def test_impact_covers_many_changes_at_once(all_dumps):
    """A hint on every load of an unrolled copy: one change per load, each with its slice."""
    text = all_dumps["matmul"].text()
    new = text.replace("load_view_tko weak", "load_view_tko relaxed")
    res = diff_texts(text, new)
    cs = [c for c in res.changes if c.kind == "memory_order"]
    assert len(cs) >= 1 and all(c.impact and c.impact.stores for c in cs)
