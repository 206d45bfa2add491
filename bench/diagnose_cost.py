#!/usr/bin/env python
"""The CPU cost of a beam step's diagnosis (choosing the next move), an older tree against this one, side by side.

On a simulated GPU (``optimize --simulate``: checks and timing cost nothing) the loop's wall time is what the loop
itself spends: diagnosing every frontier member, asking every transform whether it applies, building the moves.
On an H100 that was 4-13 s of a 17-24 s replay step (bench/results/acceptance-h100-s16).  Each tree runs the same
loop (``--until-roof 0.99`` on the bundled gather row norm, a fixed spec) under the same ``--time-limit``, in
alternating order; per tree: the steps taken, the median ``diagnose`` phase of a step (``step_costs`` in the
ledger) and the steps it took.  The set of steps must be the same (the change is a cache, not a new choice); their
order may differ: a step's sampling stops at the time its budget leaves after the diagnosis, so a slow diagnosis
changes what the beam measured and ranks next (the older tree took the newer tree's order under cProfile).

    python bench/diagnose_cost.py --old 4cfe969 --out bench/results/diagnose-cost-cpu [--time-limit 240] [--pairs 1]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"configs": {"large": 0.4}, "bytes": {"large": 2.0e8},
        "effects": {"persistent_grid": 0.98, "kernel_hints": 0.99, "approx_div": 0.995},
        "noise": 0.002, "run_noise": 0.0005}


def sh(*args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    return subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def one_run(src: Path, work: Path, time_limit: float) -> dict:
    """The loop in a fresh repository holding the row norm, run with ``src`` first on PYTHONPATH."""
    repo = work / "repo"
    repo.mkdir(parents=True)
    sh("git", "init", "-q", "-b", "main", cwd=repo)
    (repo / "row_norm.py").write_text((ROOT / "src/cutile_diag/examples/row_norm.py").read_text())
    sh("git", "add", "-A", cwd=repo)
    sh("git", "-c", "user.email=bench@example.com", "-c", "user.name=bench", "commit", "-qm", "row norm", cwd=repo)
    (work / "spec.json").write_text(json.dumps(SPEC))
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "cutile_diag", "optimize", "row_norm.py::row_norm", "--simulate",
                    str(work / "spec.json"), "--until-roof", "0.99", "--no-capture", "--time-limit", str(time_limit),
                    "--json"], cwd=repo, env=env, capture_output=True, text=True, timeout=time_limit + 240)
    wall = time.monotonic() - t0
    ledger = next(repo.glob("cutile-diag-out/**/ledger.jsonl"))
    steps = [r for r in map(json.loads, ledger.read_text().splitlines())
             if r.get("type") == "iteration" and r.get("iteration", 0) > 0]
    diag = [((r.get("step_costs") or {}).get("phases") or r.get("step_costs") or {}).get("diagnose", {}) for r in steps]
    return {"wall_s": round(wall, 1), "steps": len(steps),
            "diagnose_s": [round(d.get("s", 0.0), 2) if isinstance(d, dict) else None for d in diag],
            "sequence": [r.get("optimization", "")[:60] for r in steps]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="a commit of this repository (its src/ is the older tree)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--time-limit", type=float, default=240.0)
    ap.add_argument("--pairs", type=int, default=1)
    args = ap.parse_args()
    if args.pairs < 1 or args.time_limit <= 0:
        ap.error("--pairs must be at least 1 and --time-limit positive")
    if subprocess.run(["git", "rev-parse", "--verify", "-q", f"{args.old}^{{commit}}"], cwd=ROOT,
                      capture_output=True).returncode != 0:
        print(f"diagnose_cost: --old {args.old} is not a commit of {ROOT}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        old_src = Path(tmp) / "old"
        old_src.mkdir()
        archive = subprocess.run(["git", "archive", args.old, "src"], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old_src)], input=archive, check=True)
        trees = {"old": old_src / "src", "new": ROOT / "src"}
        for i in range(args.pairs):
            for label in (("old", "new") if i % 2 == 0 else ("new", "old")):
                r = one_run(trees[label], Path(tmp) / f"{label}-{i}", args.time_limit)
                runs[label].append(r)
                print(f"[diagnose_cost] {label} run {i}: {r['steps']} steps in {r['wall_s']} s, median diagnose "
                      f"{statistics.median([d for d in r['diagnose_s'] if d is not None] or [0]):.2f} s", flush=True)
    summary = {}
    for label, rs in runs.items():
        ds = [d for r in rs for d in r["diagnose_s"] if d is not None]
        summary[label] = {"steps_per_run": [r["steps"] for r in rs], "median_diagnose_s": statistics.median(ds),
                          "mean_steps": statistics.fmean(r["steps"] for r in rs)}
    n = min(len(r["sequence"]) for rs in runs.values() for r in rs)
    same = all(sorted(r["sequence"][:n]) == sorted(runs["old"][0]["sequence"][:n]) for rs in runs.values() for r in rs)
    ordered = all(r["sequence"][:n] == runs["old"][0]["sequence"][:n] for rs in runs.values() for r in rs)
    ratio = summary["old"]["median_diagnose_s"] / max(summary["new"]["median_diagnose_s"], 1e-9)
    res = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
           "python": platform.python_version(), "old": args.old,
           "new": sh("git", "rev-parse", "--short", "HEAD", cwd=ROOT).strip() + " (+ working tree)",
           "time_limit_s": args.time_limit, "command": " ".join(sys.argv), "summary": summary,
           "median_diagnose_ratio_old_over_new": ratio, "same_steps": same, "same_order": ordered, "runs": runs}
    (out / "results.json").write_text(json.dumps(res, indent=1))
    lines = [f"# A beam step's diagnosis on the CPU: {args.old} vs this tree", "",
             f"- {res['date']}; {res['machine']}; Python {res['python']}; command `{res['command']}`",
             f"- each run: `optimize row_norm.py::row_norm --simulate <spec> --until-roof 0.99 --no-capture "
             f"--time-limit {args.time_limit:g}` in a fresh repository; trees alternate old/new, new/old", "",
             "| tree | steps per run | median diagnose s per step |", "|---|---|---|"]
    for label in ("old", "new"):
        s = summary[label]
        lines.append(f"| {label} ({res[label]}) | {', '.join(map(str, s['steps_per_run']))} | "
                     f"{s['median_diagnose_s']:.2f} |")
    lines += ["", f"Median diagnose per step, old / new: **{ratio:.1f}x**. The first {n} steps of every run are "
              + ("the same steps" if same else "NOT the same steps")
              + (", in the same order." if ordered else ", in another order (see the module's docstring)."), ""]
    for label in ("old", "new"):
        lines.append(f"- {label}: " + " → ".join(s.split(":")[0] for s in runs[label][0]["sequence"]))
    lines.append("")
    (out / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
