#!/usr/bin/env python
"""Issue 15 acceptance: `cutile-diag optimize` captures every version it measures, without specs.

Two TileGym kernels that ship no CAPTURE_SPECS, few iterations, small timing budgets:

* workload mode — ``_softmax_kernel`` (``--workload tilegym:softmax``): each version captured
  from the workload's own run (run mode, launches observed → launch facts in the manifest);
* command mode — ``_rms_norm_kernel_gather`` with TileGym's own pytest correctness test as
  ``--test-cmd`` and its ``test_perf --print-record`` as ``--bench-cmd``: each version
  captured from the test command's run, keeping only that kernel.

Every iteration in the ledgers must have a capture and an IR diff; the script checks it and
writes, under --out: ``report.md`` (table + exact commands + versions), ``summary.json``,
``<target>/ledger.jsonl``, ``perf_results.md``, ``stderr.txt``.  First (about 40 s) the two
spec-less examples (row_norm, row_lse) are checked against their references on the GPU, and
the JIT's TileIR from a run is compared with the AOT export of the launch intercepted on CPU.

    source .device/setup.sh && python bench/gpu/loop_capture.py --out $OUT/loop_capture --tilegym /tmp/TileGym

``--dry-run`` (CPU): the two spec-less examples (row_norm, row_lse) on the simulated backend
with ``--capture-workload`` (captures from intercepted launches), same checks.
The TileGym checkout is never modified: the loops run in a local clone.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import optimize_suite as suite  # noqa: E402  (clone, run, summarise: one implementation)
from harness import child_env, parse_suite_args, plugin_flag  # noqa: E402

PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"
TARGETS = {
    "softmax-workload": {
        "file": "src/tilegym/ops/cutile/softmax.py", "kernel": "_softmax_kernel",
        "args": ["--workload", "tilegym:softmax", "--configs", "4096x4096-f16"]},
    "rms_norm-command": {
        "file": "src/tilegym/ops/cutile/rms_norm.py", "kernel": "_rms_norm_kernel_gather",
        # one shape each: every version runs the test command (capture + check) and the perf test
        "args": ["--test-cmd", f"{PYTEST} tests/ops/test_rms_norm.py -x "
                               "-k 'test_op and cutile and multi_wave_reload and 31072'",
                 "--bench-cmd", f"WARMUP=20 REP=30 {PYTEST} tests/ops/test_rms_norm.py -s --print-record "
                                + plugin_flag() +
                                "-k 'test_perf and cutile and multi_wave_reload and 262144 and 1024'"]},
}
DRY = {
    "row_norm-simulated": ("row_norm.py", "row_norm", {"16384x1000-f16": 0.09}),
    "row_lse-simulated": ("row_lse.py", "row_lse", {"16384x3000-f32": 0.2}),
}
EFFECTS = {"latency_hints": 0.92, "kernel_hints": 0.97, "gather_to_load": 0.8, "exp_to_exp2": 0.96}


SIGNATURE_CHECK = r"""
import json, sys, torch
from cutile_diag.measure.capture import capture_auto
from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag.workloads import load_workload
name, cfg_name, out, gpu = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
ref = f"{EXAMPLES_DIR / (name + '.py')}::{name}"
row = {"kernel": name, "config": cfg_name}
cpu = capture_auto(ref, workload=f"examples:{name}", config=cfg_name, out_dir=out + "/cpu", gpu=False)
row["cpu"] = {"source": cpu.source, "symbol": cpu.folder.symbol, "grid": cpu.folder.manifest["launch"]["grid"]}
if gpu:
    wl = load_workload(f"examples:{name}")
    cfg = wl.config(cfg_name)
    inputs = wl.make_inputs(cfg, 0)
    wl.run(inputs)
    torch.cuda.synchronize()
    ref_out = wl.reference(inputs)
    errs = {}
    for k, want in ref_out.items():
        got = inputs[k].double()
        tol = wl.tolerance(cfg, inputs[k].dtype)
        errs[k] = {"max_abs": float((got - want).abs().max()),
                   "ok": bool(torch.allclose(got, want, rtol=tol.rtol, atol=tol.atol))}
    row["correct"] = all(e["ok"] for e in errs.values())
    row["errors"] = errs
    run = capture_auto(ref, workload=f"examples:{name}", config=cfg_name, out_dir=out + "/gpu", gpu=True)
    launch = run.folder.manifest.get("launch") or {}
    row["gpu"] = {"source": run.source, "symbol": run.folder.symbol, "grid": launch.get("grid"),
                  "sm_count": launch.get("sm_count")}
    # the JIT's own TileIR (run mode) against the AOT export from the CPU-intercepted launch
    row["tileir_equal"] = run.folder.tileir_text() == cpu.folder.tileir_text()
