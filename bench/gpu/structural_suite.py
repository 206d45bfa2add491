#!/usr/bin/env python
"""Structural steps on the GPU (issue 10): the default loop plus ``--until-roof 0.9`` on the
naive examples and two TileGym row kernels that start below 75 % of the measured DRAM
ceiling; records start/final latency, % of roof, whether 85 % was reached (or which step
failed and why, from the ledger) and the kept diff of each loop branch.

    source .device/setup.sh
    python bench/gpu/structural_suite.py --out $OUT/structural --tilegym /tmp/TileGym [--budget-s 480]
    python bench/gpu/structural_suite.py --out /tmp/structural-dry --tilegym /tmp/tg --dry-run   # CPU

Kernels (one configuration each, small timing budgets; each loop runs under its own
``optimize --time-limit`` share, so it stops by itself with a resumable record):

    softmax, row_norm, row_lse,           examples (naive on purpose; row_norm and row_lse have no
    gather_scale, vector_add              CAPTURE_SPECS and are written like real library code)
    tilegym_softmax                       TileGym softmax, use_tma=False (_softmax_kernel: 2-D gathers)
    tilegym_softmax_tma                   TileGym softmax, use_tma=True (_softmax_kernel_tma: NEG_INF padding)
    tilegym_softmax_chunked               TileGym softmax, use_chunked=True (_softmax_kernel_chunked: three passes)

The TileGym kernels ship no CAPTURE_SPECS: the loop captures them from the workload's run.
Every kernel is optimised in a throw-away git repository (a copy of the example file, or a
local clone of the TileGym checkout, which is never modified).  ``--dry-run`` replaces the
GPU with the simulated backend (``optimize --simulate``) and keeps everything else — the
AOT captures, the diagnosis, the real transforms, the kept diffs — so the plumbing is
proven on a CPU.  Output under --out:

    report.md, summary.json, <kernel>/{perf_results.md, ledger.jsonl(.gz), kept.diff, stderr.txt}
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import optimize_suite as base  # noqa: E402  (shared repo/optimize/summary helpers)
from harness import child_env  # noqa: E402

ROOT = base.ROOT
UNTIL_ROOF = 0.9
TARGET_PCT = 85.0
# name -> share of the suite's time (the loop's --time-limit is the share of what is left)
EXAMPLES = {"softmax": 3.0, "row_norm": 2.5, "row_lse": 2.0, "gather_scale": 0.8, "vector_add": 0.8,
            "multipass_norm": 3.0, "persistent_rows": 3.0}
# gather_scale and vector_add start above 90 % of the measured ceiling (bench/results/acceptance-h200):
# `--only` leaves them out when device time is short
# name -> (file in the checkout, kernel, workload, configuration, share)
TILEGYM = {
    "tilegym_softmax": ("src/tilegym/ops/cutile/softmax.py", "_softmax_kernel", "tilegym:softmax",
                        "4096x4096-f16", 3.5),
    "tilegym_softmax_tma": ("src/tilegym/ops/cutile/softmax.py", "_softmax_kernel_tma", "tilegym:softmax",
                            "4096x4096-f16-tma", 3.5),
    "tilegym_softmax_chunked": ("src/tilegym/ops/cutile/softmax.py", "_softmax_kernel_chunked",
                                "tilegym:softmax", "4096x4096-f16-chunked", 1.5),
}
# --dry-run: a simulated GPU where the structural steps pay off (the loop's decisions and
# the --until-roof continuations are exercised; the numbers mean nothing)
SIM_EFFECTS = {"gather_to_load": 0.55, "tma_zero_padding": 0.7, "persistent_grid": 0.85, "rows_per_block": 0.9,
               "read_once": 0.8, "joint_sweep": 0.97, "kernel_hints": 0.995, "latency_hints": 0.996}


def sim_spec(path: Path, config: str) -> Path:
    # 0.5 ms for 1 GB: ~40 % of an H200's DRAM roof, so --until-roof has headroom to act on
    path.write_text(json.dumps({"configs": {config: 0.5}, "bytes": {config: 1.0e9}, "effects": SIM_EFFECTS,
                                "noise": 0.002, "run_noise": 0.001, "samples": 15}))
    return path


def kept_diff(repo: Path, state: Path) -> str:
    """``git diff`` from the loop's start commit to its last kept commit (the loop branch)."""
    led = state / "ledger.jsonl"
    if not led.exists():
        return ""
    recs = [json.loads(ln) for ln in led.read_text().splitlines() if ln.strip()]
    setup = next((r for r in recs if r.get("type") == "setup"), {})
    start = setup.get("start_commit") or setup.get("base_commit")
    kept = [r for r in recs if r.get("type") == "iteration" and r.get("status") == "keep"]
    end = (kept[-1].get("commits") or {}).get("kept") if kept else None
    if not start or not end or start == end:
        return ""
    p = subprocess.run(["git", "diff", start, end], cwd=repo, capture_output=True, text=True)
    return p.stdout


