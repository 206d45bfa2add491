#!/usr/bin/env python3
"""Issue #30: where does an A/A GEMM's per-sitting offset come from?  Three pairs, each timed A B B A in ONE process
on TileGym's matmul 8192³ bf16, so nothing but the named difference separates A from B:

spin     the same inputs, the same samples; B spins 1 ms before each timed launch, A 0.05 ms (two workers each sized
         their spin from their own host-enqueue estimate until ``harness.timing.Plan`` was shared)
inputs   the same plan; B's inputs and outputs are a second allocation (where a worker's tensors land)
control  the same prepared inputs and plan on both sides (what the harness itself adds)

A pair whose offset's 95 % interval excludes 0 names a cause.  Usage (repository root, GPU machine)::

    source .device/setup.sh && python bench/gpu/plan_effect.py --out $OUT/plan_effect --tilegym /tmp/TileGym
    python bench/gpu/plan_effect.py --out /tmp/pe-dry --dry-run       # no GPU: a fake timer, the plumbing

Writes results.json and results.md (date, GPU, driver, versions, the exact command, the table) into --out.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

from harness import ROOT, log, parse_suite_args

sys.path.insert(0, str(ROOT / "src"))
from cutile_diag.harness.timing import BenchOptions, Plan  # noqa: E402

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 11: 2.20}


def offset(log_ratios: list[float]) -> dict:
    """Mean B/A offset (%) over the rounds and its 95 % t interval."""
    n = len(log_ratios)
    m = statistics.fmean(log_ratios)
    hw = T95.get(n - 1, 2.0) * statistics.stdev(log_ratios) / math.sqrt(n) if n > 1 else float("inf")
    pct = lambda x: round(100 * (math.exp(x) - 1), 3)   # noqa: E731
    return {"rounds": n, "offset_pct": pct(m), "ci_pct": [pct(m - hw), pct(m + hw)], "excludes_0": abs(m) > hw}


def pair(name: str, a, b, rounds: int) -> dict:
    """``a`` and ``b``: callables timing one measurement -> (median ms, SM clock MHz); A B B A / B A A B rounds."""
    lr, rows = [], []
    for r in range(rounds):
        order = [("A", a), ("B", b), ("B", b), ("A", a)] if r % 2 == 0 else [("B", b), ("A", a), ("A", a), ("B", b)]
        got: dict[str, list] = {"A": [], "B": []}
        for lab, fn in order:
            got[lab].append(fn())
        ms = {k: statistics.fmean(x[0] for x in v) for k, v in got.items()}
        mhz = {k: statistics.fmean(x[1] or 0 for x in v) for k, v in got.items()}
        lr.append(math.log(ms["B"] / ms["A"]))
        rows.append({"first": order[0][0], "a_ms": ms["A"], "b_ms": ms["B"], "a_mhz": mhz["A"], "b_mhz": mhz["B"]})
    res = {"pair": name, **offset(lr), "rounds_detail": rows}
    log(f"{name}: B/A {res['offset_pct']:+.3f} % (95 % CI {res['ci_pct'][0]:+.3f} .. {res['ci_pct'][1]:+.3f})")
    return res


def timers(args):
    """(time_a_spin, time_b_spin, time_b_inputs, time_control, environment): each callable times one measurement."""
    if args.dry_run:
        import random
        rng = random.Random(0)
        fake = lambda bias=0.0: (lambda: (1.65 * (1 + bias) * (1 + rng.gauss(0, 0.003)), 1400.0))  # noqa: E731
        return fake(), fake(0.01), fake(), fake(), {"gpu": "DRY RUN (fake timer)"}
    import torch
    sys.path.insert(0, str(Path(args.tilegym) / "src"))
    from cutile_diag.harness.observers import ClockObserver
    from cutile_diag.measure.version import prepare, time_prepared
    from cutile_diag.workloads import load_workload
    wl = load_workload("tilegym:matmul")
    cfg = wl.select(["8192-bf16"])[0]
    opts = BenchOptions()
    p1 = prepare(wl, cfg, seed=0, keep=True)
    p2 = prepare(wl, cfg, seed=0, keep=True)
    first = time_prepared(p1, opts).measurement
    base = Plan.from_json(first.observed["plan"])
    log(f"the first measurement's plan: {base}")

    def timed(p, plan):
        def one():
            t = time_prepared(p, opts, plan=plan, observers=[ClockObserver()])
            clock = (t.measurement.observed.get("sm_clock_mhz") or {}).get("median")
            return t.measurement.stats.median, clock
        return one

    short = Plan(base.n_warmup, base.n_rep, base.batch, 0.05)
    long_ = Plan(base.n_warmup, base.n_rep, base.batch, 1.0)
    time_prepared(p2, opts, plan=base)            # p2's set-up (compile done) before any pair
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "plan": base.to_json()}
    try:
        import pynvml
        pynvml.nvmlInit()
        env["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        pass
    return timed(p1, short), timed(p1, long_), timed(p2, base), timed(p1, base), env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="TileGym checkout root")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--dry-run", action="store_true")
    args, out = parse_suite_args(ap)
    a_spin, b_spin, b_inputs, control, env = timers(args)
    res = {"suite": "plan_effect", "issue": 30, "dry_run": args.dry_run,
           "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "python": platform.python_version(), "environment": env,
           "command": " ".join(shlex.quote(x) for x in [Path(sys.executable).name, *sys.argv]), "pairs": []}
    for name, a, b in (("spin", a_spin, b_spin), ("inputs", control, b_inputs), ("control", control, control)):
        res["pairs"].append(pair(name, a, b, args.rounds))
        (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    md = [f"# plan_effect{' (DRY RUN: a fake timer, the numbers mean nothing)' if args.dry_run else ''}", "",
          f"{res['date']}; {env.get('gpu')}, driver {env.get('driver', '?')}, torch {env.get('torch', '?')}; "
          f"`{res['command']}`", "", "| pair | rounds | B/A offset | 95 % CI | excludes 0 |", "|---|---|---|---|---|"]
    md += [f"| {p['pair']} | {p['rounds']} | {p['offset_pct']:+.3f} % | {p['ci_pct'][0]:+.3f} .. {p['ci_pct'][1]:+.3f} % "
           f"| {'yes' if p['excludes_0'] else 'no'} |" for p in res["pairs"]]
    (out / "results.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
