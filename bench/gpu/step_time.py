#!/usr/bin/env python
"""Wall time of one loop step, old main vs this tree, side by side (issue 21, item 3).

For each sub-ms example kernel (workload mode) the same fixed loop runs twice per kernel —
once with old main (the tree at c43bc57, extracted from ``.gpu/old-main.tar.xz`` and run with
``PYTHONPATH=<extracted>/src``) and once with this tree — in alternating order (old/new, then
new/old, ...): ``optimize --only C --max-iterations 1 --max-sweep 4``, i.e. the baseline and one
4-point occupancy sweep step.  The step's wall time is the ledger's ``seconds`` of iteration 1;
the new tree's ledger also says where it went (``step_costs``: compile / check / time / capture).

    source .device/setup.sh
    python bench/gpu/step_time.py --out $OUT/step_time --tilegym /tmp/TileGym --budget-s 230
    python bench/gpu/step_time.py --out /tmp/step-dry --dry-run        # CPU: simulated GPU, same plumbing

The lead makes the old tree with ``git archive c43bc57 src | xz > .gpu/old-main.tar.xz``.
Writes results.json and results.md under --out; prints the old/new ratios.  Target: the median
wall time of a 4-point sweep step <= 20 s (old main: 40-90 s).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import optimize_suite as base  # noqa: E402  (example repos, run_optimize, gpu_name)

ROOT = base.ROOT
KERNELS = ("softmax", "row_lse", "vector_add", "gather_scale")
TARGET_S = 20.0
MIN_RUN_S = 25.0             # a run that cannot get this much of the budget is skipped (recorded)


def old_tree(tar: Path, dest: Path) -> Path:
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data") if sys.version_info >= (3, 12) else t.extractall(dest)
    src = dest / "src"
    if not (src / "cutile_diag" / "__init__.py").exists():
        raise SystemExit(f"{tar}: no src/cutile_diag inside (make it with `git archive c43bc57 src | xz`)")
    return src


def sim_spec(path: Path, cfg: str, impl: str) -> Path:
    spec = {"configs": {cfg: 0.5}, "bytes": {cfg: 1.0e9}, "effects": {"kernel_hints": 0.97},
            "noise": 0.002, "run_noise": 0.001, "samples": 15}
    if impl == "new":           # old main's simulator has no measured ceiling
        spec["ceiling"] = {"dram_tbps": 4.24, "cached": True}
    path.write_text(json.dumps(spec))
    return path


def step_of(state: Path) -> dict:
    """Iteration 1 of a loop's ledger: its wall seconds, its sweep and (new tree) its cost split."""
    led = state / "ledger.jsonl"
    if not led.exists():
        return {"error": "no ledger"}
    recs = [json.loads(ln) for ln in led.read_text().splitlines() if ln.strip()]
    its = {r["iteration"]: r for r in recs if r.get("type") == "iteration"}
    it, b = its.get(1), its.get(0)
    if it is None:
        stop = next((r for r in reversed(recs) if r.get("type") == "stop"), {})
        return {"error": f"no step: {stop.get('reason', 'the loop stopped before iteration 1')}",
                "baseline_s": (b or {}).get("seconds")}
    sweep = it.get("sweep") or []
    return {"step_s": it.get("seconds"), "points": len(sweep) or 1,
            "screened": sum(1 for p in sweep if p.get("screen_ms") is not None),
            "status": it.get("status"), "optimization": it.get("optimization"),
            "baseline_s": (b or {}).get("seconds"), "step_costs": it.get("step_costs"),
            "baseline_costs": (b or {}).get("step_costs"), "ceiling": (b or {}).get("ceiling")}


