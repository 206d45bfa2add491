#!/usr/bin/env python
"""Composite steps and the lookahead on the GPU (issue 21, items 1-2): ``optimize --until-roof
0.9`` (through ``structural_suite.py``: a throw-away git repository per kernel, each loop under
its share of the suite's time as ``--time-limit``) on

    multipass_norm       three-pass layer norm re-reading its row through 2-D gathers (W needs A: A+W)
    persistent_rows      persistent row softmax, the wrapper launches 2 blocks per SM (P+X, B, E)
    tilegym_softmax_tma  TileGym softmax, _softmax_kernel_tma (below 80 % of the measured ceiling)

then reads each loop's ledger for what the issue asks: start/final ms, % of the measured
ceiling, the kept steps, and every composite (or frontier) candidate tried with the measured
reason it lost.  Output under --out: results.json, results.md and the loops' folder ``loops/``
(perf_results.md, ledger, kept.diff per kernel).

    source .device/setup.sh
    python bench/gpu/composite_suite.py --out $OUT/composite --tilegym /tmp/TileGym --budget-s 420
    python bench/gpu/composite_suite.py --out /tmp/composite-dry --tilegym /tmp/tg --dry-run   # CPU
"""
from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = ("multipass_norm", "persistent_rows", "tilegym_softmax_tma")


