#!/usr/bin/env python3
"""Acceptance of issue 31: the roof at every size, measured on the H200.

On the GPU machine (repository root)::

    source .device/setup.sh && python bench/gpu/roof_curve.py --out $OUT/roof_curve --tilegym /tmp/TileGym

On a CPU (the same steps, the H200 preset's committed curve standing in for the measurement)::

    python bench/gpu/roof_curve.py --out /tmp/roof_curve --dry-run

Steps (each a recorded command with its timeout):
  1. environment (nvidia-smi, torch, cuda-tile)
  2. ``cutile-diag peaks --refresh --json`` in a fresh cache folder: the ceilings and the size curve
     (read / write / copy over 256 KiB .. 4 GiB, L2 flushed and warm, the launch floor with and
     without CUDA graphs); the curve's own measuring time must be < 30 s
  3. ``nvidia-h200.json``: the curve as the H200 preset's file (provenance: this run), and its
     comparison with issue #31's figures (copy, L2 flushed: within 10 %?)
  4. ``cutile-diag peaks --no-measure --plot curve.svg`` (the cached curve, drawn)
  5. ``cutile-diag roofline row_lse.py::row_lse`` at bf16 16384x1024 and 256x1024, measured: % of
     attainable beside % of the measured ceiling, launch-bound at 256 rows?
  6. ``pytest -m gpu tests/roofline/test_attainable.py``
  7. ``cutile-diag campaign --plan --json`` over two of TileGym's silu_and_mul perf tests (``--tilegym``):
     the survey times their pytorch twins; per kernel % of attainable, bound and the time against
     pytorch (``--dry-run``: the demo repository, not executed: the plan's attainable times only)

Writes into --out: results.json, results.md, nvidia-h200.json (copy it to
src/cutile_diag/roofline/curves/nvidia-h200.json to commit the measured curve), peaks.json,
curve.svg, campaign_plan.json, run.log.  Expected wall time on an H200: about 3 minutes (the log-sum-exp runs and the
campaign's survey compile kernels; the curve itself < 30 s).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
from pathlib import Path

from harness import LOG, ROOT, elapsed, log, run_captured
from harness import child_env as _child_env

sys.path.insert(0, str(ROOT / "src"))
from cutile_diag.roofline.curve import BandwidthCurve, compare, write_preset  # noqa: E402

# issue #31's measurement on an H200 (device copy, L2 flushed, CUDA-graph replays): bytes moved -> TB/s
ISSUE = {1e6: 0.76, 4e6: 1.60, 16e6: 2.60, 33.6e6: 2.93, 64e6: 2.55, 128e6: 4.01, 256e6: 4.13, 1e9: 4.24, 4e9: 4.30}
ISSUE_FLOOR_MS = 1.08e-3
WITHIN = 0.10
CURVE_LIMIT_S = 30.0
LSE = "src/cutile_diag/examples/row_lse.py::row_lse"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cutile_diag", *args]


def step(name: str, cmd: list[str], timeout: float, env: dict, results: dict) -> tuple[object, str]:
    log(f"$ {' '.join(cmd)}")
    rc, out, err, secs = run_captured(cmd, timeout, env)
    results["steps"].append({"step": name, "command": " ".join(cmd), "rc": rc, "seconds": round(secs, 2),
                             "stderr_tail": err.strip().splitlines()[-3:] if rc != 0 else []})
    log(f"  {name}: rc={rc} in {secs:.1f} s")
    if rc != 0:
        for ln in (err.strip().splitlines() or out.strip().splitlines())[-6:]:
            log(f"  | {ln}")
    return rc, out


def lse_point(rows: int, env: dict, dry: bool, results: dict) -> dict | None:
    args = ["roofline", LSE, "--arg", f"X=bf16[{rows},1024]", "--arg", f"Out=f32[{rows}]", "--arg", "TILE_N=1024",
            "--grid", str(rows), "--json"]
    if dry:          # the issue's recorded latencies on the preset
        args += ["--device", "h200", "--latency-ms", "0.0242" if rows == 16384 else "0.0024"]
    rc, out = step(f"lse {rows}x1024", cli(*args), 90, env, results)
    try:
        p = json.loads(out)["results"][0]["point"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not p:
        return None
    keep = ("latency_ms", "bytes", "bound", "pct_measured", "pct_attainable", "attainable_tbps", "attainable_ms",
            "floor_ms", "achieved_tbps", "verdict")
    return {k: p.get(k) for k in keep}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true", help="CPU: the preset's committed curve instead of a measurement")
    ap.add_argument("--tilegym", help="a TileGym checkout (step 7: a campaign plan over its silu_and_mul perf tests)")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="roof-curve-cache-"))
    env = {**_child_env(), "CUTILE_DIAG_CACHE_DIR": str(cache)}
    results: dict = {"issue": 31, "dry_run": args.dry_run, "steps": [],
                     "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])}

    # 1. environment
    rc, smi, _e, _s = run_captured(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,memory.total",
                                    "--format=csv,noheader"], 30, env)
    results["gpu"] = smi.strip() if rc == 0 else None
    rc, ver, _e, _s = run_captured([sys.executable, "-c", "import torch, importlib.metadata as m; "
                                    "print(torch.__version__, m.version('cuda-tile'))"], 60, env)
    results["versions"] = ver.strip()
    log(f"GPU: {results['gpu']}; torch, cuda-tile: {results['versions']}")

    # 2. the ceilings and the curve, measured (the curve's seconds are its own)
    peaks_args = ["peaks", "--json"] + (["--device", "h200"] if args.dry_run else ["--refresh"])
    rc, text = step("peaks", cli(*peaks_args), 120, env, results)
    doc = json.loads(text) if rc == 0 else {}
    (out / "peaks.json").write_text(json.dumps(doc, indent=1))
    ceil = doc.get("ceilings") or {}
    if not ceil.get("curve"):
        log("no curve measured: stopping")
        (out / "results.json").write_text(json.dumps(results, indent=1))
        (out / "run.log").write_text("\n".join(LOG) + "\n")
        return 1
    curve = BandwidthCurve.from_json(ceil["curve"])
    device = doc["device"]["name"]
    results["curve_seconds"] = curve.seconds
    results["curve_under_30s"] = curve.seconds is not None and curve.seconds < CURVE_LIMIT_S
    results["floor_ms"], results["floor_eager_ms"] = curve.floor_ms, curve.floor_eager_ms

    # 3. the preset file (provenance: this run) and the comparison with the issue's figures
    if not args.dry_run:
        curve.source = (f"measured by bench/gpu/roof_curve.py (cutile-diag peaks) on {results['gpu']}; "
                        f"torch, cuda-tile {results['versions']}; {results['date']}: " + curve.source)
    preset_file = write_preset(curve, device, out / (device.lower().replace(" ", "-") + ".json"))
    rows = compare(curve, {n: v * 1e12 for n, v in ISSUE.items()})
    for r in rows:
        r["within_10pct"] = r["ratio"] is not None and abs(r["ratio"] - 1) <= WITHIN
    results["comparison"] = rows
    results["floor_vs_issue"] = curve.floor_ms / ISSUE_FLOOR_MS if curve.floor_ms else None
    results["all_within_10pct"] = all(r["within_10pct"] for r in rows)
    results["preset_file"] = preset_file.name

    # 4. the cached curve, drawn
    plot_args = ["peaks", "--plot", str(out / "curve.svg")] + (["--device", "h200"] if args.dry_run else ["--no-measure"])
    step("plot", cli(*plot_args), 60, env, results)

    # 5. the log-sum-exp kernel at 33.6 MB and 0.5 MB against what is attainable at its size
    results["lse"] = {str(n): lse_point(n, env, args.dry_run, results) for n in (16384, 256)}

    # 6. the GPU tests of this issue
    rc, text = step("pytest -m gpu", [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                                      "tests/roofline/test_attainable.py"], 120, env, results)
    results["gpu_tests"] = (text.strip().splitlines() or ["-"])[-1]

    # 7. a campaign's plan: % of attainable, bound, and (executed) the pytorch twins' time
    results["campaign"] = campaign_plan(args, out, results)

    results["seconds"] = round(elapsed(), 1)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(markdown(results))
    (out / "run.log").write_text("\n".join(LOG) + "\n")
    log(f"done in {elapsed():.0f} s: curve {curve.seconds} s (< 30 s: {results['curve_under_30s']}), all within "
        f"10 %: {results['all_within_10pct']}; preset file {preset_file}")
    return 0


SILU = ["tests/ops/test_silu_and_mul.py", "-k", "test_perf and cutile and float16 and (512 or 8192)"]


def campaign_plan(args, out: Path, results: dict) -> list[dict] | None:
    work = Path(tempfile.mkdtemp(prefix="roof-campaign-"))
    if args.dry_run:
        from cutile_diag.campaign.demo import make_repo, survey_command
        cwd, cmd, extra = make_repo(work), survey_command(), ["--dry-run", "--device", "h200"]
    elif args.tilegym:
        cwd, cmd, extra = Path(args.tilegym), [sys.executable, "-m", "pytest", *SILU, "-q", "-p",
                                               "cutile_diag.pytest_plugin"], []
    else:
        log("step 7 skipped: no --tilegym")
        return None
    argv = cli("campaign", "--plan", "--json", "--out", str(work / "campaign"), *extra, "--", *cmd)
    log(f"$ (in {cwd}) {' '.join(argv)}")
    rc, text, err, secs = run_captured(argv, 150, _child_env(args.tilegym), cwd=cwd)
    results["steps"].append({"step": "campaign --plan", "command": " ".join(argv), "rc": rc, "seconds": round(secs, 2),
                             "stderr_tail": err.strip().splitlines()[-3:] if rc != 0 else []})
    log(f"  campaign --plan: rc={rc} in {secs:.1f} s")
    try:
        d = json.loads(text)
    except ValueError:
        for ln in err.strip().splitlines()[-6:]:
            log(f"  | {ln}")
        return None
    (out / "campaign_plan.json").write_text(json.dumps(d, indent=1))
    rows = []
    for k in d["plan"]["kernels"]:
        ref = k.get("reference") or {}
        pcts = [c["pct_attainable"] for c in k["configs"] if c.get("pct_attainable") is not None]
        rows.append({"kernel": k["name"], "gpu_ms": k["gpu_ms"], "attainable_ms": k["attainable_ms"], "bound": k["bound"],
                     "pct_attainable": pcts, "expected_gain": k["expected_gain"], "reference_ms": ref.get("ms"),
                     "vs_reference": ref.get("ratio"), "reference_tests": len(ref.get("tests") or {})})
    return rows


def markdown(r: dict) -> str:
    f = lambda v, s: "-" if v is None else format(v, s)   # noqa: E731
    us = lambda ms: "-" if ms is None else f"{ms * 1e3:.2f}"   # noqa: E731
    md = [f"# Issue 31: the roof at every size ({'dry run, preset curve' if r['dry_run'] else 'H200'})", "",
          f"- date: {r['date']}", f"- GPU, driver, max SM clock, memory: {r['gpu']}",
          f"- torch, cuda-tile: {r['versions']}", f"- command: `{r['command']}`",
          f"- curve measured in {f(r['curve_seconds'], '.1f')} s (< 30 s: {r['curve_under_30s']}); launch floor "
          f"{us(r['floor_ms'])} µs with CUDA graphs (issue: 1.08 µs), {us(r['floor_eager_ms'])} µs eager", "",
          "## Copy bandwidth, L2 flushed, against issue #31's figures", "",
          "| bytes moved | issue TB/s | measured TB/s | ratio | within 10 % |", "|---|---|---|---|---|"]
    for row in r["comparison"]:
        md.append(f"| {row['bytes'] / 1e6:g} MB | {row['reference_tbps']:.2f} | {f(row['tbps'], '.2f')} | "
                  f"{f(row['ratio'], '.3f')} | {'yes' if row['within_10pct'] else 'NO'} |")
    md += ["", "## Log-sum-exp (bf16 x 1024) against what is attainable at its size", "",
           "| rows | MB | ms | bound | % measured ceiling | % attainable | attainable TB/s |", "|---|---|---|---|---|---|---|"]
    for rows, p in r["lse"].items():
        if p:
            md.append(f"| {rows} | {p['bytes'] / 1e6:.2f} | {p['latency_ms']:.4f} | {p['bound']} | "
                      f"{f(p['pct_measured'], '.1f')} | {f(p['pct_attainable'], '.1f')} | {f(p['attainable_tbps'], '.2f')} |")
        else:
            md.append(f"| {rows} | - | - | failed | - | - | - |")
    if r.get("campaign") is not None:
        md += ["", "## A campaign's plan (TileGym silu_and_mul perf tests; dry run: the demo repository)", "",
               "| kernel | GPU ms | attainable ms | % attainable | bound | expected gain | pytorch ms | time / pytorch |",
               "|---|---|---|---|---|---|---|---|"]
        for k in r["campaign"]:
            pc = k["pct_attainable"]
            md.append(f"| {k['kernel']} | {f(k['gpu_ms'], '.4f')} | {f(k['attainable_ms'], '.4f')} | "
                      + (f"{min(pc):.0f}-{max(pc):.0f}" if pc else "-") + f" | {k['bound'] or '-'} | "
                      f"{k['expected_gain'] * 100:.1f}% | {f(k['reference_ms'], '.4f')} | {f(k['vs_reference'], '.2f')} |")
    md += ["", f"GPU tests: {r['gpu_tests']}", "", "Steps:", ""]
    md += [f"- `{s['command']}`: rc {s['rc']}, {s['seconds']} s" for s in r["steps"]]
    md += ["", f"To commit the measured curve: copy `{r['preset_file']}` to "
           "`src/cutile_diag/roofline/curves/nvidia-h200.json`."]
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
