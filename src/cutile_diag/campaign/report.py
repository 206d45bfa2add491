"""The campaign's report: ``campaign.md`` and ``campaign.html`` (one self-contained page).

Per kernel: configurations, start and final latency (the loop's headline: geometric mean of
its configurations' medians), start and final percent of the measured ceiling (the median
over configurations of the loop's roofline points, placed again with the report's device model:
a preset's recorded ceilings or this machine's measured ones; the datasheet's roof where no
ceiling was measured, marked), speedup, kept steps, why the loop stopped, its branch, and links to its
``perf_results.md`` and to the kept diff (``diffs/<kernel>.diff``, ``git diff`` from the
loop's start commit to its kept commit).  One roofline chart: per kernel its slowest
configuration at the start (hollow) and at the end, an arrow between them.
"""
from __future__ import annotations

import base64
import html
import os
import statistics
import subprocess
from pathlib import Path

from ..ledger import Ledger
from ..roofline.device import live_device, preset
from ..roofline.model import analyze
from ..roofline.peaks import get_ceilings, recorded_ceilings
from ..roofline.plot import plot_roofline
from .run import Campaign, ratio_text


def _points(rec: dict | None) -> dict[str, dict]:
    return dict((rec or {}).get("roofline") or {}) if isinstance((rec or {}).get("roofline"), dict) else {}


class _Roof:
    """The device model and ceilings the report places every point with (table and chart alike):
    a preset's recorded ceilings, or this machine's measured ones (cached by the campaign)."""

    def __init__(self, device_name: str | None):
        try:
            self.dev = preset(device_name) if device_name and device_name != "live" else live_device()
        except Exception:
            self.dev, self.ceil = None, None
            return
        self.ceil = get_ceilings(self.dev, measure_if_missing=False) if self.dev.kind == "live" \
            else recorded_ceilings(self.dev)

    def point(self, name: str, p: dict):
        """A ledger's roofline point (its latency, FLOPs, bytes, unit) placed again here."""
        return analyze(name, name, latency_ms=p["latency_ms"], flops=p["flops"], bytes=p["bytes"],
                       unit=(p["compute_dtype"], p["compute_unit"]), device=self.dev, ceilings=self.ceil)

    def pct(self, name: str, points: dict[str, dict]) -> tuple[float | None, str]:
        """Median over the configurations of the percent of the measured ceiling (else the datasheet)."""
        if not points or self.dev is None:
            return None, ""
        placed = [self.point(name, p) for p in points.values()]
        meas = [q.pct_measured for q in placed if q.pct_measured is not None]
        if len(meas) == len(placed):
            return statistics.median(meas), "measured ceiling"
        ds = [q.pct_datasheet for q in placed if q.pct_datasheet is not None]
        return (statistics.median(ds), "datasheet") if ds else (None, "")


def kernel_rows(c: Campaign, roof: _Roof | None = None) -> list[dict]:
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
               "attempts": st.get("attempts", 0), "crashes": st.get("crashes", 0), "start_point": None,
               "final_point": None}
        sd = st.get("state_dir")
        if sd and Ledger.exists(sd):
            led = Ledger.load(sd)
            its = led.iterations
            base = next((i for i in its if i.get("iteration") == 0), None)
            kept = led.last_kept()
            row["kept_steps"] = sum(1 for i in its if i.get("status") == "keep" and i.get("iteration"))
            bp, kp_ = _points(base), _points(kept)
            row["start_pct"], row["pct_of"] = roof.pct(name, bp)
            row["final_pct"], _ = roof.pct(name, kp_)
            if bp:
                slowest = max(bp, key=lambda k: bp[k].get("latency_ms") or 0)
                row["start_point"], row["final_point"] = bp.get(slowest), kp_.get(slowest)
            start, end = led.setup.get("start_commit"), (kept or {}).get("commits", {}).get("kept")
            if start and end and end != start:
                row["diff"] = _write_diff(c, name, led.setup.get("root") or c.plan.root, start, end)
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


