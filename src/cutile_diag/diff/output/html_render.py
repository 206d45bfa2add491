"""A self-contained HTML report (inline CSS and a few lines of JS, nothing fetched).

Sections (each collapsible): summary, semantic changes with their impact slices,
unclassified changes, cubin facts, structural deltas, per-region op counts and, per entry, a
side-by-side listing of both programs in canonical names (matched ops on one row; changed
rows marked by kind, ops in a change's impact slice marked ``impact``; a toggle hides
unchanged rows).  Rows carry ``data-change`` / ``data-node`` for tools and tests.
"""
from __future__ import annotations

import html
from pathlib import Path

from ..delta import text as op_text
from ..impact import impact_summary, impacted_nodes
from ..model import ADDED, ATTRIBUTE, MOVED, REMOVED, REWIRED, DiffResult
from ..cubin import _fmt

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#1d1d1f;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
table{border-collapse:collapse;margin:6px 0}th,td{padding:3px 8px;text-align:left;vertical-align:top;border-bottom:1px solid #eee}
th{background:#f6f6f8;font-weight:600}.verdict{font-weight:700;font-size:16px;margin:10px 0}
.eq{color:#137333}.ne{color:#b3261e}.dim{color:#777}.kind{font-weight:600;white-space:nowrap}
.attribute{background:#fff8e1}.added{background:#e6f4ea}.removed{background:#fce8e6}.moved{background:#f3e8fd}
.rewired{background:#e8f0fe}.del{color:#b3261e}.ins{color:#137333}
table.sbs{table-layout:fixed;width:100%}table.sbs th.ln{width:4.5em}
table.sbs td{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;white-space:pre-wrap;border:none;padding:1px 6px}
table.sbs td.ln{color:#999;text-align:right;user-select:none}table.sbs.only-changed tr.same{display:none}table.sbs tr.same td.code{color:#444}
details{margin:4px 0}summary{cursor:pointer}details.section>summary{font-size:16px;font-weight:600;margin:22px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table.sbs tr.impact td.code{background:#fdf6e3}table.sbs th{position:sticky;top:0}
body,td,summary,.mono{overflow-wrap:anywhere}th,td.num,td.kind{overflow-wrap:normal;white-space:nowrap}.scroll{overflow:auto;max-width:100%}.scroll.sbs-panel{max-height:85vh;border:1px solid #eee}
table.sbs tr.impact td.ln{border-left:3px solid #f9ab00}.legend span{margin-right:10px;padding:0 6px}.pill{display:inline-block;padding:0 6px;border-radius:8px;background:#eee;margin-right:4px;font-size:12px}
"""

_JS = """
function toggleSame(id, on){var t=document.getElementById(id);t.classList.toggle('only-changed',on)}
"""


def _e(s) -> str:
    return html.escape("" if s is None else str(s))


def _short(src: str | None) -> str:
    if not src:
        return ""
    path, _, line = src.rpartition(":")
    return f"{Path(path).name}:{line}"


def _changes_table(r: DiffResult, level: str) -> str:
    rows = [c for c in r.changes if c.level == level]
    if not rows:
        return ""
    with_impact = any(c.impact is not None for c in rows)
    out = ["<table class=changes><tr><th>kind</th><th>change</th><th>where</th><th>before</th><th>after</th>"
           + ("<th>impact slice</th>" if with_impact else "") + "</tr>"]
    for c in rows:
        where = " ".join(x for x in (c.entry if len(r.entries) > 1 else "", _short(c.source),
                                     f"line {c.line_before}→{c.line_after}" if c.line_after or c.line_before else "",
                                     c.region_path or "", c.arch or "") if x)
        out.append(f"<tr><td class=kind>{_e(c.kind)}</td><td>{_e(c.detail)}</td><td class=dim>{_e(where)}</td>"
                   f"<td class=mono>{_e(_brief(c.before))}</td><td class=mono>{_e(_brief(c.after))}</td>"
                   + (f"<td>{_impact_cell(c)}</td>" if with_impact else "") + "</tr>")
    out.append("</table>")
    return "".join(out)


def _impact_cell(c) -> str:
    im = c.impact
    if im is None:
        return ""
    if not im.ops and not im.stores:        # nothing to unfold
        return "<span class=dim>no ops reached</span>"
    head = _e(impact_summary([c]))
    ops = ", ".join(f"{k} {n}" for k, n in im.by_op.items())
    stores = "".join(f"<li class=mono>{_e(st['op'])} {_e(st['id'])} {_e(_short(st['source']) or 'line ' + str(st['line']))}</li>"
                     for st in im.stores)
    more = f"{im.ops} ops: listed in --graphml" if im.ops > len(im.nodes) else ""
    return (f"<details class=impact><summary>{head}</summary><div class=dim>from {_e(', '.join(im.seeds[:8]))}"
            f"{' …' if len(im.seeds) > 8 else ''}</div><div class=dim>{_e(ops)}</div>"
            f"{'<ul>' + stores + '</ul>' if stores else ''}<div class=mono>{_e(' '.join(im.nodes))}{more}</div></details>")


def _brief(v) -> str:
    if isinstance(v, list):
        s = "; ".join(str(x) for x in v[:4]) + (" …" if len(v) > 4 else "")
    else:
        s = "" if v is None else str(v)
    return s if len(s) <= 200 else s[:199] + "…"


def _cubin(r: DiffResult) -> str:
    if not r.cubin or not r.cubin.get("archs"):
        return ""
    out = ["<table><tr><th>arch</th><th>fact</th><th>before</th><th>after</th><th>Δ</th></tr>"]
    for arch, d in r.cubin["archs"].items():
        for key in d["before"]:
            x, y = d["before"].get(key), d["after"].get(key)
            delta = f"{y - x:+d}" if isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool) and x != y else ""
            cls = " class=attribute" if x != y else ""
            out.append(f"<tr{cls}><td>{_e(arch)}</td><td>{_e(key)}</td><td>{_e(_fmt(x))}</td>"
                       f"<td>{_e(_fmt(y))}</td><td>{delta}</td></tr>")
        for part in ("classes", "mma_forms", "mufu"):
            for k, v in (d.get("sass") or {}).get(part, {}).items():
                out.append(f"<tr class=attribute><td>{_e(arch)}</td><td>sass {_e(k)}</td><td>{v['before']}</td>"
                           f"<td>{v['after']}</td><td>{v['delta']:+d}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _structural(r: DiffResult, limit: int) -> str:
    if not r.structural:
        return ""
    kinds = {c.id: c.kind for c in r.changes}
    out = []
    for d in r.structural[:limit]:
        why = "unused op: no effect" if d.dead else ", ".join(sorted({kinds.get(i, "?") for i in d.explained_by}))
        where = " ".join(x for x in (d.entry if len(r.entries) > 1 else "",
                                     f"L{d.line_before or '-'}→{d.line_after or '-'}", _short(d.source),
                                     d.region_path) if x)
        body = []
        if d.kind in (ATTRIBUTE, REWIRED):
            body.append(f"<div class='mono del'>- {_e(d.before)}</div><div class='mono ins'>+ {_e(d.after)}</div>")
            for a in d.aspects:
                body.append(f"<div class='mono dim'>&nbsp;&nbsp;{_e(a.field)}: {_e(a.before)} → {_e(a.after)}</div>")
        elif d.kind == ADDED:
            body.append(f"<div class='mono ins'>+ {_e(d.after)}</div>")
        elif d.kind == REMOVED:
            body.append(f"<div class='mono del'>- {_e(d.before)}</div>")
        elif d.kind == MOVED:
            body.append(f"<div class=mono>{_e(d.before)} → {_e(d.after)}</div>")
        out.append(f"<div class={_e(d.kind)} style='padding:4px 8px;margin:3px 0'><span class=kind>{_e(d.kind)}</span> "
                   f"<span class=mono>{_e(d.op)}</span> <span class=dim>{_e(where)}"
                   f"{' (← ' + _e(why) + ')' if why else ''}</span>{''.join(body)}</div>")
    if len(r.structural) > limit:
        out.append(f"<p class=dim>… {len(r.structural) - limit} more (see the JSON output)</p>")
    return "".join(out)


def _regions(r: DiffResult) -> str:
    if not r.regions:
        return ""
    out = ["<table><tr><th>region</th><th>before</th><th>after</th><th>delta</th></tr>"]
    for rd in r.regions:
        name = (f"{rd.entry}: " if len(r.entries) > 1 else "") + (rd.region_path or "entry body")
        out.append(f"<tr><td class=mono>{_e(name)}</td><td>{sum(rd.before.values())}</td><td>{sum(rd.after.values())}</td>"
                   f"<td class=mono>{_e(', '.join(f'{k} {v:+d}' for k, v in rd.delta.items()))}</td></tr>")
    out.append("</table>")
    return "".join(out)


def side_by_side_rows(detail, impacted: set[int] = frozenset()) -> list[tuple[str, int | None, str, int | None, str, int]]:
    """(row class, line before, text before, line after, text after, depth) in after-order;
    unchanged rows of ops in ``impacted`` (after-graph nodes) get class ``impact``."""
    m, na, nb, deltas = detail.matching, detail.names_a, detail.names_b, detail.deltas
    A, B = m.a, m.b
    kind_b: dict[int, str] = {}
    kind_a: dict[int, str] = {}
    for d in deltas:
        if d.b >= 0 and d.kind in (ATTRIBUTE, REWIRED, MOVED):
            kind_b[d.b] = kind_b.get(d.b) or d.kind
        if d.a >= 0 and d.kind == REMOVED:
            kind_a[d.a] = REMOVED
    order_a = list(A.op_nodes)
    pos_a = {v: i for i, v in enumerate(order_a)}
    ia = 0
    emitted: set[int] = set()
    rows = []

    def line(g, v):
        op = g.ops[v]
        return op.line if op is not None else None

    for b in B.op_nodes:
        a = m.b2a[b]
        if a < 0:
            rows.append((ADDED, None, "", line(B, b), op_text(B, nb, b), B.depth[b]))
            continue
        pa = pos_a[a]
        while ia < pa:
            x = order_a[ia]
            if m.a2b[x] < 0 and x not in emitted:
                rows.append((REMOVED, line(A, x), op_text(A, na, x), None, "", A.depth[x]))
                emitted.add(x)
            ia += 1
        ia = max(ia, pa + 1)
        emitted.add(a)
        cls = kind_b.get(b) or ("impact" if b in impacted else "same")
        rows.append((cls, line(A, a), op_text(A, na, a), line(B, b), op_text(B, nb, b), B.depth[b]))
    for x in order_a:
        if m.a2b[x] < 0 and x not in emitted:
            rows.append((REMOVED, line(A, x), op_text(A, na, x), None, "", A.depth[x]))
    return rows


def _sbs(r: DiffResult, max_rows: int) -> str:
    out = []
    for k, detail in enumerate(r.details):
        rows = side_by_side_rows(detail, impacted_nodes(r.changes, detail.name))
        tid = f"sbs{k}"
        changed = sum(1 for x in rows if x[0] not in ("same", "impact"))
        reached = sum(1 for x in rows if x[0] == "impact")
        out.append(f"<details {'open' if len(rows) <= 2000 else ''}><summary>{_e(detail.name)}: {len(rows)} rows, "
                   f"{changed} changed, {reached} in impact slices</summary><label><input type=checkbox onchange=\"toggleSame('{tid}',this.checked)\"> "
                   f"only changed rows</label><div class='scroll sbs-panel'><table class=sbs id={tid}>"
                   "<tr><th class=ln></th><th>before</th><th class=ln></th><th>after</th></tr>")
        for cls, la, ta, lb, tb, depth in rows[:max_rows]:
            ind = "  " * depth
            out.append(f"<tr class={cls} data-change={cls}><td class=ln>{la or ''}</td><td class=code>{_e(ind + ta) if ta else ''}</td>"
                       f"<td class=ln>{lb or ''}</td><td class=code>{_e(ind + tb) if tb else ''}</td></tr>")
        out.append("</table></div>")
        if len(rows) > max_rows:
            out.append(f"<p class=dim>… {len(rows) - max_rows} more rows</p>")
        out.append("</details>")
    return "".join(out)


def render_html(r: DiffResult, *, limit: int = 2000, max_rows: int = 20000) -> str:
    """The diff as one self-contained HTML page: verdict, entries, changes by level, the cubin
    side, structural deltas, region counts and a side-by-side listing (at most ``max_rows`` rows)."""
    s = r.summary()
    verdict = ("<div class='verdict eq'>EQUIVALENT</div>" if r.equivalent else
               f"<div class='verdict ne'>DIFFERENT: {s['semantic_changes']} semantic, {s['unclassified_changes']} "
               f"unclassified, {s['cubin_changes']} cubin changes</div>")
    ents = "".join(f"<tr><td class=mono>{_e(e.before)}</td><td class=mono>{_e(e.after)}</td><td class=num>{_e(e.status)}</td>"
                   f"<td class=num>{e.ops_before}</td><td class=num>{e.ops_after}</td><td class=num>{e.matched}</td></tr>"
                   for e in r.entries)
    pills = "".join(f"<span class=pill>{_e(k)} {v}</span>" for k, v in s["structural"].items())
    parts = [
        "<!DOCTYPE html><html><head><meta charset=utf-8><title>cutile-diag ir-diff</title>",
        f"<style>{_CSS}</style><script>{_JS}</script></head><body>",
        f"<h1>cutile-diag ir-diff</h1><div class=mono>{_e(r.before.path)} → {_e(r.after.path)}</div>",
        verdict,
        f"<div>{pills}</div>",
        "<div class='legend dim'>marks: <span class=attribute>attribute</span><span class=added>added</span>"
        "<span class=removed>removed</span><span class=moved>moved</span><span class=rewired>rewired</span>"
        "<span style='border-left:3px solid #f9ab00'>impact slice (inputs reached by a change)</span></div>",
        "<table><tr><th>entry before</th><th>entry after</th><th>status</th><th>ops before</th><th>ops after</th>"
        f"<th>matched</th></tr>{ents}</table>",
    ]
    if r.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{_e(w)}</li>" for w in r.warnings[:50]) + "</ul>")
    for title, body in (("Semantic changes", _changes_table(r, "semantic")),
                        ("Unclassified structural changes", _changes_table(r, "structural")),
                        ("Cubin side", _cubin(r) + _changes_table(r, "cubin")),
                        ("Structural deltas", _structural(r, limit)),
                        ("Op counts per region", _regions(r)),
                        ("Side by side (canonical names)", _sbs(r, max_rows))):
        if body:
            parts.append(f"<details class=section open><summary>{title}</summary>{body}</details>")
    parts.append("</body></html>")
    return "\n".join(parts)