def why_not_target(state: Path) -> list[str]:
    """From the ledger: the steps that failed (reverted / crashed / skipped) and the stop."""
    led = state / "ledger.jsonl"
    if not led.exists():
        return ["no ledger"]
    out = []
    for r in (json.loads(ln) for ln in led.read_text().splitlines() if ln.strip()):
        if r.get("type") == "iteration" and r.get("status") in ("revert", "crash"):
            d = r.get("decision") or {}
            out.append(f"iteration {r['iteration']} {r.get('optimization')}: {r['status']} ({d.get('rule')}: "
                       f"{str(d.get('reason'))[:240]})")
        elif r.get("type") == "continue":
            out.append(f"continued: {r.get('reason')}")
        elif r.get("type") == "stop":
            out.append(f"stop ({r.get('rule')}): {r.get('reason')}")
    return out


def pct_measured(row: dict, label: str, state: Path) -> float | None:
    """% of the measured ceiling of the baseline / final kept version (first configuration)."""
    led = state / "ledger.jsonl"
    if not led.exists():
        return None
    its = [json.loads(ln) for ln in led.read_text().splitlines() if ln.strip()]
    its = [r for r in its if r.get("type") == "iteration"]
    rec = its[0] if label == "baseline" and its else next((r for r in reversed(its) if r["status"] == "keep"), None)
    pts = (rec or {}).get("roofline") or {}
    for p in pts.values():
        v = p.get("pct_measured")
        return float(v) if v is not None else None
    return None


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("torch", "cuda.tile"):
        try:
            m = __import__(mod, fromlist=["_"])
            out[mod] = getattr(m, "__version__", "?")
        except Exception as e:  # a missing package is a fact for the report, not a failure
            out[mod] = f"unavailable ({type(e).__name__})"
    try:
        out["cutile_diag_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                                   capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return out


def report(rows: list[dict], args, started: float, command: str) -> str:
    basis = "datasheet roof (simulated)" if args.dry_run else "measured ceiling"
    out = ["# Structural steps — `optimize --until-roof 0.9` (issue 10)", "",
           f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; wall {time.monotonic() - started:.0f} s"
           + ("; **dry run (simulated GPU)**" if args.dry_run else ""),
           f"- GPU / driver: {base.gpu_name() if not args.dry_run else 'none (simulated)'}",
           f"- versions: {json.dumps(versions())}",
           f"- command: `{command}`",
           f"- per kernel: <= {args.iterations} iterations, {args.rounds} interleaved rounds, sweeps <= "
           f"{args.max_sweep}, {args.budget:.0f} s per iteration, rep 30 ms / warm-up 20 ms, one configuration; "
           f"each loop's --time-limit is its share of the suite's {args.budget_s:.0f} s",
           "", f"| kernel | start ms | final ms | speedup | % of {basis} start → final | ≥ 85 % | "
           "iterations | stop |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def f(v, fmt):
            return fmt.format(v) if isinstance(v, (int, float)) else "-"
        out.append(f"| {r['kernel']} | {f(r.get('baseline_ms'), '{:.6f}')} | {f(r.get('final_ms'), '{:.6f}')} | "
                   f"{f(r.get('speedup'), '{:.2f}x')} | {f(r.get('pct_start'), '{:.0f}%')} → "
                   f"{f(r.get('pct_final'), '{:.0f}%')} | {r.get('reached', '-')} | {r.get('iterations', '-')} | "
                   f"{(r.get('stop') or r.get('note') or '-').replace('|', '/')[:140]} |")
    out += ["", "## Steps, failures and kept diffs", ""]
    for r in rows:
        out += [f"### {r['kernel']}", f"- {r.get('note')}"]
        out += [f"- {s}" for s in r.get("steps", [])]
        if r.get("reached") != "yes":
            out += [f"- why not {TARGET_PCT:.0f} %: {s}" for s in r.get("why_not", [])]
        if r.get("diff_lines"):
            out.append(f"- kept diff: `{r['kernel']}/kept.diff` ({r['diff_lines']} lines)")
        out.append("")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="TileGym checkout root (src/tilegym, tests/); without it only the examples run")
    ap.add_argument("--only", help="comma-separated kernel names")
    ap.add_argument("--budget-s", type=float, default=380.0,
                    help="the suite's time: each loop gets its share of what is left as --time-limit")
    ap.add_argument("--grace-s", type=float, default=40.0,
                    help="kill a loop this long after its --time-limit (a hung step; the ledger keeps what finished)")
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-sweep", type=int, default=3)
    ap.add_argument("--budget", type=float, default=100.0, help="per-iteration budget, s (a sweep point gets its share)")
    ap.add_argument("--dry-run", action="store_true", help="simulated GPU (optimize --simulate); AOT on the CPU")
    args = ap.parse_args()
    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    started = time.monotonic()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = child_env()
    shares = {**EXAMPLES, **{k: v[-1] for k, v in TILEGYM.items()}}
    names = list(EXAMPLES) + (list(TILEGYM) if args.tilegym else [])
    if args.only:
        want = {n.strip() for n in args.only.split(",") if n.strip()}
        names = [n for n in names if n in want]
    common = ["--until-roof", str(UNTIL_ROOF), "--max-iterations", str(args.iterations), "--rounds",
              str(args.rounds), "--max-sweep", str(args.max_sweep), "--budget", str(args.budget)]
    if not args.dry_run:
        common += ["--rep-ms", "30", "--warmup-ms", "20"]
    if not args.dry_run:
        # % of the *measured* ceiling needs the device's measured DRAM ceiling (cached per device
        # and driver; measured once here if absent, ~20 s)
        p = subprocess.run([sys.executable, "-m", "cutile_diag", "peaks", "--json"], env=env, capture_output=True,
                           text=True, timeout=240)
        (out / "peaks.json").write_text(p.stdout or p.stderr)
    rows: list[dict] = []
    work = Path(tempfile.mkdtemp(prefix="cutile-diag-structural-"))
    tg_repo = tg_branch = None
    try:
        for i, name in enumerate(names):
            left = args.budget_s - (time.monotonic() - started)
            share = left * shares[name] / sum(shares[n] for n in names[i:])
            if share < 20:
                rows.append({"kernel": name, "note": f"skipped: {max(left, 0):.0f} s of the suite's --budget-s left"})
                continue
            dest = out / name
            dest.mkdir(parents=True, exist_ok=True)
            timeout = share + args.grace_s
            if name in EXAMPLES:
                f, kernel, wl, cfg = base.EXAMPLES[name]
                repo = base.example_repo(work, name)
                target = [f"{repo / f}::{kernel}"]
                kenv = env
            else:
                f, kernel, wl, cfg, _ = TILEGYM[name]
                if tg_repo is None:
                    tg_repo = base.tilegym_repo(work, Path(args.tilegym).resolve())
                    tg_branch = base.current_branch(tg_repo)
                repo = tg_repo
                kenv = dict(env)
                kenv["PYTHONPATH"] = os.pathsep.join([str(tg_repo / "src"), env["PYTHONPATH"]])
                kenv["TILEGYM_DISABLE_AUTOTUNE"] = "1"
                target = [f"{repo / f}::{kernel}", "--branch", f"cutile-perf-{name}"]
            measure = ["--simulate", str(sim_spec(work / f"{name}.sim.json", cfg)), "--capture-workload", wl] \
                if args.dry_run else \
                ["--workload", wl, "--configs", cfg]
            print(f"[structural] {name}: --time-limit {share:.0f} s", flush=True)
            res, note = base.run_optimize([*target, *measure, *common, "--time-limit", f"{share:.0f}"], repo, kenv,
                                          timeout, dest / "stderr.txt")
            state = repo / "cutile-diag-out" / "optimize" / kernel
            row = base.summarize(name, res, note, state, dest)
            row["pct_start"] = pct_measured(row, "baseline", state)
            row["pct_final"] = pct_measured(row, "final", state)
            if row["pct_start"] is None and row.get("baseline_roof"):      # no measured ceiling (dry run)
                row["pct_start"] = row["baseline_roof"].get("pct_of_roof")
                row["pct_final"] = (row.get("final_roof") or {}).get("pct_of_roof")
            row["reached"] = "yes" if (row.get("pct_final") or 0) >= TARGET_PCT else "no"
            row["why_not"] = why_not_target(state)
            diff = kept_diff(repo, state)
            if diff:
                (dest / "kept.diff").write_text(diff)
                row["diff_lines"] = diff.count("\n")
            led = dest / "ledger.jsonl"
            if led.exists() and led.stat().st_size > 256_000:
                with open(led, "rb") as src, gzip.open(str(led) + ".gz", "wb") as gz:
                    gz.write(src.read())
                led.unlink()
            rows.append(row)
            print(f"[structural] {name}: {note}; " + json.dumps(
                {k: row.get(k) for k in ("baseline_ms", "final_ms", "pct_start", "pct_final", "reached")}),
                flush=True)
            if repo == tg_repo:
                base.sh(base.GIT + ["checkout", "-q", "-f", tg_branch], tg_repo)
    finally:
        (out / "summary.json").write_text(json.dumps({"command": command, "dry_run": args.dry_run,
                                                      "versions": versions(), "kernels": rows}, indent=1))
        (out / "report.md").write_text(report(rows, args, started, command))
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