def _chart(rows: list[dict], out: Path, roof: _Roof) -> str | None:
    """The roofline chart as an SVG file next to the report (inlined into the page)."""
    pairs = [(r, r["start_point"], r["final_point"] or r["start_point"]) for r in rows if r["start_point"]]
    if not pairs or roof.dev is None:
        return None
    finals = [roof.point(r["kernel"], f) for r, _s, f in pairs]
    starts = [roof.point(r["kernel"], s) for r, s, _f in pairs]
    path = plot_roofline(finals, roof.dev, roof.ceil, out / "campaign-roofline.svg", starts=starts,
                         title=f"campaign: start (hollow) -> final per kernel, slowest configuration, {roof.dev.name}")
    return str(path)


SIMULATED_NOTE = ("Simulated: latencies and ratios come from the simulation spec (--simulate); nothing ran on a "
                  "GPU, so no ratio here is a speedup.")


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _rel(path: str | None, out: Path) -> str | None:
    return os.path.relpath(path, out) if path else None


def write_report(c: Campaign) -> dict:
    roof = _Roof(c.data.get("roof_device"))
    rows = kernel_rows(c, roof)
    out = c.out
    chart = _chart(rows, out, roof)
    plan = c.plan
    head = ["kernel", "configs", "start ms", "final ms", "start % ceiling", "final % ceiling", "speedup",
            "kept steps", "why it stopped", "branch", "results", "kept diff"]
    md = [f"# Campaign: {' '.join(plan.command)}", "",
          f"Kernels ranked by {plan.ranked_by}; executor {c.data['executor'].get('executor')}; "
          f"time spent {c.data['spent_s']:.0f} s" + (f" of {c.data['time_limit_s']:.0f} s" if c.data["time_limit_s"]
                                                      else "") + ".", ""]
    if chart:
        md += ["![roofline](campaign-roofline.svg)", ""]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        table, diff = _rel(r["table"], out), _rel(r["diff"], out)
        md.append("| " + " | ".join([
            f"`{r['ref']}`", str(r["configs"]), _fmt(r["start_ms"], ".6f"), _fmt(r["final_ms"], ".6f"),
            _fmt(r["start_pct"], ".1f"), _fmt(r["final_pct"], ".1f"), ratio_text(r) or "-",
            _fmt(r["kept_steps"], "d"), (f"{r['status']}: " if r["status"] != "done" else "") + (r["stopped"] or "-").replace("|", "/"),
            f"`{r['branch']}`" if r["branch"] else "-",
            f"[perf_results.md]({table})" if table else "-", f"[diff]({diff})" if diff else "-"]) + " |")
    pct_of = {r["pct_of"] for r in rows if r["pct_of"]}
    if pct_of:
        md += ["", "% ceiling: of the " + " / ".join(sorted(pct_of)) + " (median over the kernel's configurations)."]
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
        svg = f'<img id="roofline" alt="roofline chart" src="data:image/svg+xml;base64,{data}">'
    trs = []
    for r in rows:
        table, diff = _rel(r["table"], out), _rel(r["diff"], out)
        cells = [f"<code>{e(r['ref'])}</code>", str(r["configs"]), _fmt(r["start_ms"], ".6f"), _fmt(r["final_ms"], ".6f"),
                 _fmt(r["start_pct"], ".1f"), _fmt(r["final_pct"], ".1f"),
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
executor {e(str(c.data['executor'].get('executor')))}; {c.data['spent_s']:.0f} s spent.</p>
{svg}
<table id="kernels"><thead><tr>{''.join(f'<th>{e(h)}</th>' for h in head)}</tr></thead>
<tbody>{''.join(trs)}</tbody></table>
{f"<p>{e(SIMULATED_NOTE)}</p>" if any(r["simulated"] for r in rows) else ""}
</body></html>
"""
