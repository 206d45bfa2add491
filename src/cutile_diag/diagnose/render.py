"""Rich rendering of a ``Diagnosis``: the class and why, the ranked recommendations with their
evidence, what is already applied, what needs more evidence, and what was not checked."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .classes import CLASSES
from .engine import Diagnosis, Recommendation
from .evidence import FACTS

_RISK_STYLE = {"none": "green", "low": "green", "medium": "yellow", "high": "red"}


def effect_text(pe: dict) -> str:
    """A predicted effect as ``~+12% (+5% … +30%)`` (a high bound of 2x or more as a factor)."""
    lo, hi = pe.get("low", 0.0), pe.get("high", 0.0)
    rng = f"{lo:+.0%} … {1 + hi:.1f}x" if hi >= 1.0 else f"{lo:+.0%} … {hi:+.0%}"
    exp = pe.get("expected")
    return f"~{exp:+.0%} ({rng})" if isinstance(exp, (int, float)) else rng


_NEEDS = {"gpu": "GPU measurement", "ncu": "Nsight Compute", "static": "argument shapes + cubin",
          "remarks": "remarks", "cubin": "cubin", "sass": "SASS", "device": "device", "ir": "TileIR",
          "capture": "capture folder"}


def _producers(missing: list[str]) -> str:
    needs = sorted({_NEEDS.get(m.split(".", 1)[0], m) for m in missing if m in FACTS})
    return ", ".join(needs) or "more evidence"


def render_diagnosis(d: Diagnosis, console: Console, *, brief: bool = False, all_evidence: bool = False) -> None:
    """Print a diagnosis: the class and reasons, then each recommendation with its evidence
    (``brief``: fewer lines; ``all_evidence``: every fact)."""
    title = CLASSES[d.bottleneck].title
    style = "bold red" if d.escalate else "bold cyan"
    where = ", ".join(d.collected) or "no evidence collectors ran"
    console.print(f"[bold]{escape(d.kernel or '?')}[/]  [dim]{escape(where)}[/]")
    console.print(f"bottleneck: [{style}]{escape(title)}[/] ({d.confidence} confidence) — "
                  f"{escape('; '.join(d.reasons[:2]))}")
    if d.escalate:
        console.print(f"[bold red]escalate:[/] {escape(CLASSES[d.bottleneck].description)}")
    if d.alternatives and not brief:
        alts = "; ".join(f"{a['class']} ({a['score']:.2f}): {a['reason']}" for a in d.alternatives[:3])
        console.print(f"[dim]also considered: {escape(alts)}[/]")

    recs = d.recommendations[:3] if brief else d.recommendations
    if recs:
        # one line per entry in 100 columns, ranked: why and how it applies are in its block below
        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
        for col in ("id", "recommendation", "effect", "risk"):
            t.add_column(col, overflow="fold")
        for r in recs:
            tried = f" [dim](tried {r.tried}x)[/]" if r.tried else ""
            t.add_row(f"[bold]{r.id}[/]", escape(r.name) + tried, effect_text(r.predicted_effect),
                      f"[{_RISK_STYLE.get(r.risk, 'white')}]{r.risk}[/]")
        console.print(t)
        for i, r in enumerate(recs, 1):
            _evidence_block(console, i, r, brief=brief, all_evidence=all_evidence)
    else:
        console.print("[yellow]no playbook entry applies[/]")
    if d.ncu_findings and not brief:
        extra = [f for f in d.ncu_findings if not any(f.get("rule") == g.get("rule") for r in recs for g in r.ncu)]
        if extra:
            console.print("[bold]Nsight Compute also says:[/]")
            for f in extra:
                console.print(f"  [dim]-[/] {escape(_finding_line(f))}", soft_wrap=True)
    if d.past and not brief:
        t = Table(title="past steps on this machine: predicted vs measured", show_header=True, header_style="bold",
                  box=None, pad_edge=False, title_justify="left")
        for col in ("kernel", "it", "entry", "predicted", "measured", "status"):
            t.add_column(col)
        for s_ in d.past:
            pred = effect_text({"low": s_.get("predicted_low") or 0.0, "high": s_.get("predicted_high") or 0.0,
                                **({"expected": s_["predicted_expected"]}
                                   if isinstance(s_.get("predicted_expected"), (int, float)) else {})}) \
                if s_.get("predicted_high") is not None else "?"
            meas = f"{s_['measured']:+.1%}" if isinstance(s_.get("measured"), (int, float)) else "-"
            t.add_row(escape(str(s_.get("kernel"))), str(s_.get("iteration")), str(s_.get("entry")), pred, meas,
                      str(s_.get("status")))
        console.print(t)
    if brief:
        if len(d.recommendations) > len(recs):
            console.print(f"[dim]+{len(d.recommendations) - len(recs)} more: "
                          f"{', '.join(r.id for r in d.recommendations[len(recs):])}[/]")
        return
    if d.already_applied:
        console.print("[bold]already applied:[/] " + ", ".join(
            f"{a['id']} ({escape(a['name'])})" for a in d.already_applied))
    if d.possible:
        groups: dict[str, list[str]] = {}
        for p in d.possible:
            groups.setdefault(_producers(p["missing"]), []).append(p["id"])
        console.print("[bold]need more evidence:[/] " + "; ".join(
            f"{', '.join(ids)} (needs {what})" for what, ids in groups.items()))
    if d.not_checked:
        console.print("[bold]not checked:[/]")
        groups: dict[tuple[str, str], list[str]] = {}
        for n in d.not_checked:
            groups.setdefault((n.missing, n.how), []).append(n.check)
        for (missing, how), checks in groups.items():
            tail = f" [dim]({escape(how)})[/]" if how else ""
            console.print(f"  [dim]-[/] {escape('; '.join(checks))}: {escape(missing)}{tail}")
    for note in d.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")


def _evidence_block(console: Console, i: int, r: Recommendation, *, brief: bool, all_evidence: bool) -> None:
    lines = r.evidence if all_evidence else r.evidence[: (4 if brief else 8)]
    apply = f"auto: {r.transform}" if r.automatic else "manual"
    console.print(f"[bold]{i}. {r.id}[/] {escape(r.name)} [dim]({escape(apply)})[/]: {escape(r.reason)}")
    for ln in lines:
        console.print(f"     {escape(ln)}", soft_wrap=True)
    if len(r.evidence) > len(lines):
        console.print(f"     [dim]… {len(r.evidence) - len(lines)} more line(s) (--all)[/]")
    for note in r.predicted_effect.get("notes", []):
        console.print(f"     [italic]effect: {escape(note)}[/]")
    if r.predicted_effect.get("basis") and (r.ncu or r.past):
        console.print(f"     [italic]expected ~{r.expected_gain:+.0%}: {escape(r.predicted_effect['basis'])}[/]")
    for f in r.ncu:
        console.print(f"     [magenta]{escape(_finding_line(f))}[/]", soft_wrap=True)
        if f.get("message") and not brief:
            console.print(f"       [dim]“{escape(f['message'][:300])}”[/]", soft_wrap=True)
            for m in (f.get("focus_metrics") or [])[:2]:
                console.print(f"       [dim]{escape(m['name'])} = {m.get('value')}"
                              + (f" ({escape(m['info'])})" if m.get("info") else "") + "[/]", soft_wrap=True)
    if not brief and r.changes:
        console.print(f"     [dim]change: {escape(r.changes[0])}[/]")


def _finding_line(f: dict) -> str:
    """One Nsight Compute finding in its own words, with its speedup estimate."""
    est = ""
    if isinstance(f.get("speedup_pct"), (int, float)):
        kind = {"global": "whole-kernel", "local": "local"}.get(f.get("speedup_type") or "", "")
        est = f" — ncu estimates {f['speedup_pct']:.1f}% {kind} speedup".replace("  ", " ")
    where = f" at {', '.join(f['markers'][:3])}" if f.get("markers") else ""
    return f"ncu {f.get('rule')}: {f.get('title') or f.get('message', '')[:80]}{est}{where}"

