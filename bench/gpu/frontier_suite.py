#!/usr/bin/env python3
"""Issue #30 on one H200: can a decision on a compute-bound kernel be trusted?

Usage (repository root, on the GPU machine)::

    source .device/setup.sh && python bench/gpu/frontier_suite.py --out $OUT/frontier \\
        --tilegym /tmp/TileGym [--budget-s 420]
    python bench/gpu/frontier_suite.py --out /tmp/fs-dry --dry-run      # no GPU: the plumbing only

It runs ``cutile-diag calibrate tilegym:matmul --configs 8192-bf16`` (the same version against
itself, interleaved, at least 10 decisions) and records the 95 % CI half-width and the false
keeps of the loop's rule.  ``--dry-run`` calibrates a simulated GPU instead.

Not in this suite yet (the issue's other H200 items): the beam loop on TileGym's
layer_norm_legacy needs a TileGym workload for it (bench/gpu has none), and the matmul loop's
ratio to torch needs the loop on a throw-away repository (structural_suite.py's machinery).

Writes into --out: results.json, results.md (date, GPU, driver, versions, the exact command).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from harness import ROOT, elapsed, log, run_captured
from harness import child_env as _child_env

SIM = {"configs": {"8192-bf16": 1.6}, "noise": 0.004, "run_noise": 0.002, "flops": {"8192-bf16": 1.1e12},
       "unit": ["bf16", "tensor"]}


def environment(env: dict) -> dict:
    code = ("import json, torch; p = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None; "
            "print(json.dumps({'torch': torch.__version__, 'gpu': p.name if p else None, "
            "'cuda': torch.version.cuda}))")
    rc, out, _err, _s = run_captured([sys.executable, "-c", code], 120, env)
    info = json.loads(out.strip().splitlines()[-1]) if rc == 0 and out.strip() else {}
    rc, drv, _err, _s = run_captured(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 30, env)
    return {**info, "driver": drv.strip() if rc == 0 else None, "python": platform.python_version()}


def markdown(res: dict) -> str:
    c = res.get("calibration") or {}
    lines = [f"# frontier_suite (#30){' — DRY RUN (simulated GPU)' if res['dry_run'] else ''}", "",
             f"date {res['date']}; GPU {res['environment'].get('gpu')}; driver {res['environment'].get('driver')}; "
             f"torch {res['environment'].get('torch')}; wall {res['wall_s']:.0f} s", "",
             f"command: `{res['command']}`", "",
             "| kernel | decisions | 95 % CI half-width | false keeps | rc |", "|---|---|---|---|---|",
             f"| {c.get('kernel')} | {c.get('n')} | {c.get('half_width_pct')} % | {c.get('false_keeps')} | {c.get('rc')} |",
             "", "Not run: " + "; ".join(res["not_run"])]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="TileGym checkout root (tilegym:matmul)")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--decisions", type=int, default=12)
    ap.add_argument("--dry-run", action="store_true", help="a simulated GPU (calibrate --simulate)")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = _child_env(args.tilegym, out / "cache")
    argv = [sys.executable, "-m", "cutile_diag", "calibrate", "-n", str(args.decisions), "--no-save", "--json",
            "--budget-s", f"{max(30.0, args.budget_s - 30):.0f}"]
    if args.dry_run:
        (out / "sim.json").write_text(json.dumps(SIM))
        argv += ["--simulate", str(out / "sim.json")]
    else:
        argv += ["tilegym:matmul", "--configs", "8192-bf16"]
    log("calibrate: " + " ".join(argv[3:]))
    rc, stdout, stderr, wall = run_captured(argv, args.budget_s + 60, env, ROOT)
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        doc = {"error": (stderr.strip().splitlines() or ["no output"])[-1][:400]}
    cal = {"kernel": "tilegym:matmul 8192-bf16" if not args.dry_run else "simulated 8192-bf16", "rc": rc,
           "wall_s": round(wall, 1), **{k: doc.get(k) for k in ("n", "rounds", "half_width_pct", "false_keeps",
                                                              "false_reverts", "noise_floor", "error") if k in doc}}
    res = {"suite": "frontier_suite", "issue": 30, "dry_run": args.dry_run, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
           "environment": environment(env), "command": " ".join(sys.argv), "calibration": cal, "wall_s": elapsed(),
           "not_run": ["the beam loop on TileGym layer_norm_legacy (no TileGym workload for it in bench/gpu yet)",
                       "the matmul loop's final ratio to torch"]}
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "results.md").write_text(markdown(res))
    print((out / "results.md").read_text())
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
