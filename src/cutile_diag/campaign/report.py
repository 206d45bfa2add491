"""The campaign's report: ``campaign.md`` and ``campaign.html`` (one self-contained page).

Per kernel: configurations, start and final latency (the loop's headline: geometric mean of
its configurations' medians; a simulation's marked simulated), start and final percent of the
ceiling — the loop's own figure (``loop.decide.roof_pct_of``: its worst configuration, against the
ceiling its loop measured, a simulation spec's ceiling or the datasheet roof, named), the same one
its stop reason gives —, speedup, kept steps, why the loop stopped, its branch, and links to its
``perf_results.md`` and to the kept diff (``diffs/<kernel>.diff``, ``git diff`` from the
loop's start commit to its kept commit).  Beside % of the ceiling, start and final % of the
time attainable at each configuration's size (``roofline.curve``: launch floor, bandwidth by
bytes; median over configurations), ``launch`` where the final version sits at its launch
floor, and where the survey timed the tests' pytorch variants the reference's time and the
final time over it.  One chart of the % of ceiling figures: per kernel its percent at the start
(hollow) and at the end, an arrow between them.
"""
from __future__ import annotations

import base64
import html
import os
import statistics
import subprocess
from pathlib import Path

from ..ledger import Ledger
from ..loop.decide import roof_pct_of
from ..measure.ceilings import device_ceilings
from ..roofline.device import live_device, preset
from ..roofline.model import analyze
from .run import Campaign, ratio_text


def _points(rec: dict | None) -> dict[str, dict]:
    return dict((rec or {}).get("roofline") or {}) if isinstance((rec or {}).get("roofline"), dict) else {}


class _Roof:
    """The device model and ceilings the report places points with for the % of attainable time:
    a preset's recorded ceilings, or this machine's measured ones (cached by the campaign)."""

    def __init__(self, device_name: str | None):
        try:
            self.dev = preset(device_name) if device_name and device_name != "live" else live_device()
        except Exception:
            self.dev, self.ceil = None, None
            return
        self.ceil = device_ceilings(self.dev)

    def point(self, name: str, p: dict):
        """A ledger's roofline point (its latency, FLOPs, bytes, unit) placed again here."""
        return analyze(name, name, latency_ms=p["latency_ms"], flops=p["flops"], bytes=p["bytes"],
                       unit=(p["compute_dtype"], p["compute_unit"]), device=self.dev, ceilings=self.ceil)

    def attainable(self, name: str, points: dict[str, dict]) -> tuple[float | None, str | None]:
        """(median over the configurations of the % of attainable time, "launch" when every one sits at
        its launch floor) — None without a size curve."""
        if not points or self.dev is None or self.ceil is None or self.ceil.curve is None:
            return None, None
        placed = [self.point(name, p) for p in points.values()]
        pcts = [q.pct_attainable for q in placed if q.pct_attainable is not None]
        launch = "launch" if all(q.bound == "launch" for q in placed) else None
        return (statistics.median(pcts) if pcts else None), launch


def kernel_rows(c: Campaign, roof: _Roof | None = None) -> list[dict]:
    """One row per selected kernel for the report: status, start and final times, percent of roof, speedup, steps kept
    and why it stopped."""
    roof = roof or _Roof(c.data.get("roof_device"))
    rows = []
    for name in c.data["selected"]:
        st, kp = c.state(name), c.kernel(name)
        r = st.get("result") or {}
        row = {"kernel": name, "ref": f"{kp.file}::{kp.ref.rsplit('::', 1)[1]}", "configs": len(kp.configs),
               "status": st["status"], "start_ms": r.get("baseline_ms"), "final_ms": r.get("final_ms"),
               "speedup": r.get("speedup"), "simulated_speedup": r.get("simulated_speedup"),
               "simulated": bool(r.get("simulated")), "kept_steps": None, "stopped": r.get("stop_reason") or st.get("error"),
               "stop_rule": r.get("stop_rule"), "branch": r.get("branch") or st.get("branch"),
               "table": r.get("table"), "diff": None, "start_pct": None, "final_pct": None, "pct_of": "",
               "attempts": st.get("attempts", 0), "crashes": st.get("crashes", 0),
               "start_pct_attainable": None, "final_pct_attainable": None, "bound": None,
               "reference_ms": (kp.reference or {}).get("ms"), "reference": (kp.reference or {}).get("framework"),
               "vs_reference": None, "suite_start_ms": None, "suite_final_ms": None, "suite_disagrees": None}
        sd = st.get("state_dir")
        if sd and Ledger.exists(sd):
            led = Ledger.load(sd)
            its = led.iterations
            base = next((i for i in its if i.get("iteration") == 0), None)
            kept = led.last_kept()
            row["kept_steps"] = sum(1 for i in its if i.get("status") == "keep" and i.get("iteration"))
            # replay: start and final in the suite's own bench numbers (the loop's ``suite`` records)
            suite = {x["when"]: x for x in led.of_type("suite") if x.get("median_ms")}
            row["suite_start_ms"] = (suite.get("start") or {}).get("median_ms")
            row["suite_final_ms"] = (suite.get("end") or suite.get("start") or {}).get("median_ms")
            row["suite_disagrees"] = (suite.get("end") or {}).get("disagrees")
            row["simulated"] = row["simulated"] or led.simulated
            bp, kp_ = _points(base), _points(kept)
            # the loop's own figure (its stop reason gives the same), for the start and the kept version
            row["start_pct"], row["pct_of"] = roof_pct_of(bp, simulated=led.simulated)
            row["final_pct"], _ = roof_pct_of(kp_, simulated=led.simulated)
            if row["start_pct"] is None:
                row["pct_of"] = ""
            row["start_pct_attainable"], _ = roof.attainable(name, bp)
            row["final_pct_attainable"], row["bound"] = roof.attainable(name, kp_ or bp)
            start, end = led.setup.get("start_commit"), (kept or {}).get("commits", {}).get("kept")
            if start and end and end != start:
                row["diff"] = _write_diff(c, name, led.setup.get("root") or c.plan.root, start, end)
        if row["reference_ms"] and row["final_ms"]:
            row["vs_reference"] = row["final_ms"] / row["reference_ms"]
        rows.append(row)
    return rows