def pythonpath(src: Path) -> str:
    """``src`` first, in place of this checkout's src/, keeping the rest (the device bundle's site:
    cuTile, libcst)."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != (ROOT / "src").resolve()]
    return os.pathsep.join([str(src), *rest])


def one(name: str, impl: str, src: Path, args, work: Path, left: float, out: Path) -> dict:
    f, kernel, wl, cfg = base.EXAMPLES[name]
    repo = base.example_repo(work / impl, name)
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    env["PYTHONPATH"] = pythonpath(src)
    # the old tree is src/ alone: its diagnosis reads the playbook from this checkout's references/
    env["CUTILE_DIAG_REFERENCES"] = str(ROOT / "references")
    measure = (["--simulate", str(sim_spec(work / f"{name}.{impl}.sim.json", cfg, impl)), "--capture-workload", wl]
               if args.dry_run else ["--workload", wl, "--configs", cfg, "--rep-ms", "30", "--warmup-ms", "20"])
    argv = [f"{repo / f}::{kernel}", *measure, "--only", "C", "--max-iterations", "1", "--max-sweep", "4",
            "--rounds", "2", "--budget", str(args.budget), "--time-limit", f"{max(left - 10, 10):.0f}"]   # the loop stops itself in time
    t0 = time.monotonic()
    log = out / f"{name}.{impl}.stderr.txt"
    res, note = base.run_optimize(argv, repo, env, left, log)
    row = {"kernel": name, "impl": impl, "wall_s": round(time.monotonic() - t0, 2), "note": note,
           **step_of(repo / "cutile-diag-out" / "optimize" / kernel)}
    if res:
        row["stop"] = res.get("stop_reason")
    print(f"[step_time] {name} {impl}: step {row.get('step_s')} s ({row.get('points')} points), "
          f"run {row['wall_s']} s {row.get('error') or ''}", flush=True)
    return row


def report(rows: list[dict], args, started: float) -> tuple[str, dict]:
    med = {}
    for impl in ("old", "new"):
        xs = [r["step_s"] for r in rows if r["impl"] == impl and isinstance(r.get("step_s"), (int, float))]
        med[impl] = statistics.median(xs) if xs else None
    ratios = {}
    for k in dict.fromkeys(r["kernel"] for r in rows):
        o = next((r.get("step_s") for r in rows if r["kernel"] == k and r["impl"] == "old"), None)
        n = next((r.get("step_s") for r in rows if r["kernel"] == k and r["impl"] == "new"), None)
        ratios[k] = round(o / n, 2) if o and n else None
    lines = ["# Wall time of one 4-point sweep step: old main (c43bc57) vs new",
             "", f"- GPU: {'none (dry run, simulated)' if args.dry_run else base.gpu_name()}",
             f"- loop: `optimize --only C --max-iterations 1 --max-sweep 4 --rounds 2 --budget {args.budget:g}`"
             " (the baseline, then the occupancy sweep); old and new alternate per kernel",
             f"- suite wall time: {time.monotonic() - started:.0f} s of --budget-s {args.budget_s:g}", "",
             "| kernel | impl | step s | points | status | run s | where the new step's time went |",
             "|---|---|---:|---:|---|---:|---|"]
    from cutile_diag.loop.costs import split_line
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['impl']} | {r.get('step_s', '-')} | {r.get('points', '-')} | "
                     f"{(r.get('status') or r.get('error') or r.get('note', ''))[:100]} | {r.get('wall_s', '-')} | "
                     f"{split_line(r.get('step_costs')) if r.get('step_costs') else ''} |")
    lines += ["", "| kernel | old/new |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in ratios.items()]
    verdict = (f"median step: old {med['old']} s, new {med['new']} s; target <= {TARGET_S:g} s: "
               + ("met" if med["new"] is not None and med["new"] <= TARGET_S else "NOT met"))
    lines += ["", verdict, ""]
    return "\n".join(lines), {"median_step_s": med, "ratios": ratios, "target_s": TARGET_S, "verdict": verdict}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="accepted for acceptance.sh; unused (examples only)")
    ap.add_argument("--budget-s", type=float, default=230.0, help="the whole suite's wall time")
    ap.add_argument("--per-run-s", type=float, default=80.0, help="each run's --time-limit (old and new alike)")
    ap.add_argument("--budget", type=float, default=120.0, help="the loop's per-iteration --budget")
    ap.add_argument("--old", default=str(ROOT / ".gpu" / "old-main.tar.xz"))
    ap.add_argument("--kernels", default="softmax,row_lse,vector_add")
    ap.add_argument("--dry-run", action="store_true", help="simulated GPU (optimize --simulate); AOT on the CPU")
    args = ap.parse_args()
    started = time.monotonic()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    names = [k.strip() for k in args.kernels.split(",") if k.strip()]
    bad = [k for k in names if k not in base.EXAMPLES]
    if bad:
        raise SystemExit(f"unknown kernel(s) {', '.join(bad)}; known: {', '.join(base.EXAMPLES)}")
    work = Path(tempfile.mkdtemp(prefix="cutile-diag-step-time-"))
    srcs = {"old": old_tree(Path(args.old), work / "old-main"), "new": ROOT / "src"}
    if not args.dry_run:      # the measured ceiling, cached once for both trees (not part of any step)
        p = subprocess.run([sys.executable, "-m", "cutile_diag", "peaks", "--json"], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONPATH": pythonpath(ROOT / "src")})
        (out / "peaks.json").write_text(p.stdout or p.stderr)
    plan = [(name, impl) for i, name in enumerate(names) for impl in (("old", "new") if i % 2 == 0 else ("new", "old"))]
    rows: list[dict] = []
    for j, (name, impl) in enumerate(plan):
        left = args.budget_s - (time.monotonic() - started)
        # the same limit for both trees (a tree must not lose its step to an estimate of the other's)
        share = min(left, args.per_run_s)
        if share < MIN_RUN_S:
            rows.append({"kernel": name, "impl": impl, "note": f"skipped: {max(left, 0):.0f} s of --budget-s left"})
            continue
        rows.append(one(name, impl, srcs[impl], args, work, share, out))
    md, summary = report(rows, args, started)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"dry_run": args.dry_run, "rows": rows, **summary}, indent=2,
                                                 default=str))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
