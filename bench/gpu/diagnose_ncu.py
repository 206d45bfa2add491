#!/usr/bin/env python
"""Issue 13 acceptance: `diagnose --ncu` on three TileGym ops, then the loop applies each op's
top automatic entry once and the measured effect is compared with the prediction.

    source .device/setup.sh
    python bench/gpu/diagnose_ncu.py --out $OUT/diagnose_ncu --tilegym /tmp/TileGym [--budget-s 300]
    python bench/gpu/diagnose_ncu.py --out /tmp/dn --tilegym /tmp/tg --dry-run      # CPU: plumbing only

Per op (rms_norm, softmax: two kernel variants at one shape; silu_and_mul: one):

1. ``cutile-diag diagnose tilegym:<op> --config PRIMARY [--config VARIANT] --ncu --json --out DIR``:
   capture from a run, time the configurations, profile PRIMARY with ``ncu --set full`` and read
   its rule results through ncu_report;
2. the top recommendation the loop can apply (a manual top entry is reported and skipped);
3. ``cutile-diag optimize <clone>/<file>::<kernel> --workload tilegym:<op> --configs PRIMARY
   --max-iterations 1 --only <ID> ...`` in a throw-away clone of the TileGym checkout (never
   modified), then the ledger's measured gain (t_before / t_after - 1) against the predicted
   range and expected gain.

Everything respects --budget-s: an item that would start after it is listed as skipped.
Output: summary.json (compact), report.md (table + exact commands), <op>/diagnose.json,
<op>/optimize.json, <op>/ledger.jsonl, <op>/*.stderr.txt.  --dry-run replaces the GPU: the
diagnosis is static with the committed ncu export (tests/diagnose/data/ncu_export_norm.json)
and the loop runs with --plan (locates the kernel, diagnoses, changes nothing).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from optimize_suite import GIT, current_branch, gpu_name, sh, tilegym_repo  # noqa: E402

# op -> (kernel file in the checkout, configurations: the diagnosed one first, then its variants,
#        the kernel that configuration launches when the run capture cannot say)
OPS = {
    "rms_norm": ("src/tilegym/ops/cutile/rms_norm.py", ["16384x4096-bf16-multiwave", "16384x4096-bf16-persistent"],
                 "_rms_norm_kernel_gather"),
    "softmax": ("src/tilegym/ops/cutile/softmax.py", ["4096x4096-f16", "4096x4096-f16-tma"], "_softmax_kernel"),
    "silu_and_mul": ("src/tilegym/ops/cutile/silu_and_mul.py", ["8192x2x8192-bf16"], "_silu_and_mul_kernel_row_wise"),
}
DRY_NCU = ROOT / "tests" / "diagnose" / "data" / "ncu_export_norm.json"


class Clock:
    def __init__(self, budget_s: float):
        self.t0, self.budget = time.monotonic(), budget_s

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)


def run(argv: list[str], cwd: Path, env: dict, timeout: float, log: Path) -> tuple[int | None, str, float]:
    t0 = time.monotonic()
    with open(log, "w") as err:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            from cutile_diag.procs import kill_group
            kill_group(p)
            p.communicate()
            return None, "", time.monotonic() - t0
    return p.returncode, out, time.monotonic() - t0


def last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def top_automatic(diag: dict) -> tuple[dict | None, dict | None]:
    """(the top recommendation, the top one the loop can apply)."""
    recs = diag.get("recommendations") or []
    return (recs[0] if recs else None), next((r for r in recs if r.get("automatic")), None)


def kernel_of(diag: dict) -> str | None:
    for f in diag.get("evidence") or []:
        if f.get("key") == "ir.kernel":
            return f.get("value")
    return None


def measured_step(state: Path) -> dict | None:
    """Iteration 1 of the loop's ledger, read with the loop's own reader."""
    from cutile_diag.diagnose.calibrate import steps_of
    from cutile_diag.ledger import Ledger
    if not (state / "ledger.jsonl").exists():
        return None
    steps = steps_of(Ledger.load(state), str(state / "ledger.jsonl"))
    return steps[0].to_json() if steps else None


def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for mod in ("torch", "cuda.tile"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            out[mod] = getattr(m, "__version__", "?")
        except Exception as e:   # reported, not fatal: the dry run has no CUDA torch
            out[mod] = f"unavailable ({type(e).__name__})"
    try:
        out["ncu"] = subprocess.run(["ncu", "--version"], capture_output=True, text=True,
                                    timeout=30).stdout.strip().splitlines()[-1]
    except Exception:
        out["ncu"] = "not on PATH"
    out["cutile-diag"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip() or "?"
    return out


def keep_export(capture: Path, dest: Path) -> str | None:
    """The report's export (rules, metrics, source hot spots) beside the results: what the rule
    parsing is tested on; the .ncu-rep itself is too large to commit."""
    found = sorted(capture.rglob("ncu-export.json"))
    if not found:
        return None
    import gzip
    data = found[0].read_bytes()
    target = dest / "ncu-export.json"
    if len(data) > 200_000:
        target = dest / "ncu-export.json.gz"
        target.write_bytes(gzip.compress(data))
    else:
        target.write_bytes(data)
    return target.name


def one_op(op: str, args, clock: Clock, env: dict, tg_repo: Path, out: Path, share_s: float) -> dict:
    rel, configs, default_kernel = OPS[op]
    op_end = time.monotonic() + share_s
    d = out / op
    d.mkdir(parents=True, exist_ok=True)
    row: dict = {"op": op, "configs": configs, "commands": []}
    # 1. diagnose --ncu
    dx = ["diagnose", f"tilegym:{op}", *[a for c in configs for a in ("--config", c)], "--json",
          "--out", str(d / "capture")]
    dx += ["--static", "--ncu", str(DRY_NCU)] if args.dry_run else ["--ncu"]
    row["commands"].append("cutile-diag " + shlex.join(dx))
    reused = Path(args.reuse_diagnosis) / op / "diagnose.json" if args.reuse_diagnosis else None
    if reused is not None and reused.is_file():
        # the diagnosis of an earlier run of this suite (same GPU): only the loop runs now
        so = reused.read_text()
        row["diagnosis_reused"] = str(reused)
        row["commands"][-1] += f"   (not run now: its result reused from {reused})"
    else:
        if clock.left() < 30:
            row["skipped"] = "budget: no time left for the diagnosis"
            return row
        rc, so, secs = run([sys.executable, "-m", "cutile_diag", *dx], tg_repo, env, min(clock.left(), 240.0),
                           d / "diagnose.stderr.txt")
        row["diagnose_s"] = round(secs, 1)
        row["ncu_export"] = keep_export(d / "capture", d)
        if rc != 0:
            row["error"] = f"diagnose: {'timed out' if rc is None else f'exit {rc}'}: {last_line(d / 'diagnose.stderr.txt')}"
            return row
    diag = json.loads(so)
    (d / "diagnose.json").write_text(json.dumps(diag))
    top, auto = top_automatic(diag)
    row["bottleneck"] = diag.get("bottleneck")
    row["ncu_rules"] = [{k: f.get(k) for k in ("rule", "title", "speedup_pct", "speedup_type", "entries")}
                        for f in diag.get("ncu_findings") or []]
    row["top"] = {k: (top or {}).get(k) for k in ("id", "name", "reason", "predicted_effect", "automatic")}
    facts = {f["key"]: f.get("value") for f in diag.get("evidence") or []}
    row["facts"] = {k: facts.get(k) for k in ("gpu.pct_of_roof", "gpu.pct_of_ceiling", "launch.grid_blocks",
                                              "gpu.variant_gain", "gpu.variant_spread", "gpu.variants",
                                              "ir.redundant_loads", "ir.reread_bytes_per_program", "ncu.rules")
                    if k in facts}
    if auto is None and not args.dry_run:
        row["skipped_loop"] = "no automatic entry to apply"
        return row
    if auto is not None and top is not auto:
        row["note"] = f"top entry {top['id']} is manual: the loop applies {auto['id']}, the top automatic one"
    if auto is not None:
        row["applied"] = {k: auto.get(k) for k in ("id", "name", "transform", "predicted_effect", "expected_gain",
                                                   "ncu")}
    kernel = kernel_of(diag)
    if not kernel:
        kernel = default_kernel
        row.setdefault("note", f"no run capture: the kernel {default_kernel} that {configs[0]} launches")
    src = tg_repo / rel
    if f"def {kernel}(" not in src.read_text():
        row["skipped_loop"] = f"kernel {kernel!r} is not defined in {rel}"
        return row
    # 2. the loop applies it once
    opt = ["optimize", f"{src}::{kernel}", "--workload", f"tilegym:{op}", "--configs", configs[0],
           "--max-iterations", "1", *(["--only", auto["id"]] if auto else []), "--rounds", "2", "--max-sweep", "2",
           "--budget", "100", "--rep-ms", "20", "--warmup-ms", "10", "--branch", f"cutile-perf-{op}-i13", "--json"]
    loop_s = min(clock.left(), op_end - time.monotonic())
    opt.append("--plan" if args.dry_run else f"--time-limit={max(loop_s - 5, 1):.0f}")
    row["commands"].append(f"(in the clone {tg_repo}) cutile-diag " + shlex.join(opt))
    if loop_s < 40:
        row["skipped_loop"] = f"budget: {max(loop_s, 0):.0f} s left for the loop"
        return row
    branch = current_branch(tg_repo)
    try:
        rc, so, secs = run([sys.executable, "-m", "cutile_diag", *opt], tg_repo, env, loop_s + 40,
                           d / "optimize.stderr.txt")
        row["optimize_s"] = round(secs, 1)
        if so.strip():
            (d / "optimize.json").write_text(so)
        if rc != 0:
            row["loop_error"] = f"optimize: {'timed out' if rc is None else f'exit {rc}'}: " \
                                f"{last_line(d / 'optimize.stderr.txt')}"
        state = tg_repo / "cutile-diag-out" / "optimize" / kernel
        step = measured_step(state)
        if (state / "ledger.jsonl").exists():
            (d / "ledger.jsonl").write_text((state / "ledger.jsonl").read_text())
        if step and auto is not None:
            pe = auto.get("predicted_effect") or {}
            m = step.get("measured")
            row["measured"] = step
            row["comparison"] = {
                "predicted_low": pe.get("low"), "predicted_high": pe.get("high"), "expected": pe.get("expected"),
                "measured": m,
                "within_range": None if m is None else bool(pe.get("low", 0) - 0.02 <= m <= pe.get("high", 0) + 0.02),
                "error_vs_expected": None if m is None or pe.get("expected") is None else round(m - pe["expected"], 4)}
    finally:
        sh(GIT + ["checkout", "-q", "-f", branch], tg_repo)
    return row


def pct(v) -> str:
    return f"{v:+.1%}" if isinstance(v, (int, float)) else "-"


def report(rows: list[dict], meta: dict) -> str:
    out = ["# diagnose --ncu on TileGym ops: top entry applied by the loop, predicted vs measured", "",
           f"- date: {meta['date']}; GPU: {meta['gpu']}; wall {meta['wall_s']:.0f} s of a {meta['budget_s']:.0f} s budget"
           + ("; **dry run (no GPU: static diagnosis, committed ncu export, loop --plan)**" if meta["dry_run"] else ""),
           f"- versions: {json.dumps(meta['versions'])}",
           f"- command: `{meta['command']}`", "",
           "| op | bottleneck | top entry | applied | predicted (expected) | measured | in range | ncu rules |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        top, app, cmp_ = r.get("top") or {}, r.get("applied") or {}, r.get("comparison") or {}
        pe = app.get("predicted_effect") or {}
        pred = f"{pct(pe.get('low'))} … {pct(pe.get('high'))} ({pct(pe.get('expected'))})" if pe else "-"
        rules = ", ".join(f"{x['rule']}" + (f" {x['speedup_pct']:.0f}%" if x.get("speedup_pct") else "")
                          for x in r.get("ncu_rules") or [])
        out.append(f"| {r['op']} | {r.get('bottleneck', '-')} | {top.get('id', '-')} | {app.get('id', '-')} | {pred} | "
                   f"{pct(cmp_.get('measured'))} | {cmp_.get('within_range', '-')} | {rules or '-'} |")
    out += ["", "## Details", ""]
    for r in rows:
        out.append(f"### {r['op']}")
        for k in ("skipped", "error", "note", "skipped_loop", "loop_error"):
            if r.get(k):
                out.append(f"- {k}: {r[k]}")
        if r.get("top"):
            out.append(f"- top: {r['top'].get('id')} {r['top'].get('name')}: {r['top'].get('reason')}")
        for k, v in (r.get("facts") or {}).items():
            out.append(f"- {k}: {v}")
        for c in r.get("commands", []):
            out.append(f"- `{c}`")
        out.append("")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", required=True, help="TileGym checkout root (src/tilegym); never modified")
    ap.add_argument("--budget-s", type=float, default=300.0, help="total wall budget; later items are skipped")
    ap.add_argument("--only", help="comma-separated ops (default: rms_norm,softmax,silu_and_mul)")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: static diagnosis + committed ncu export, loop --plan")
    ap.add_argument("--reuse-diagnosis", metavar="DIR",
                    help="an earlier run's --out: take <op>/diagnose.json from it instead of diagnosing again")
    args = ap.parse_args()
    clock = Clock(args.budget_s)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    checkout = Path(args.tilegym).resolve()
    if not (checkout / "src" / "tilegym").is_dir():
        print(f"diagnose_ncu: error: {checkout} has no src/tilegym", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="cutile-diag-i13-"))
    tg = tilegym_repo(work, checkout)
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    env["PYTHONPATH"] = os.pathsep.join([str(tg / "src"), str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env["TILEGYM_DISABLE_AUTOTUNE"] = "1"
    env["COLUMNS"] = "160"
    ops = [o.strip() for o in (args.only or ",".join(OPS)).split(",") if o.strip()]
    rows = []
    try:
        for op in ops:
            if op not in OPS:
                rows.append({"op": op, "error": f"unknown op (known: {', '.join(OPS)})"})
                continue
            print(f"[diagnose_ncu] {op}: {clock.left():.0f} s left", flush=True)
            rows.append(one_op(op, args, clock, env, tg, out, clock.left() / (len(ops) - ops.index(op))))
            print(f"[diagnose_ncu] {op}: " + json.dumps({k: rows[-1].get(k) for k in
                                                         ("bottleneck", "comparison", "error", "skipped_loop")}),
                  flush=True)
    finally:
        import shutil
        meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "gpu": gpu_name(), "dry_run": args.dry_run,
                "budget_s": args.budget_s, "wall_s": time.monotonic() - clock.t0, "versions": versions(),
                "command": "python " + shlex.join(["bench/gpu/diagnose_ncu.py", *sys.argv[1:]])}
        (out / "summary.json").write_text(json.dumps({"meta": meta, "ops": rows}, separators=(",", ":")))
        (out / "report.md").write_text(report(rows, meta))
        shutil.rmtree(work, ignore_errors=True)
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