def ledger_records(folder: Path) -> list[dict]:
    for name in ("ledger.jsonl", "ledger.jsonl.gz"):
        p = folder / name
        if p.exists():
            text = gzip.open(p, "rt").read() if name.endswith(".gz") else p.read_text()
            return [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    return []


def composites(its: list[dict]) -> list[dict]:
    """Every composite / frontier candidate the loop screened or confirmed, with its outcome."""
    out = []
    for r in its:
        tried = [t for t in (r.get("change") or {}).get("tried", []) if "+" in str(t.get("transform"))]
        if not tried:
            continue
        d = r.get("decision") or {}
        chosen = "+" in str((r.get("change") or {}).get("transform") or "")
        row = {"iteration": r["iteration"], "entry": (r.get("entry") or {}).get("id"),
               "tried": [t["transform"] for t in tried], "row": r.get("optimization"), "status": r.get("status"),
               "confirmed": chosen, "rule": d.get("rule"), "reason": str(d.get("reason"))[:300],
               "ratio": (r.get("comparison") or {}).get("ratio"),
               "frontier": (r.get("change") or {}).get("frontier"),
               "parts": [{k: p.get(k) for k in ("entry", "transform", "params", "description")}
                         for p in (r.get("change") or {}).get("parts") or []]}
        # screened but not confirmed: the sweep row says how it compared (or why it failed)
        row["screened"] = [{"description": s.get("description"), "screen_ratio": s.get("screen_ratio"),
                            "result": s.get("result"), "chosen": s.get("chosen")}
                           for s in r.get("sweep") or [] if str(s.get("description", "")).count(": ") and
                           "+" in str(s.get("description", "")).split(":", 1)[0]]
        out.append(row)
    return out


def why_lost(c: dict) -> str:
    if c["status"] == "keep":
        return "kept"
    if c["confirmed"]:
        return f"{c['rule']}: {c['reason']}"
    scr = [s for s in c["screened"] if s.get("screen_ratio") is not None]
    if scr:
        return "lost the screening: " + "; ".join(f"{s['description'][:80]} ratio {s['screen_ratio']:.3f}" for s in scr)
    fails = [s.get("result") for s in c["screened"] if s.get("result")]
    return "; ".join(map(str, fails)) or f"{c['rule']}: {c['reason']}"


def summarize(loops: Path, summary: dict) -> list[dict]:
    rows = []
    for k in summary.get("kernels", []):
        its = [r for r in ledger_records(loops / k["kernel"]) if r.get("type") == "iteration"]
        comps = composites(its)
        for c in comps:
            c["why"] = why_lost(c)
        rows.append({"kernel": k["kernel"], "start_ms": k.get("baseline_ms"), "final_ms": k.get("final_ms"),
                     "speedup": k.get("speedup"), "pct_start": k.get("pct_start"), "pct_final": k.get("pct_final"),
                     "reached_088": (k.get("pct_final") or 0) >= 88.0, "iterations": k.get("iterations"),
                     "kept": [r.get("optimization") for r in its[1:] if r.get("status") == "keep"],
                     "composites": comps, "stop": k.get("stop") or k.get("note")})
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    basis = "datasheet roof (simulated)" if meta["dry_run"] else "measured ceiling"
    f = lambda v, fmt: fmt.format(v) if isinstance(v, (int, float)) else "-"      # noqa: E731
    out = ["# Composite steps and lookahead — `optimize --until-roof 0.9` (issue 21)", "",
           f"- {meta['date']}; wall {meta['wall_s']:.0f} s" + ("; **dry run (simulated GPU)**" if meta["dry_run"] else ""),
           f"- command: `{meta['command']}`", "",
           f"| kernel | start ms | final ms | speedup | % of {basis} start → final | ≥ 88 % | kept steps | composites tried |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['kernel']} | {f(r['start_ms'], '{:.6f}')} | {f(r['final_ms'], '{:.6f}')} | "
                   f"{f(r['speedup'], '{:.2f}x')} | {f(r['pct_start'], '{:.0f}%')} → {f(r['pct_final'], '{:.0f}%')} | "
                   f"{'yes' if r['reached_088'] else 'no'} | {len(r['kept'])} | {len(r['composites'])} |")
    for r in rows:
        out += ["", f"## {r['kernel']}", f"- stop: {r.get('stop')}"]
        out += [f"- kept: {k}" for k in r["kept"]] or ["- kept: nothing"]
        for c in r["composites"]:
            front = f" (on iteration {c['frontier']}'s frontier)" if c.get("frontier") else ""
            out.append(f"- iteration {c['iteration']} composite {', '.join(c['tried'])}{front}: "
                       f"{c['status']}, ratio {f(c['ratio'], '{:.3f}')} — {c['why']}")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="TileGym checkout root; without it the TileGym kernel is left out")
    ap.add_argument("--only", default=",".join(KERNELS))
    ap.add_argument("--budget-s", type=float, default=420.0, help="the loops' time, shared as --time-limit")
    ap.add_argument("--grace-s", type=float, default=20.0)
    ap.add_argument("--max-sweep", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="simulated GPU (optimize --simulate); AOT on the CPU")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cmd = [sys.executable, str(HERE / "structural_suite.py"), "--out", str(out / "loops"), "--only", args.only,
           "--budget-s", str(args.budget_s), "--grace-s", str(args.grace_s), "--max-sweep", str(args.max_sweep)]
    if args.tilegym:
        cmd += ["--tilegym", args.tilegym]
    if args.dry_run:
        cmd.append("--dry-run")
    # the loops stop by their --time-limit shares; this bound only keeps a hang from eating the device call
    try:
        p = subprocess.run(cmd, text=True, capture_output=True, timeout=args.budget_s + args.grace_s + 30)
        rc, log = p.returncode, (p.stdout or "")[-200_000:] + (p.stderr or "")[-200_000:]
    except subprocess.TimeoutExpired as e:
        rc, log = 124, f"killed after {e.timeout:.0f} s\n" + str(e.stdout or "")[-200_000:]
    (out / "loops.log").write_text(log)
    summary_path = out / "loops" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"kernels": []}
    rows = summarize(out / "loops", summary)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "wall_s": time.monotonic() - started,
            "dry_run": args.dry_run, "command": " ".join(cmd[1:]), "loops_rc": rc,
            "versions": summary.get("versions")}
    (out / "results.json").write_text(json.dumps({**meta, "kernels": rows}, indent=1, default=str))
    (out / "results.md").write_text(markdown(rows, meta))
    print((out / "results.md").read_text())
    return 0 if rc == 0 and rows else 1


if __name__ == "__main__":
    sys.exit(main())
