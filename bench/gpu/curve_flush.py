#!/usr/bin/env python3
"""Issue 31: why does the measured copy curve differ from the issue's figures at 1-4 MB and 33-64 MB?

The shipped curve (``roofline/curve.py``) flushes L2 with 2 x L2 bytes and batches short points in
CUDA graphs with the flush subtracted; the issue's figures came from the harness's defaults (a
256 MiB flush).  This times a device copy at exactly the issue's byte counts (no interpolation)
under each method, side by side in one process, and says which one the issue's figures match:

    source .device/setup.sh && python bench/gpu/curve_flush.py --out $OUT/curve_flush
    python bench/gpu/curve_flush.py --out /tmp/cf-dry --dry-run          # CPU: the plumbing only

Writes results.json and results.md into --out (date, GPU, driver, versions, the exact command).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from roof_curve import ISSUE  # noqa: E402  (the issue's figures: bytes moved -> TB/s)

MIB = 1 << 20
# (label, BenchOptions overrides): the curve's method, the harness's flush, and eager launches
METHODS = {
    "curve: 2xL2 flush, graphs": {"flush_bytes": "2xL2", "batch": "auto"},
    "harness: 256 MiB flush, graphs": {"flush_bytes": 256 * MIB, "batch": "auto"},
    "2xL2 flush, eager": {"flush_bytes": "2xL2", "batch": None},
    "256 MiB flush, eager": {"flush_bytes": 256 * MIB, "batch": None},
}


def measure_all(rounds: int) -> dict:
    """Per method and size the median TB/s over ``rounds`` interleaved passes (drift cancels)."""
    import torch

    from cutile_diag.harness.timing import BenchOptions, measure
    from cutile_diag.roofline.curve import _ops
    dev = torch.device("cuda")
    l2 = int(torch.cuda.get_device_properties(dev).L2_cache_size)
    buf = torch.ones(int(max(ISSUE)) // 4 + 1, dtype=torch.float32, device=dev).view(torch.uint8)
    got: dict[str, dict[float, list[float]]] = {m: {n: [] for n in ISSUE} for m in METHODS}
    for _ in range(rounds):
        for n in ISSUE:
            fn = _ops(buf, int(n))["copy"]
            for label, o in METHODS.items():
                fb = max(2 * l2, 8 * MIB) if o["flush_bytes"] == "2xL2" else o["flush_bytes"]
                m = measure(fn, BenchOptions(warmup_ms=2.0, rep_ms=5.0, min_rep=7, max_rep=200, batch_sample_ms=0.25,
                                             sample_clocks=False, flush_l2=True, flush_bytes=fb, batch=o["batch"]))
                got[label][n].append(n / (m.stats.median * 1e-3) / 1e12)
    return {"l2_bytes": l2, "tbps": {m: {str(n): sorted(v)[len(v) // 2] for n, v in d.items()} for m, d in got.items()}}


def simulated() -> dict:
    """--dry-run: the issue's figures scaled per method, to exercise the report (labelled DRY RUN)."""
    scale = dict(zip(METHODS, (0.8, 1.0, 0.7, 0.9)))
    return {"l2_bytes": 60 * MIB, "tbps": {m: {str(n): v * scale[m] for n, v in ISSUE.items()} for m in METHODS}}


def report(res: dict) -> str:
    """results.md: per size the issue's figure and each method's, the count within 10 % per method."""
    lines = [f"# Issue 31: the copy curve's method against the issue's figures{' — DRY RUN' if res['dry_run'] else ''}",
             "", f"- date {res['date']}; GPU {res['gpu']}; driver {res['driver']}; torch {res['torch']}",
             f"- command: `{res['command']}`; {res['rounds']} interleaved rounds, median", "",
             "| MB moved | issue TB/s | " + " | ".join(METHODS) + " |", "|---|---|" + "---|" * len(METHODS)]
    for n, ref in ISSUE.items():
        cells = [f"{res['tbps'][m][str(n)]:.2f} ({res['tbps'][m][str(n)] / ref:.2f})" for m in METHODS]
        lines.append(f"| {n / 1e6:g} | {ref:.2f} | " + " | ".join(cells) + " |")
    lines += ["", "within 10 % of the issue: " + "; ".join(f"{m} {res['within'][m]}/{len(ISSUE)}" for m in METHODS),
              f"best match: {res['best']}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--tilegym", help=argparse.SUPPRESS)     # acceptance.sh passes it to every suite
    args = ap.parse_args()
    t0 = time.monotonic()
    if args.dry_run:
        res, gpu, drv, tv = simulated(), None, None, None
    else:
        import subprocess

        import torch
        res = measure_all(args.rounds)
        gpu, tv = torch.cuda.get_device_name(), torch.__version__
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip() or None
    within = {m: sum(abs(res["tbps"][m][str(n)] / ref - 1) <= 0.10 for n, ref in ISSUE.items()) for m in METHODS}
    res.update(dry_run=args.dry_run, date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               gpu=gpu, driver=drv, torch=tv, rounds=args.rounds, command=" ".join(sys.argv),
               within=within, best=max(within, key=within.get), wall_s=round(time.monotonic() - t0, 1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(report(res))
    print(report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
