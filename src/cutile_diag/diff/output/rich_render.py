"""Rich rendering of a DiffResult: summary first, then semantic changes, the cubin side,
the structural diff in canonical names (with source lines) and per-region op counts."""
from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..impact import impact_summary
from ..model import ADDED, ATTRIBUTE, MOVED, REMOVED, REWIRED, DiffResult
from ..cubin import _fmt

_MARK = {ATTRIBUTE: ("~", "yellow"), ADDED: ("+", "green"), REMOVED: ("-", "red"),
         MOVED: (">", "magenta"), REWIRED: ("=", "cyan")}


def _short(src: str | None) -> str:
    if not src:
        return ""
    path, _, line = src.rpartition(":")
    return f"{Path(path).name}:{line}"


def _clip(s: str | None, n: int = 160) -> str:
    s = s or ""
    return s if len(s) <= n else s[: n - 1] + "…"


def summary_lines(r: DiffResult) -> list[Text | str]:
    """The header lines: both paths, the verdict and the counts."""
    s = r.summary()
    out: list = []
    head = Text()
    head.append("ir-diff ", style="bold")
    head.append(r.before.path, style="cyan")
    head.append("  →  ")
    head.append(r.after.path, style="cyan")
    out.append(head)
    for e in r.entries:
        if e.status == "matched":
            out.append(f"  entry [bold]{escape(e.name)}[/]  ops {e.ops_before} → {e.ops_after}, matched {e.matched}")
        elif e.status == "renamed":
            out.append(f"  entry [bold]{escape(e.function_before or '?')}[/] → [bold]{escape(e.function_after or '?')}[/]"
                       f"  ops {e.ops_before} → {e.ops_after}, matched {e.matched}"
                       f"\n    [dim]{escape(e.before or '')}\n    → {escape(e.after or '')}[/]")
        else:
            out.append(f"  entry [bold]{escape(e.name)}[/] [red]{e.status}[/]")
    if r.equivalent:
        out.append("[bold green]EQUIVALENT[/]: the programs match op for op (SSA names and the order of "
                   "independent ops ignored)")
        return out
    parts = [f"{v} {k}" for k, v in sorted(s["structural"].items())]
    verdict = "[bold red]DIFFERENT[/]"
    if r.ir_equivalent:
        verdict += ": identical TileIR, different cubin"
    else:
        verdict += f": {s['semantic_changes']} semantic change{'s' if s['semantic_changes'] != 1 else ''}"
        if s["unclassified_changes"]:
            verdict += f", {s['unclassified_changes']} unclassified"
        verdict += f"; structural deltas: {', '.join(parts) or 'none'}"
        if s["dead_ops"]:
            verdict += f" ({s['dead_ops']} on unused ops)"
    if s["cubin_changes"]:
        verdict += f"; {s['cubin_changes']} cubin fact{'s' if s['cubin_changes'] != 1 else ''} changed"
    out.append(verdict)
    return out


def changes_table(r: DiffResult, level: str, title: str) -> Table | None:
    """A table of the changes at ``level`` (None when there are none)."""
    rows = [c for c in r.changes if c.level == level]
    if not rows:
        return None
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, expand=False)
    t.add_column("kind", style="bold")
    t.add_column("change")
    t.add_column("where", style="dim")
    multi = len(r.entries) > 1
    # identical changes (the same hint on 100 unrolled loads) share one row
    groups: dict[tuple, list] = {}
    for c in rows:
        groups.setdefault((c.kind, c.detail, c.entry if multi else None), []).append(c)
    for (kind, detail, _e), cs in groups.items():
        c = cs[0]
        where = _short(c.source)
        if not where and c.line_after is not None:
            where = f"line {c.line_before}→{c.line_after}" if c.line_before else f"line {c.line_after}"
        if c.region_path:
            where = (where + "  " if where else "") + c.region_path
        if multi and c.entry:
            where = f"{c.entry}: {where}"
        if len(cs) > 1:
            detail = f"{detail}  (×{len(cs)})"
            where += f"  +{len(cs) - 1} more"
        t.add_row(kind, escape(detail), escape(where))
    return t


def impact_table(r: DiffResult) -> Table | None:
    """Each IR change's impact slice: how many ops its values reach and which side effects."""
    rows = [c for c in r.changes if c.impact is not None]
    if not rows:
        return None
    t = Table(title="Impact slices (ops whose inputs a change reaches, up to the stores)", title_justify="left",
              show_edge=False, pad_edge=False)
    t.add_column("kind", style="bold")
    t.add_column("change")
    t.add_column("reaches")
    groups: dict[tuple, list] = {}
    for c in rows:
        groups.setdefault((c.kind, c.detail, c.entry), []).append(c)
    for (kind, detail, _e), cs in groups.items():
        t.add_row(kind, escape(detail + (f"  (×{len(cs)})" if len(cs) > 1 else "")), escape(impact_summary(cs)))
    return t