print(json.dumps(row))
"""


def signature_checks(out: Path, env: dict, gpu: bool, deadline: float) -> list[dict]:
    """The spec-less examples: correct on the GPU, and the JIT's TileIR equals the AOT export
    of the launch intercepted on CPU inputs (same configuration)."""
    rows = []
    for name, cfg in (("row_norm", "4096x4000-f16"), ("row_lse", "16384x3000-f32")):
        left = deadline - time.monotonic()
        if left < 30:
            rows.append({"kernel": name, "note": "skipped: budget"})
            continue
        work = tempfile.mkdtemp(prefix=f"i15-{name}-")
        try:
            p = subprocess.run([sys.executable, "-c", SIGNATURE_CHECK, name, cfg, work, "1" if gpu else "0"],
                               env=env, capture_output=True, text=True, timeout=min(left, 120))
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else
                        {"kernel": name, "note": f"exit {p.returncode}: "
                         + ((p.stderr.strip().splitlines() or ['?'])[-1])[:300]})
        except subprocess.TimeoutExpired:
            rows.append({"kernel": name, "note": "timed out"})
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return rows


def check_ledger(state: Path) -> dict:
    """Every iteration has a capture and an IR diff (the baseline: a capture)."""
    recs = [json.loads(ln) for ln in (state / "ledger.jsonl").read_text().splitlines() if ln.strip()]
    its = [r for r in recs if r.get("type") == "iteration"]
    rows, ok = [], bool(its)
    for r in its:
        cap = r.get("capture") or {}
        diff = r.get("ir_diff") or {}
        has_cap = cap.get("ok") is True
        has_diff = r["iteration"] == 0 or ("skipped" not in diff and "equivalent" in diff)
        # a step the run's --time-limit cut short has no verdict to explain (the ledger says so)
        cut = (r.get("decision") or {}).get("rule") == "budget"
        ok &= (has_cap and has_diff) or cut
        from cutile_diag.loop.evidence import diff_line
        rows.append({"iteration": r["iteration"], "optimization": r.get("optimization"), "status": r.get("status"),
                     "latency_ms": r.get("latency_ms"),
                     "change_pct": (r.get("comparison") or {}).get("improvement_pct"),
                     "capture": cap.get("source") or cap.get("error") or cap.get("skipped"),
                     "ir_diff": "baseline" if r["iteration"] == 0 else diff_line(diff),
                     "rule": (r.get("decision") or {}).get("rule")})
    return {"every_iteration_captured_and_diffed": ok, "iterations": rows}


def versions() -> dict:
    out = {}
    for mod in ("torch", "cuda.tile"):
        try:
            m = __import__(mod, fromlist=["_"])
            out[mod] = getattr(m, "__version__", "?")
        except Exception as e:
            out[mod] = f"not importable ({type(e).__name__})"
    return out


def render(rows: list[dict], args, started: float, cmds: list[str], sig: list[dict]) -> str:
    out = [f"# optimize captures every version (issue 15){' — DRY RUN (simulated, CPU)' if args.dry_run else ''}", "",
           f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; wall {time.monotonic() - started:.0f} s of "
           f"--budget-s {args.budget_s:g}",
           f"- GPU / driver: {suite.gpu_name()}; versions: {json.dumps(versions())}", "",
           "| target | iteration | step | status | latency ms | change | capture | IR diff |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r.get("check"):
            out.append(f"| {r['target']} | - | {r.get('note', '')} | | | | | |")
            continue
        for it in r["check"]["iterations"]:
            pct = f"{it['change_pct']:+.2f}%" if isinstance(it.get("change_pct"), (int, float)) else "-"
            lat = f"{it['latency_ms']:.6f}" if isinstance(it.get("latency_ms"), (int, float)) else "-"
            out.append(f"| {r['target']} | {it['iteration']} | {str(it['optimization'])[:70]} | {it['status']} | "
                       f"{lat} | {pct} | {it['capture']} | {str(it['ir_diff']).replace('|', '/')[:110]} |")
    out += ["", "| target | every iteration captured + diffed | note |", "|---|---|---|"]
    for r in rows:
        out.append(f"| {r['target']} | {(r.get('check') or {}).get('every_iteration_captured_and_diffed', '-')} | "
                   f"{r.get('note', '')} |")
    out += ["", "Spec-less examples: correctness on the GPU, and the JIT's TileIR (run mode) vs the AOT export "
            "from the launch intercepted on CPU inputs:", "",
            "| kernel | config | correct | JIT TileIR == CPU-intercept AOT | grid (CPU / GPU) | SMs seen | note |",
            "|---|---|---|---|---|---|---|"]
    for r in sig:
        out.append(f"| {r['kernel']} | {r.get('config', '-')} | {r.get('correct', '-')} | {r.get('tileir_equal', '-')} | "
                   f"{(r.get('cpu') or {}).get('grid', '-')} / {(r.get('gpu') or {}).get('grid', '-')} | "
                   f"{(r.get('gpu') or {}).get('sm_count', '-')} | {r.get('note', '')} |")
    out += ["", "Commands (cwd = the throw-away clone / repo):", ""] + [f"    {c}" for c in cmds]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="TileGym checkout root (src/tilegym, tests/); required unless --dry-run")
    ap.add_argument("--budget-s", type=float, default=300.0, help="whole run, seconds (default 300)")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated TileGym targets (default: all)")
    ap.add_argument("--no-signatures", action="store_true", help="skip the spec-less examples' JIT vs AOT check")
    ap.add_argument("--dry-run", action="store_true", help="CPU: spec-less examples, simulated backend")
    args, out = parse_suite_args(ap)
    started = time.monotonic()
    env = child_env()
    # --budget 150: one command-mode check + comparison at 2 rounds is ~116 s on an H200 (17-20 s a pytest run)
    common = ["--max-iterations", str(args.iterations), "--rounds", "2", "--max-sweep", "1", "--budget", "150",
              "--continue"]
    rows, cmds = [], []
    sig = [] if args.no_signatures else \
        signature_checks(out, env, not args.dry_run, started + min(60.0, args.budget_s / 4))
    for r in sig:
        print(f"[loop_capture] signature {json.dumps(r)}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="cutile-diag-i15-"))
    try:
        jobs = []
        if args.dry_run:
            from cutile_diag.examples import EXAMPLES_DIR
            for name, (f, kernel, configs) in DRY.items():
                repo = work / name
                repo.mkdir()
                shutil.copy(EXAMPLES_DIR / f, repo / f)
                (repo / ".gitignore").write_text("cutile-diag-out/\n__pycache__/\n")
                for c in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "naive"]):
                    suite.sh(suite.GIT + c, repo)
                sim = repo.parent / f"{name}.sim.json"
                sim.write_text(json.dumps({"configs": configs, "effects": EFFECTS, "noise": 0.001}))
                jobs.append((name, repo, kernel, [f"{repo / f}::{kernel}", "--simulate", str(sim),
                                                  "--capture-workload", f"examples:{kernel}"], env))
        else:
            tg = suite.tilegym_repo(work, Path(args.tilegym).resolve())
            branch = suite.current_branch(tg)
            kenv = dict(env)
            kenv["PYTHONPATH"] = os.pathsep.join([str(tg / "src"), env["PYTHONPATH"]])
            kenv["TILEGYM_DISABLE_AUTOTUNE"] = "1"
            want = {t.strip() for t in args.targets.split(",") if t.strip()}
            for name, t in TARGETS.items():
                if name not in want:
                    continue
                jobs.append((name, tg, t["kernel"], [f"{tg / t['file']}::{t['kernel']}", *t["args"],
                                                     "--branch", f"cutile-perf-i15-{name}"], kenv))
        for i, (name, repo, kernel, argv, jenv) in enumerate(jobs):
            left = args.budget_s - (time.monotonic() - started)
            if left < 45:
                rows.append({"target": name, "note": f"skipped: {left:.0f} s of the budget left"})
                continue
            share = left / (len(jobs) - i)            # an equal share of what is left: the loop's --time-limit
            timeout = share + 45                      # then a hung step is killed
            argv = [*argv, *common, "--time-limit", f"{share:.0f}"]
            cmds.append("python -m cutile_diag optimize " + " ".join(
                a if " " not in a else f'"{a}"' for a in argv) + " --json")
            print(f"[loop_capture] {name}: --time-limit {share:.0f} s", flush=True)
            dest = out / name
            dest.mkdir(parents=True, exist_ok=True)
            res, note = suite.run_optimize(argv, repo, jenv, timeout, dest / "stderr.txt")
            state = repo / "cutile-diag-out" / "optimize" / kernel
            row = {"target": name, "note": note}
            if (state / "ledger.jsonl").exists():
                for f in ("ledger.jsonl", "perf_results.md"):
                    if (state / f).exists():
                        shutil.copy(state / f, dest / f)
                row["check"] = check_ledger(state)
                shutil.rmtree(state, ignore_errors=True)       # the next loop in this clone starts clean
            if res:
                row["result"] = {k: res.get(k) for k in ("stop_rule", "stop_reason", "speedup")}
            rows.append(row)
            print(f"[loop_capture] {name}: {note}; captured+diffed: "
                  f"{(row.get('check') or {}).get('every_iteration_captured_and_diffed')}", flush=True)
            if not args.dry_run:
                suite.sh(suite.GIT + ["checkout", "-q", "-f", branch], repo)
    finally:
        (out / "summary.json").write_text(json.dumps({"dry_run": args.dry_run, "signature_checks": sig,
                                                      "rows": rows, "commands": cmds}, indent=2, default=str))
        (out / "report.md").write_text(render(rows, args, started, cmds, sig))
        shutil.rmtree(work, ignore_errors=True)
    print((out / "report.md").read_text())
    sig_ok = all(r.get("tileir_equal", True) and r.get("correct", True) and "note" not in r for r in sig)
    return 0 if sig_ok and rows and all((r.get("check") or {}).get("every_iteration_captured_and_diffed")
                                        for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