def _write_diff(c: Campaign, name: str, root: str, start: str, end: str) -> str | None:
    res = subprocess.run(["git", "diff", start, end], cwd=root, capture_output=True, text=True)
    if res.returncode != 0:
        return None
    p = c.out / "diffs" / f"{name}.diff"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(res.stdout)
    return str(p)


def _chart(rows: list[dict], out: Path) -> str | None:
    """The table's % of ceiling per kernel, start (hollow) -> final, as an SVG next to the report
    (inlined into the page); each kernel is plotted where the table has its figure."""
    shown = [r for r in rows if r["start_pct"] is not None]
    if not shown:
        return None
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(shown)), dpi=100)
    for y, r in enumerate(reversed(shown)):
        a = r["start_pct"]
        b = r["final_pct"] if r["final_pct"] is not None else a
        ax.annotate("", (b, y), xytext=(a, y), arrowprops=dict(arrowstyle="->", color="grey", lw=1))
        ax.plot([a], [y], "o", mfc="white", mec="C0")
        ax.plot([b], [y], "o", color="C0")
        ax.text(max(a, b) + 1, y, f"{a:.1f} -> {b:.1f}", va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), [r["kernel"] for r in reversed(shown)])
    ax.set_xlim(0, max(100.0, *(max(r["start_pct"], r["final_pct"] or 0) + 15 for r in shown)))
    ax.set_ylim(-0.7, len(shown) - 0.3)
    bases = sorted({r["pct_of"] for r in shown})
    sim = " (simulated latencies)" if any(r["simulated"] for r in shown) else ""
    ax.set_xlabel(f"% of the {' / '.join(bases)}{sim}, the configuration furthest below it")
    ax.set_title("campaign: start (hollow) -> final per kernel", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = out / "campaign-ceiling.svg"
    fig.savefig(path)
    plt.close(fig)
    return str(path)


ATTAINABLE_NOTE = ("% attainable: of the time attainable at each configuration's size — max(launch floor, bytes at "
                   "the copy bandwidth the size curve gives for that many bytes, FLOPs at the compute ceiling); bound launch: "
                   "the final version sits at its launch floor; pytorch ms: the tests' pytorch variants at the same "
                   "parameters (geometric mean), timed by the survey.")


def _added(r: dict) -> list[str]:
    """The size-aware and reference columns of a kernel's row (markdown and HTML alike)."""
    return [_fmt(r["start_pct_attainable"], ".1f"), _fmt(r["final_pct_attainable"], ".1f"), r["bound"] or "-",
            _fmt(r["reference_ms"], ".6f"), _fmt(r["vs_reference"], ".2f")]


SIMULATED_NOTE = ("Simulated: latencies and ratios come from the simulation spec (--simulate); nothing ran on a "
                  "GPU, so no ratio here is a speedup.")


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def ms_text(r: dict, key: str) -> str:
    """A row's start or final latency; a simulation's is marked (nothing ran on a GPU)."""
    return _fmt(r[key], ".6f") + (" (simulated)" if r[key] is not None and r["simulated"] else "")


def _rel(path: str | None, out: Path) -> str | None:
    return os.path.relpath(path, out) if path else None


def write_report(c: Campaign) -> dict:
    """Write ``campaign.md``, ``campaign.html`` and the chart into the campaign's folder; their paths and the rows."""
    rows = kernel_rows(c)
    out = c.out
    chart = _chart(rows, out)
    plan = c.plan
    head = ["kernel", "configs", "start ms", "final ms", "start % ceiling", "final % ceiling", "start % attainable",
            "final % attainable", "bound", "pytorch ms", "final / pytorch", "speedup", "kept steps", "why it stopped",
            "branch", "results", "kept diff"]
    md = [f"# Campaign: {' '.join(plan.command)}", "",
          f"Kernels ranked by {plan.ranked_by}; executor {c.data['executor'].get('executor')}; "
          f"time spent {c.spent():.0f} s" + (f" of {c.data['time_limit_s']:.0f} s" if c.data["time_limit_s"]
                                                      else "") + ".", ""]
    if chart:
        md += ["![% of ceiling per kernel](campaign-ceiling.svg)", ""]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        table, diff = _rel(r["table"], out), _rel(r["diff"], out)
        md.append("| " + " | ".join([
            f"`{r['ref']}`", str(r["configs"]), ms_text(r, "start_ms"), ms_text(r, "final_ms"),
            _fmt(r["start_pct"], ".1f"), _fmt(r["final_pct"], ".1f"), *_added(r), ratio_text(r) or "-",
            _fmt(r["kept_steps"], "d"), (f"{r['status']}: " if r["status"] != "done" else "") + (r["stopped"] or "-").replace("|", "/"),
            f"`{r['branch']}`" if r["branch"] else "-",
            f"[perf_results.md]({table})" if table else "-", f"[diff]({diff})" if diff else "-"]) + " |")
    suite = [r for r in rows if r["suite_start_ms"]]
    if suite:
        md += ["", "In the suite's own numbers (its bench command at the start and the end; the loops timed replays):"]
        md += [f"- `{r['ref']}`: {r['suite_start_ms']:.6f} -> {r['suite_final_ms']:.6f} ms"
               + (f" (the replay disagrees: {r['suite_disagrees']})" if r["suite_disagrees"] else "") for r in suite]
    pct_of = {r["pct_of"] for r in rows if r["pct_of"]}
    if pct_of:
        md += ["", "% ceiling: of the " + " / ".join(sorted(pct_of)) + ", the kernel's configuration furthest below "
               "it (the figure its loop's stop reason gives)."]
    md += ["", ATTAINABLE_NOTE]
    if any(r["simulated"] for r in rows):
        md += ["", SIMULATED_NOTE]
    (out / "campaign.md").write_text("\n".join(md) + "\n")
    (out / "campaign.html").write_text(_html(c, rows, chart, head))
    return {"markdown": str(out / "campaign.md"), "html": str(out / "campaign.html"), "chart": chart, "kernels": rows}


def _html(c: Campaign, rows: list[dict], chart: str | None, head: list[str]) -> str:
    e = html.escape
    out = c.out
    svg = ""
    if chart:
        # inline as a data URI: one self-contained file, no external fetch
        data = base64.b64encode(Path(chart).read_bytes()).decode()
        svg = f'<img id="chart" alt="% of ceiling per kernel" src="data:image/svg+xml;base64,{data}">'
    trs = []
    for r in rows:
        table, diff = _rel(r["table"], out), _rel(r["diff"], out)
        cells = [f"<code>{e(r['ref'])}</code>", str(r["configs"]), ms_text(r, "start_ms"), ms_text(r, "final_ms"),
                 _fmt(r["start_pct"], ".1f"), _fmt(r["final_pct"], ".1f"), *_added(r),
                 e(ratio_text(r) or "-"), _fmt(r["kept_steps"], "d"),
                 e((f"{r['status']}: " if r["status"] != "done" else "") + (r["stopped"] or "-")),
                 f"<code>{e(r['branch'])}</code>" if r["branch"] else "-",
                 f'<a href="{e(table)}">perf_results.md</a>' if table else "-",
                 f'<a href="{e(diff)}">diff</a>' if diff else "-"]
        trs.append(f'<tr data-kernel="{e(r["kernel"])}" data-status="{e(r["status"])}">'
                   + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    plan = c.plan
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>cutile-diag campaign</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 6px;font-size:13px}} th{{background:#f3f3f3}} img{{max-width:900px}}</style>
</head><body>
<h1>Campaign</h1>
<p><code>{e(' '.join(plan.command))}</code> — kernels ranked by {e(plan.ranked_by)};
executor {e(str(c.data['executor'].get('executor')))}; {c.spent():.0f} s spent.</p>
{svg}
<table id="kernels"><thead><tr>{''.join(f'<th>{e(h)}</th>' for h in head)}</tr></thead>
<tbody>{''.join(trs)}</tbody></table>
<p>{e(ATTAINABLE_NOTE)}</p>
{f"<p>{e(SIMULATED_NOTE)}</p>" if any(r["simulated"] for r in rows) else ""}
</body></html>
"""
