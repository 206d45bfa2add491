#!/usr/bin/env python3
"""Roofline / peaks / noise suite for one GPU session (issue 4). Runs in well under 6 minutes.

Usage (repository root, on the GPU machine)::

    OUT=/some/dir [TILEGYM_DIR=/path/to/TileGym] python bench/gpu/roofline_suite.py [--budget-s 330]

Steps, each a recorded command with its own timeout; optional ones are skipped once the
time budget is spent:
  1. environment (nvidia-smi, torch, cuda-tile, tileiras, tilegym)
  2. ``cutile-diag peaks --json --refresh``
  3. ``cutile-diag roofline --json`` on examples:matmul (GEMM), examples:matmul_tuned,
     examples:vector_add / examples:softmax (memory-bound), tilegym:softmax, tilegym:rms_norm
     (and tilegym:matmul when time allows), with one roofline chart for examples and one for TileGym
  4. noise study: the same kernel measured 10 times in one process (examples:vector_add 64M
     and examples:matmul 4096), rel_std per run and the spread of the medians
  5. ``--ncu`` on one GEMM and one memory-bound configuration (when ncu is on PATH)
  6. TileGym perf tests through the plugin: ``pytest tests/ops/test_rms_norm.py -k "test_perf and cutile"
     --print-record`` in $TILEGYM_DIR (when given)

Writes at most 6 files into $OUT: results.json, results.md, suite.log, roofline_examples.svg,
roofline_tilegym.svg, tilegym_perf.log.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from harness import LOG, ROOT, elapsed, log, run_captured
from harness import child_env as _child_env

sys.path.insert(0, str(ROOT / "src"))      # the checkout's cutile_diag, installed or not


def child_env() -> dict:
    return _child_env(os.environ.get("TILEGYM_DIR"))


def run(cmd: list[str], timeout: float, cwd: Path | None = None) -> dict:
    shown = " ".join(shlex.quote(c) for c in cmd)
    log(f"$ {shown}")
    rc, out, err, wall = run_captured(cmd, timeout, child_env(), cwd)
    log(f"  -> rc={rc} in {wall:.1f}s")
    if err.strip():
        LOG.append("  stderr: " + err.strip()[-3000:])
    return {"command": shown, "rc": rc, "wall_s": wall, "stdout": out, "stderr": err}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cutile_diag", *args]


def parse_json(res: dict):
    try:
        return json.loads(res["stdout"])
    except (json.JSONDecodeError, TypeError):
        return None


# -- noise study: called in a killable subprocess through run_isolated ----------------------

def noise_study(workload: str, config: str, runs: int = 10, rep_ms: float = 100.0) -> dict:
    from cutile_diag.harness import BenchOptions, noise_study as summarize_noise
    from cutile_diag.measure import measure_config
    from cutile_diag.workloads import load_workload
    wl = load_workload(workload)
    cfg = wl.config(config)
    opts = BenchOptions(warmup_ms=100.0, rep_ms=rep_ms)
    stats, clocks = [], []
    for i in range(runs):
        r = measure_config(wl, cfg, opts, check=(i == 0), seed=i)
        if not r.ok:
            return {"error": f"run {i}: {r.status}: {r.error}"}
        stats.append(r.stats)
        clocks.append((r.measurement.get("observed") or {}).get("sm_clock_mhz"))
    ns = summarize_noise(stats)
    return {"workload": workload, "config": config, "study": ns.to_json(),
            "runs": [s.record() for s in stats], "sm_clock_mhz": clocks}


def environment() -> dict:
    env: dict = {}
    smi = run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit",
               "--format=csv,noheader"], 30)
    env["nvidia_smi"] = smi["stdout"].strip() or smi["stderr"].strip()
    probe = run([sys.executable, "-c", (
        "import json, importlib.metadata as md\n"
        "out = {}\n"
        "import torch; out['torch'] = torch.__version__; out['cuda'] = torch.cuda.is_available()\n"
        "out['device'] = torch.cuda.get_device_name() if out['cuda'] else None\n"
        "for p in ('cuda-tile', 'nvidia-cuda-tileiras', 'tilegym', 'cutile-diag'):\n"
        "    try: out[p] = md.version(p)\n"
        "    except md.PackageNotFoundError: out[p] = None\n"
        "try:\n    import cuda.tile; out['cuda.tile'] = 'ok'\nexcept Exception as e: out['cuda.tile'] = repr(e)\n"
        "try:\n    import tilegym.ops; out['tilegym_import'] = 'ok'\nexcept Exception as e: out['tilegym_import'] = repr(e)\n"
        "from cutile_diag.toolchain import have_tool\n"
        "out['tools'] = {t: have_tool(t) for t in ('tileiras', 'tileirdisasm', 'ncu')}\n"
        "eps = md.entry_points(group='pytest11')\n"
        "out['plugin_entry_point'] = any(e.value == 'cutile_diag.pytest_plugin' for e in eps)\n"
        "print(json.dumps(out))\n")], 120)
    env.update(parse_json(probe) or {"probe_error": probe["stderr"][-2000:]})
    return env


def md_table(rows: list[dict], cols: list[tuple[str, str]]) -> str:
    head = "| " + " | ".join(c for c, _ in cols) + " |\n|" + "|".join("---" for _ in cols) + "|\n"
    return head + "".join("| " + " | ".join(str(r.get(k, "")) for _, k in cols) + " |\n" for r in rows)


def fmt(v, spec=".3g"):
    if v is None:
        return "-"
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return str(v)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop optional steps after this many seconds")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or (ROOT / "cutile-diag-out" / "roofline-suite"))
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"steps": {}, "commands": []}

    def record(name, res, parsed=None):
        results["commands"].append({"step": name, "command": res["command"], "rc": res["rc"],
                                    "wall_s": round(res["wall_s"], 1)})
        results["steps"][name] = parsed if parsed is not None else {"rc": res["rc"], "tail": res["stdout"][-2000:],
                                                                    "stderr": res["stderr"][-2000:]}

    log(f"out: {out}")
    results["environment"] = environment()
    env = results["environment"]
    if not env.get("cuda"):
        log("no CUDA GPU visible: nothing to measure")
    # 2. peaks
    r = run(cli("peaks", "--json", "--refresh"), 180)
    record("peaks", r, parse_json(r))
    r2 = run(cli("peaks"), 120)                                   # the rich table, from the cache
    results["peaks_table"] = r2["stdout"]
    # 3. roofline
    plan = [
        ("examples:matmul", ["4096-f16", "8192-f16"], "roofline_examples.svg", True),
        ("examples:matmul_tuned", ["4096-f16"], None, True),
        ("examples:vector_add", ["16M-f32", "64M-f32"], None, True),
        ("examples:softmax", ["32768x1024-f16"], None, True),
        ("tilegym:softmax", ["4096x4096-f16-tma", "4096x4096-f16"], "roofline_tilegym.svg", True),
        ("tilegym:rms_norm", ["16384x4096-bf16-persistent", "16384x4096-bf16-multiwave"], None, True),
        ("tilegym:matmul", ["4096-f16"], None, False),
    ]
    for wl, cfgs, _plot, required in plan:
        if not required and elapsed() > args.budget_s * 0.6:
            log(f"skip {wl}: over 60% of the time budget")
            continue
        r = run(cli("roofline", wl, "--config", *cfgs, "--json", "--timeout", "150"), 420)
        record(f"roofline {wl}", r, parse_json(r))
    # one chart per family, from the recorded medians (no second measurement)
    for family, fname in (("examples", "roofline_examples.svg"), ("tilegym", "roofline_tilegym.svg")):
        pts = []
        for name, step in results["steps"].items():
            if name.startswith(f"roofline {family}:") and isinstance(step, dict) and step.get("results"):
                for res in step["results"]:
                    if res.get("point"):
                        pts.append((step["workload"]["ref"], res["config"], res["point"]["latency_ms"]))
        if pts:
            try:
                _plot_points(pts, out / fname)
                log(f"plot {fname}: {len(pts)} points")
            except Exception as e:   # a plot must never lose the numbers
                log(f"plot {fname} failed: {type(e).__name__}: {e}")
    # 4. noise study
    for wl, cfg in (("examples:vector_add", "64M-f32"), ("examples:matmul", "4096-f16")):
        r = run([sys.executable, "-c",
                 "import json; from cutile_diag.measure import run_isolated; "
                 f"print(json.dumps(run_isolated('bench/gpu/roofline_suite.py::noise_study', "
                 f"{{'workload': {wl!r}, 'config': {cfg!r}, 'runs': 10}}, timeout_s=150)))"], 200)
        record(f"noise {wl} {cfg}", r, parse_json(r))
    # 5. ncu
    if env.get("tools", {}).get("ncu") and elapsed() < args.budget_s * 0.75:
        for wl, cfg in (("examples:matmul", "4096-f16"), ("examples:vector_add", "64M-f32")):
            r = run(cli("roofline", wl, "--config", cfg, "--json", "--ncu", "--no-static", "--timeout", "120"), 300)
            record(f"ncu {wl} {cfg}", r, parse_json(r))
    else:
        log("skip ncu: not on PATH or over budget")
    # 6. TileGym perf tests through the plugin
    tg = os.environ.get("TILEGYM_DIR")
    perf_log = ""
    if tg and Path(tg).is_dir() and elapsed() < args.budget_s * 0.85:
        plug = [] if env.get("plugin_entry_point") else ["-p", "cutile_diag.pytest_plugin"]
        remaining = max(60.0, args.budget_s - elapsed())
        r = run([sys.executable, "-m", "pytest", "tests/ops/test_rms_norm.py", "tests/ops/test_softmax.py", "-q",
                 "-k", "test_perf and cutile", "--print-record", "-x", "-p", "no:cacheprovider", *plug],
                remaining, cwd=Path(tg))
        perf_log = r["stdout"] + "\n--- stderr ---\n" + r["stderr"]
        from cutile_diag.pytest_plugin import parse_record_lines
        recs, current = [], None
        for line in r["stdout"].splitlines():
            if line.startswith("Performance Test Results: "):
                current = line.split(": ", 1)[1]
            parsed = parse_record_lines(line)
            if parsed:
                fw, rec = parsed[0]
                fwd = rec.get("forward", rec)
                recs.append({"test": current, "framework": fw, "median_ms": fwd.get("median"),
                             "rel_std": fwd.get("rel_std"), "nrep": fwd.get("nrep")})
        record("tilegym perf tests", r, {"rc": r["rc"], "records": recs,
                                         "printed_lines": sum(1 for ln in r["stdout"].splitlines()
                                                              if ln.endswith(" ms") and ": {" in ln)})
    else:
        log("skip TileGym perf tests: TILEGYM_DIR not given, missing, or over budget")
    if perf_log:
        (out / "tilegym_perf.log").write_text(perf_log)
    results["elapsed_s"] = round(elapsed(), 1)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "results.md").write_text(render_md(results))
    (out / "suite.log").write_text("\n".join(LOG) + "\n")
    log(f"done in {elapsed():.0f}s")
    return 0


def _plot_points(pts, path: Path) -> None:
    """A chart of several workloads: re-place the recorded medians on the live device model."""
    from cutile_diag.roofline import analyze, get_ceilings, live_device, plot_roofline
    from cutile_diag.workloads import load_workload
    dev = live_device()
    ceil = get_ceilings(dev, measure_if_missing=False)
    points = []
    for ref, cfg_name, lat in pts:
        wl = load_workload(ref)
        cfg = wl.config(cfg_name)
        p = analyze(wl.name, cfg.name, latency_ms=lat, flops=wl.flops(cfg), bytes=wl.bytes(cfg),
                    unit=wl.compute_unit(cfg), device=dev, ceilings=ceil)
        p.config = f"{wl.name.split(':')[1]} {cfg.name}"
        points.append(p)
    plot_roofline(points, dev, ceil, path)


def _tera(v):
    return None if v is None else v / 1e12


def render_md(results: dict) -> str:
    env = results.get("environment", {})
    lines = ["# cutile-diag roofline suite", "",
             f"GPU: {env.get('nvidia_smi')}  ", f"torch {env.get('torch')}, cuda-tile {env.get('cuda-tile')}, "
             f"tileiras {env.get('nvidia-cuda-tileiras')}, tilegym {env.get('tilegym')}  ",
             f"elapsed: {results.get('elapsed_s')} s", ""]
    peaks = results["steps"].get("peaks")
    if isinstance(peaks, dict) and peaks.get("device"):
        d, c = peaks["device"], peaks.get("ceilings") or {}
        lines += ["## Peaks", "", "| quantity | datasheet | theoretical (max clock) | measured |",
                  "|---|---|---|---|",
                  f"| DRAM TB/s | {fmt(_tera((d['datasheet'].get('dram_bw') or {}).get('value')))} | "
                  f"{fmt(_tera(d['theoretical_dram_bw']['value']))} | "
                  f"{fmt(_tera((c.get('dram_bw') or {}).get('value')))} |"]
        for k, q in (c.get("flops") or {}).items():
            ds = (d["datasheet"].get(k) or {}).get("value")
            th = d["theoretical_flops"].get(k, {}).get("value")
            lines.append(f"| {k} TFLOP/s | {fmt(_tera(ds))} | {fmt(_tera(th))} | {fmt(_tera(q['value']))} |")
        lines.append("")
    rows = []
    for name, step in results["steps"].items():
        if not (name.startswith("roofline ") or name.startswith("ncu ")) or not isinstance(step, dict):
            continue
        for res in step.get("results") or []:
            p = res.get("point")
            row = {"wl": step.get("workload", {}).get("ref", name), "cfg": res["config"], "status": res["status"]}
            if p:
                row.update(ms=fmt(p["latency_ms"], ".4f"), rel=fmt((p.get("stats") or {}).get("rel_std"), ".2f"),
                           tbps=fmt(p["achieved_tbps"]), tflops=fmt(p["achieved_tflops"]), ai=fmt(p["ai"]),
                           cls=p["recipe_class"], bound=p["bound"], spec=fmt(p["pct_datasheet"], ".0f"),
                           meas=fmt(p["pct_measured"], ".0f"), level=p["level"],
                           check=((p.get("check") or {}).get("summary") or "-")[:40])
                if res.get("ncu") and not res["ncu"].get("error"):
                    row["ncu"] = f"{fmt((res['ncu'].get('dram_bytes') or 0) / 1e6)} MB"
            else:
                row["level"] = f"{res['status']}: {(res.get('error') or '')[:80]}"
            rows.append(row)
    if rows:
        lines += ["## Roofline", "", md_table(rows, [
            ("workload", "wl"), ("config", "cfg"), ("median ms", "ms"), ("rel_std %", "rel"), ("TB/s", "tbps"),
            ("TFLOP/s", "tflops"), ("AI", "ai"), ("class", "cls"), ("bound", "bound"), ("% spec", "spec"),
            ("% measured", "meas"), ("verdict", "level"), ("check", "check"), ("ncu DRAM", "ncu")])]
    nrows = []
    for name, step in results["steps"].items():
        if name.startswith("noise ") and isinstance(step, dict):
            s = step.get("study") or {}
            nrows.append({"k": f"{step.get('workload', name)} {step.get('config', '')}", "runs": s.get("runs"),
                          "med": fmt(s.get("median_of_medians_ms"), ".4f"), "spread": fmt(s.get("spread_pct"), ".2f"),
                          "rs": fmt(s.get("median_rel_std_pct"), ".2f"), "rsmax": fmt(s.get("max_rel_std_pct"), ".2f"),
                          "over": s.get("runs_over_1pct"), "err": step.get("error", "")})
    if nrows:
        lines += ["## Noise study (same kernel, 10 measurements)", "", md_table(nrows, [
            ("kernel", "k"), ("runs", "runs"), ("median of medians ms", "med"), ("spread of medians %", "spread"),
            ("median rel_std %", "rs"), ("max rel_std %", "rsmax"), ("runs > 1 %", "over"), ("error", "err")])]
    tg = results["steps"].get("tilegym perf tests")
    if isinstance(tg, dict) and tg.get("records") is not None:
        lines += ["## TileGym perf tests through the plugin", "",
                  f"pytest rc {tg.get('rc')}, {tg.get('printed_lines')} record lines printed", "",
                  md_table(tg["records"], [("test", "test"), ("framework", "framework"), ("median ms", "median_ms"),
                                           ("rel_std %", "rel_std"), ("nrep", "nrep")])]
    failed = [c for c in results["commands"] if c["rc"] not in (0, 1)]
    if failed:
        lines += ["## Steps that did not run through", ""]
        for c in failed:
            step = results["steps"].get(c["step"]) or {}
            err = (step.get("stderr") or "").strip().splitlines() if isinstance(step, dict) else []
            lines.append(f"- {c['step']}: rc {c['rc']}: {err[-1] if err else '(no stderr)'}")
        lines.append("")
    lines += ["## Commands", ""] + [f"- `{c['command']}` (rc {c['rc']}, {c['wall_s']} s)" for c in results["commands"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