def cubin_table(r: DiffResult) -> Table | None:
    """The cubin facts per arch, before and after, changed ones bold (None without cubins)."""
    if not r.cubin or not r.cubin.get("archs"):
        return None
    t = Table(title="Cubin side", title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("arch")
    t.add_column("fact")
    t.add_column("before", justify="right")
    t.add_column("after", justify="right")
    t.add_column("Δ", justify="right")
    for arch, d in r.cubin["archs"].items():
        b, a = d["before"], d["after"]
        for key in b:
            x, y = b.get(key), a.get(key)
            delta = ""
            if isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool) and x != y:
                delta = f"{y - x:+d}"
            style = "bold" if x != y else "dim"
            t.add_row(arch, key, _fmt(x), _fmt(y), delta, style=style)
        for part in ("classes", "mma_forms", "mufu"):
            for k, v in (d.get("sass") or {}).get(part, {}).items():
                t.add_row(arch, f"sass {k}", str(v["before"]), str(v["after"]), f"{v['delta']:+d}", style="bold")
    return t


def structural_lines(r: DiffResult, limit: int = 200, show_explained: bool = True) -> list:
    """The structural deltas in canonical names, at most ``limit`` (``show_explained=False``: only
    those no semantic change explains)."""
    out: list = []
    ds = r.structural if show_explained else [d for d in r.structural if not d.explained_by]
    if not ds:
        return out
    out.append(Text("Structural diff (canonical names: %a args, %v values, %b block args; "
                    "%new = only after)", style="bold"))
    multi = len(r.entries) > 1
    for d in ds[:limit]:
        mark, style = _MARK.get(d.kind, ("?", "white"))
        where = []
        if multi:
            where.append(d.entry)
        if d.line_before is not None or d.line_after is not None:
            where.append(f"L{d.line_before or '-'}→L{d.line_after or '-'}")
        if d.source:
            where.append(_short(d.source))
        if d.region_path:
            where.append(d.region_path)
        tag = " ".join(where)
        expl = ""
        if d.dead:
            expl = " [dim](unused op: no effect)[/]"
        elif d.explained_by:
            kinds = sorted({c.kind for c in r.changes if c.id in d.explained_by})
            expl = f" [dim](← {', '.join(kinds)})[/]"
        out.append(f"[{style}]{mark} {d.kind:<9}[/] [dim]{escape(tag)}[/]{expl}")
        if d.kind == ATTRIBUTE:
            out.append(f"    [red]- {escape(_clip(d.before))}[/]")
            out.append(f"    [green]+ {escape(_clip(d.after))}[/]")
            for a in d.aspects:
                out.append(f"      [dim]{escape(a.field)}: {escape(_clip(str(a.before), 70))} → "
                           f"{escape(_clip(str(a.after), 70))}[/]")
        elif d.kind == ADDED:
            out.append(f"    [green]+ {escape(_clip(d.after))}[/]")
        elif d.kind == REMOVED:
            out.append(f"    [red]- {escape(_clip(d.before))}[/]")
        elif d.kind == MOVED:
            out.append(f"    {escape(_clip(d.after))}   [dim]region {escape(d.before or '')} → "
                       f"{escape(d.region_path or 'entry')}[/]")
        elif d.kind == REWIRED:
            out.append(f"    [red]- {escape(_clip(d.before))}[/]")
            out.append(f"    [green]+ {escape(_clip(d.after))}[/]")
            for a in d.aspects:
                out.append(f"      [dim]{escape(a.field)} ({escape(a.category)}): {escape(str(a.before))} → "
                           f"{escape(str(a.after))}[/]")
    if len(ds) > limit:
        out.append(f"[dim]… {len(ds) - limit} more structural deltas (--limit, --json or --html for all)[/]")
    return out


def regions_table(r: DiffResult, limit: int = 30) -> Table | None:
    """Op counts per region, before and after (at most ``limit`` rows; None without regions)."""
    if not r.regions:
        return None
    t = Table(title="Op counts per region", title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("region")
    t.add_column("before", justify="right")
    t.add_column("after", justify="right")
    t.add_column("delta")
    multi = len(r.entries) > 1
    for rd in r.regions[:limit]:
        name = rd.region_path or "entry body"
        if multi:
            name = f"{rd.entry}: {name}"
        delta = ", ".join(f"{k} {v:+d}" for k, v in rd.delta.items())
        t.add_row(escape(name), str(sum(rd.before.values())), str(sum(rd.after.values())), escape(delta))
    return t


def render_summary(r: DiffResult, console) -> None:
    """The headline: summary, warnings, semantic / unclassified / cubin change tables."""
    for line in summary_lines(r):
        console.print(line)
    for w in r.warnings[:10]:
        console.print(f"[yellow]warning:[/] {escape(w)}")
    if len(r.warnings) > 10:
        console.print(f"[yellow]… {len(r.warnings) - 10} more warnings[/]")
    for part in (changes_table(r, "semantic", "Semantic changes"),
                 changes_table(r, "structural", "Unclassified structural changes"),
                 impact_table(r), cubin_table(r)):
        if part is not None:
            console.print()
            console.print(part)


def render(r: DiffResult, console, *, limit: int = 200, verbose: bool = False) -> None:
    """The headline, then every structural delta (canonical names, source lines), then the
    per-region op counts."""
    render_summary(r, console)
    lines = structural_lines(r, limit=limit, show_explained=True)
    if lines:
        console.print()
        console.print(lines[0])
        # one print for the rest: rich's per-call overhead dominates hundreds of short lines
        console.print("\n".join(str(x) for x in lines[1:]), overflow="fold")
    t = regions_table(r)
    if t is not None:
        console.print()
        console.print(t)
