#!/usr/bin/env python
"""Run `cutile-diag optimize` on the naive example kernels and two TileGym kernels; write the
tables, ledgers and a short report (final vs starting latency, and vs the roofline bound).

    unset CUDA_HOME
    python bench/gpu/optimize_suite.py --out "$OUT" [--tilegym /path/to/TileGym] \
        [--only gather_scale,vector_add] [--iterations 2] [--deadline-s 540]

Every kernel is optimised in a throw-away git repository (a copy of the example file, or a
local clone of the TileGym checkout, which is never modified), with a per-kernel iteration
cap, a per-iteration budget, small timing budgets and one configuration per kernel, so the
whole suite fits in about 8 minutes of GPU time.  Kernels that would start after the
deadline are skipped and listed as such.  Output under --out:

    report.md, summary.json, <kernel>/perf_results.md, <kernel>/ledger.jsonl, <kernel>/stderr.txt
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, child_env

sys.path.insert(0, str(ROOT / "src"))

# name -> (example file, kernel, workload, configuration)
EXAMPLES = {
    "gather_scale": ("gather_scale.py", "gather_scale", "examples:gather_scale", "16M-f32"),
    "vector_add": ("vector_add.py", "vector_add", "examples:vector_add", "16M-f32"),
    "matmul_f32": ("matmul.py", "matmul_f32", "examples:matmul_f32", "2048-f32"),
    "softmax": ("softmax.py", "softmax", "examples:softmax", "32768x1024-f16"),
    # spec-less, in the styles of real libraries (2-D gathers in two passes; NEG_INF-padded row loads)
    "row_norm": ("row_norm.py", "row_norm", "examples:row_norm", "16384x1000-f16"),
    "row_lse": ("row_lse.py", "row_lse", "examples:row_lse", "16384x3000-f32"),
    # issue 21: three passes re-reading the row through gathers (A+W); a persistent grid of 2 blocks/SM
    "multipass_norm": ("multipass_norm.py", "multipass_norm", "examples:multipass_norm", "16384x4096-f16"),
    "persistent_rows": ("persistent_rows.py", "persistent_rows", "examples:persistent_rows", "65536x1000-f16"),
    "matmul": ("matmul.py", "matmul", "examples:matmul", "4096-f16"),
}
# name -> (file in the checkout, kernel, workload, configuration, class)
TILEGYM = {
    "tilegym_silu_and_mul": ("src/tilegym/ops/cutile/silu_and_mul.py", "_silu_and_mul_kernel_row_wise",
                             "tilegym:silu_and_mul", "8192x2x8192-bf16", "memory-bound"),
    "tilegym_matmul": ("src/tilegym/ops/cutile/matmul.py", "_matmul_kernel", "tilegym:matmul", "4096-f16",
                       "GEMM"),
}
GIT = ["git", "-c", "user.name=cutile-diag-suite", "-c", "user.email=suite@localhost"]


def sh(args, cwd, **kw):
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True, **kw)


def example_repo(work: Path, name: str) -> Path:
    from cutile_diag.examples import EXAMPLES_DIR
    f = EXAMPLES[name][0]
    repo = work / name
    repo.mkdir(parents=True)
    shutil.copy(EXAMPLES_DIR / f, repo / f)
    (repo / ".gitignore").write_text("cutile-diag-out/\n__pycache__/\n")
    sh(GIT + ["init", "-q", "-b", "main"], repo)
    sh(GIT + ["add", "-A"], repo)
    sh(GIT + ["commit", "-qm", f"naive {name}"], repo)
    return repo


def tilegym_repo(work: Path, checkout: Path) -> Path:
    repo = work / "TileGym"
    # a checkout nested inside another repository (e.g. a copy under this repo) is not a repo itself
    top = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    is_git = top.returncode == 0 and Path(top.stdout.strip()).resolve() == checkout.resolve()
    if is_git:
        sh(GIT + ["clone", "-q", "--local", "--no-hardlinks", str(checkout), str(repo)], work)
    else:
        shutil.copytree(checkout, repo, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
        sh(GIT + ["init", "-q", "-b", "main"], repo)
        sh(GIT + ["add", "-A"], repo)
        sh(GIT + ["commit", "-qm", "TileGym snapshot"], repo)
    # the loop's state folder must not show as an untracked change
    with open(repo / ".git" / "info" / "exclude", "a") as f:
        f.write("\ncutile-diag-out/\n")
    return repo


def current_branch(repo: Path) -> str:
    return sh(["git", "rev-parse", "--abbrev-ref", "HEAD"], repo).stdout.strip()


def run_optimize(argv, cwd: Path, env: dict, timeout: float, log: Path) -> tuple[dict | None, str]:
    t0 = time.monotonic()
    with open(log, "w") as err:
        p = subprocess.Popen([sys.executable, "-m", "cutile_diag", "optimize", *argv, "--json"], cwd=cwd, env=env,
                             stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return None, f"killed after {timeout:.0f} s (the ledger holds what finished)"
    wall = time.monotonic() - t0
    if p.returncode != 0:
        lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
        return None, f"exit {p.returncode} after {wall:.0f} s: {lines[-1] if lines else 'no output'}"
    try:
        return json.loads(out), f"{wall:.0f} s"
    except json.JSONDecodeError:
        return None, "unreadable JSON result"


def _q(v):
    if isinstance(v, dict):
        v = v.get("value")
    return float(v) if isinstance(v, (int, float)) and v and math.isfinite(v) else None


def roof_bound_ms(point: dict) -> float | None:
    """Latency at the roof: max(bytes / bandwidth roof, FLOPs / compute roof), measured ceilings first."""
    bw = _q(point.get("roof_bw_measured")) or _q(point.get("roof_bw_datasheet"))
    fl = _q(point.get("roof_flops_measured")) or _q(point.get("roof_flops_datasheet"))
    b, f = point.get("bytes") or 0.0, point.get("flops") or 0.0
    ts = [x for x in ((b / bw) if bw and b else None, (f / fl) if fl and f else None) if x]
    return max(ts) * 1e3 if ts else None


def summarize(name: str, res: dict | None, note: str, state: Path | None, dest: Path) -> dict:
    row = {"kernel": name, "note": note}
    if state is not None and (state / "ledger.jsonl").exists():
        dest.mkdir(parents=True, exist_ok=True)
        for f in ("perf_results.md", "ledger.jsonl"):
            if (state / f).exists():
                shutil.copy(state / f, dest / f)
        recs = [json.loads(ln) for ln in (state / "ledger.jsonl").read_text().splitlines() if ln.strip()]
        its = [r for r in recs if r.get("type") == "iteration"]
        kept = [r for r in its if r["status"] == "keep"]
        base = next((r for r in its if r["iteration"] == 0), None)
        final = kept[-1] if kept else None
        stops = [r for r in recs if r.get("type") == "stop"]
        row.update({"iterations": len(its) - 1 if its else 0,
                    "statuses": [r["status"] for r in its],
                    "steps": [f"{r['iteration']}: {r['optimization']} [{r['status']}]" for r in its[1:]],
                    "stop": stops[-1]["reason"] if stops else None})
        if base and final:
            row.update({"baseline_ms": base["latency_ms"], "final_ms": final["latency_ms"],
                        "speedup": base["latency_ms"] / final["latency_ms"] if final["latency_ms"] else None})
            for label, rec in (("baseline", base), ("final", final)):
                pts = rec.get("roofline") or {}
                if pts:
                    c, p = next(iter(pts.items()))
                    bound = roof_bound_ms(p)
                    lat = (rec.get("configs") or {}).get(c, {}).get("median_ms") or p.get("latency_ms")
                    row[f"{label}_roof"] = {"config": c, "bound": p.get("bound"), "pct_of_roof": p.get("pct_of_roof"),
                                            "roof_ms": bound, "latency_ms": lat,
                                            "x_roof": (lat / bound) if (lat and bound) else None,
                                            "valid": p.get("valid")}
                elif rec.get("roofline_note"):
                    row[f"{label}_roof"] = {"note": rec["roofline_note"]}
    if res:
        row["result"] = {k: res.get(k) for k in ("stop_rule", "stop_reason", "kept_commit", "speedup")}
    return row


def report(rows: list[dict], args, started: float) -> str:
    out = ["# cutile-diag optimize — GPU suite", "",
           f"- date: {time.strftime('%Y-%m-%d %H:%M:%S')}; wall {time.monotonic() - started:.0f} s; "
           f"iteration cap {args.iterations} per kernel, rounds {args.rounds}, sweep <= {args.max_sweep}",
           f"- GPU: {gpu_name()}", "",
           "| kernel | baseline ms | final ms | speedup | % of roof (start → end) | final / roof bound | iterations | stop |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def pct(key):
            v = (r.get(key) or {}).get("pct_of_roof")
            return f"{v:.0f}%" if isinstance(v, (int, float)) else "-"
        xr = (r.get("final_roof") or {}).get("x_roof")
        out.append("| {k} | {b} | {f} | {s} | {p0} → {p1} | {x} | {n} | {st} |".format(
            k=r["kernel"], b=f"{r['baseline_ms']:.6f}" if r.get("baseline_ms") else "-",
            f=f"{r['final_ms']:.6f}" if r.get("final_ms") else "-",
            s=f"{r['speedup']:.3f}x" if r.get("speedup") else "-", p0=pct("baseline_roof"), p1=pct("final_roof"),
            x=f"{xr:.2f}x" if xr else "-", n=r.get("iterations", "-"),
            st=(r.get("stop") or r.get("note") or "-").replace("|", "/")[:120]))
    out += ["", "## Steps", ""]
    for r in rows:
        out.append(f"### {r['kernel']}")
        out.append(f"- {r.get('note')}")
        for s in r.get("steps", []):
            out.append(f"- {s}")
        out.append("")
    return "\n".join(out) + "\n"


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip() or "?"
    except Exception:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "optimize-suite-out"))
    ap.add_argument("--tilegym", help="path to a TileGym checkout (its tilegym package must import)")
    ap.add_argument("--only", help="comma-separated kernel names (default: all)")
    ap.add_argument("--iterations", type=int, default=2, help="iteration cap per kernel (default 2)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-sweep", type=int, default=2)
    ap.add_argument("--budget", type=float, default=150.0, help="per-iteration budget, s")
    ap.add_argument("--deadline-s", type=float, default=480.0, help="start no kernel after this many seconds")
    ap.add_argument("--kernel-timeout", type=float, default=200.0, help="kill one kernel's loop after this many s")
    args = ap.parse_args()
    started = time.monotonic()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = child_env()
    names = list(EXAMPLES) + (list(TILEGYM) if args.tilegym else [])
    if args.only:
        want = [n.strip() for n in args.only.split(",") if n.strip()]
        names = [n for n in names if n in want]
    common = ["--max-iterations", str(args.iterations), "--rounds", str(args.rounds), "--max-sweep",
              str(args.max_sweep), "--budget", str(args.budget), "--rep-ms", "30", "--warmup-ms", "20"]
    rows = []
    work = Path(tempfile.mkdtemp(prefix="cutile-diag-suite-"))
    tg_repo = None
    try:
        for name in names:
            if time.monotonic() - started > args.deadline_s:
                rows.append({"kernel": name, "note": "skipped: the suite's deadline was reached"})
                continue
            dest = out / name
            dest.mkdir(parents=True, exist_ok=True)
            left = args.deadline_s + 90 - (time.monotonic() - started)
            timeout = max(60.0, min(args.kernel_timeout, left))
            if name in EXAMPLES:
                f, kernel, wl, cfg = EXAMPLES[name]
                repo = example_repo(work, name)
                argv = [f"{repo / f}::{kernel}", "--workload", wl, "--configs", cfg, *common]
                kenv = env
            else:
                f, kernel, wl, cfg, _ = TILEGYM[name]
                if tg_repo is None:
                    tg_repo = tilegym_repo(work, Path(args.tilegym).resolve())
                    tg_branch = current_branch(tg_repo)
                kenv = dict(env)
                kenv["PYTHONPATH"] = os.pathsep.join([str(tg_repo / "src"), env["PYTHONPATH"]])
                kenv["TILEGYM_DISABLE_AUTOTUNE"] = "1"    # the loop's occupancy steps must not be re-tuned away
                chk = subprocess.run([sys.executable, "-c", "import tilegym, tilegym.ops"], env=kenv, cwd=tg_repo,
                                     capture_output=True, text=True, timeout=180)
                if chk.returncode != 0:
                    rows.append({"kernel": name, "note": "skipped: tilegym does not import: "
                                 + (chk.stderr.strip().splitlines() or ["?"])[-1]})
                    continue
                repo = tg_repo
                argv = [f"{repo / f}::{kernel}", "--workload", wl, "--configs", cfg, "--branch",
                        f"cutile-perf-{name}", *common]
            print(f"[suite] {name}: timeout {timeout:.0f} s", flush=True)
            res, note = run_optimize(argv, repo, kenv, timeout, dest / "stderr.txt")
            state = repo / "cutile-diag-out" / "optimize" / kernel
            rows.append(summarize(name, res, note, state, dest))
            print(f"[suite] {name}: {note}; " + json.dumps({k: rows[-1].get(k) for k in
                                                             ("baseline_ms", "final_ms", "speedup", "stop")}),
                  flush=True)
            if tg_repo is not None and repo == tg_repo:
                # the next TileGym kernel starts from the checkout's own commit, on a clean tree
                sh(GIT + ["checkout", "-q", "-f", tg_branch], tg_repo)
    finally:
        (out / "summary.json").write_text(json.dumps(rows, indent=2))
        (out / "report.md").write_text(report(rows, args, started))
        shutil.rmtree(work, ignore_errors=True)
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
