#!/usr/bin/env python
"""Which structural forms pay off on one-row-per-block kernels (issue 10), measured side by side.

Each variant is a chain of the loop's own transforms applied to a naive example (so every
variant is a candidate the loop can reach), checked against torch, then timed in interleaved
rounds with the project's timer (cold L2, batched short kernels).  The table gives each
variant's median latency, its ratio to the unmodified kernel and its DRAM throughput.

    source .device/setup.sh
    python bench/gpu/row_variants.py --out $OUT/row_variants [--rounds 3]
    python bench/gpu/row_variants.py --out /tmp/rv --dry-run      # CPU: build and compile-check every variant
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag import transforms as T
from cutile_diag.workloads import examples as ex

OFF = {"tma": "off"}
# kernel -> (configuration, [(label, [(transform, params), ...])])
PLANS = {
    "row_norm": ("16384x1000-f16", [
        ("base", []),
        ("A", [("gather_to_load", {})]),
        ("A tma-off", [("gather_to_load", OFF)]),
        ("A tma-off, W", [("gather_to_load", OFF), ("read_once", {})]),
        ("A tma-off, W, B", [("gather_to_load", OFF), ("read_once", {}), ("persistent_grid", {})]),
        ("A, W, B", [("gather_to_load", {}), ("read_once", {}), ("persistent_grid", {})]),
    ]),
    "softmax": ("32768x1024-f16", [
        ("base", []),
        ("C occ4, P", [("kernel_hints", {"occupancy": 4}), ("tma_zero_padding", {})]),   # session 2's kept
        ("F", [("store_allow_tma_false", {})]),
        ("F loads", [("store_allow_tma_false", {"loads": True})]),
        ("F loads, P", [("store_allow_tma_false", {"loads": True}), ("tma_zero_padding", {})]),
        ("F loads, B", [("store_allow_tma_false", {"loads": True}), ("persistent_grid", {})]),
    ]),
    "row_lse": ("16384x3000-f32", [
        ("base", []),
        ("C occ4, P", [("kernel_hints", {"occupancy": 4}), ("tma_zero_padding", {})]),   # session 3's kept
        ("P tma-off", [("tma_zero_padding", OFF)]),
        ("P tma-off, B", [("tma_zero_padding", OFF), ("persistent_grid", {})]),
    ]),
}

FL = ("store_allow_tma_false", {"loads": True})
# the steps after the loops' kept versions (acceptance-h200-s4), as far as the loops did not get
FOLLOWUPS = {
    "row_lse": ("16384x3000-f32", [
        ("F loads", [FL]),
        ("F loads, P", [FL, ("tma_zero_padding", {})]),
        ("F loads, Q", [FL, ("exp_to_exp2", {})]),
        ("F loads, Q, H", [FL, ("exp_to_exp2", {}), ("flush_to_zero", {})]),
        ("F loads, E", [FL, ("latency_hints", {})]),
        ("F loads, C occ2", [FL, ("kernel_hints", {"occupancy": 2})]),
        ("F loads, B 6/SM", [FL, ("persistent_grid", {"blocks_per_sm": 6})]),
    ]),
    "softmax": ("32768x1024-f16", [
        ("F loads", [FL]),
        ("F loads, Q, R", [FL, ("exp_to_exp2", {}), ("approx_div", {})]),
        ("F loads, Q, R, H", [FL, ("exp_to_exp2", {}), ("approx_div", {}), ("flush_to_zero", {})]),
        ("F loads, E", [FL, ("latency_hints", {})]),
        ("F loads, B 16/SM", [FL, ("persistent_grid", {"blocks_per_sm": 16})]),
        ("F loads, X4", [FL, ("rows_per_block", {"rows": 4})]),
    ]),
    "row_norm": ("16384x1000-f16", [
        ("base", []),
        ("E latency 1", [("latency_hints", {})]),
        ("B 16/SM", [("persistent_grid", {"blocks_per_sm": 16})]),
        ("H", [("flush_to_zero", {})]),
        ("C occ2", [("kernel_hints", {"occupancy": 2})]),
    ]),
}


# AOT signatures for --dry-run's resource table (the workloads' first-or-chosen shapes)
SPECS = {
    "row_norm": {"X": "f16[16384,1000]", "Y": "f16[16384,1000]", "Mean": "f32[16384]", "Rstd": "f32[16384]",
                 "N": "i32", "EPS": 1e-5, "TILE_N": 1024},
    "softmax": {"X": "f16[32768,1024]", "Y": "f16[32768,1024]", "TILE_N": 1024},
    "row_lse": {"X": "f32[16384,3000]", "Out": "f32[16384]", "TILE_N": 4096},
}


def resources(kernel: str, path: Path, out: Path) -> dict:
    """Threads, registers, shared memory and TMA of the variant's sm_90 cubin (an AOT capture)."""
    import re
    from cutile_diag.capture.aot import capture_aot
    specs = dict(SPECS[kernel])
    src = path.read_text()
    for pname in ("NUM_SMS", "num_sms"):      # a persistent wrapper passes the SM count
        if f"{pname}:" in src:
            specs[pname] = 132
    try:
        f = capture_aot(f"{path}::{kernel}", specs, out_dir=out)
    except Exception as e:
        return {"error": " ".join(str(e).split())[:200]}
    sm = f.path / "sm_90"
    ru = (sm / "resource-usage.txt").read_text()
    ptx = (sm / "kernel.ptx").read_text()
    rem = (sm / "remarks.yaml").read_text() if (sm / "remarks.yaml").exists() else ""
    m = re.search(r"REG:(\d+) STACK:\d+ SHARED:(\d+)", ru)
    t = re.search(r"\.reqntid (\d+)", ptx)
    return {"regs": int(m.group(1)), "smem": int(m.group(2)), "threads": int(t.group(1)) if t else None,
            "tma": rem.count("TMA Load instruction") + rem.count("TMA Store instruction")}


def build(kernel: str, chain, folder: Path) -> tuple[Path | None, str]:
    """The variant's file (None when a step refuses) and what each step did."""
    src = (EXAMPLES_DIR / f"{kernel}.py").read_text()
    notes = []
    for name, params in chain:
        try:
            res = T.get(name).apply(src, kernel, **params)
        except Exception as e:
            return None, f"{name}{params or ''} refused: {getattr(e, 'reason', None) or e}"
        src = res.new_source
        notes.append(f"{name}: {res.description[:90]}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kernel}_{abs(hash(tuple((n, json.dumps(p)) for n, p in chain))) % 10**8}.py"
    path.write_text(src)
    return path, "; ".join(notes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rep-ms", type=float, default=30.0)
    ap.add_argument("--only", default="", help="comma-separated kernels")
    ap.add_argument("--set", choices=("forms", "followups"), default="forms",
                    help="forms: TMA on/off and the structural steps; followups: the steps after the loops' kept versions")
    ap.add_argument("--tilegym", help="unused (acceptance.sh passes it to every suite)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build every variant and compile-check it")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    only = [s for s in args.only.split(",") if s]
    plans = PLANS if args.set == "forms" else FOLLOWUPS
    unknown = sorted(set(only) - set(plans))
    if unknown:
        ap.error(f"--only: no kernel {', '.join(unknown)} (kernels: {', '.join(plans)})")
    rows = []
    t0 = time.time()
    for kernel, (config, variants_of) in plans.items():
        if only and kernel not in only:
            continue
        variants = []
        for label, chain in variants_of:
            path, how = build(kernel, chain, args.out / "variants")
            rows.append({"kernel": kernel, "config": config, "variant": label, "steps": how,
                         "file": path.name if path else None})
            if path is not None:
                variants.append((label, path, rows[-1]))
            else:
                rows[-1]["status"] = "refused"
            print(f"{kernel:9s} {label:20s} {how[:150]}", flush=True)
        if args.dry_run:
            for label, path, row in variants:
                row["status"] = "built"
                row |= resources(kernel, path, args.out / "aot" / path.stem)
                print(f"  {label:20s} {json.dumps({k: row.get(k) for k in ('threads', 'regs', 'smem', 'tma', 'error')})}",
                      flush=True)
            continue
        measure_variants(kernel, config, variants, args)
    write(args, rows, time.time() - t0)
    return 0


def measure_variants(kernel, config, variants, args):
    from cutile_diag.measure.isolated import measure_config
    from cutile_diag.harness.timing import BenchOptions
    opts = BenchOptions(warmup_ms=20, rep_ms=args.rep_ms)
    live = []
    for label, path, row in variants:
        wl = ex.make(kernel, source=str(path))
        cfg = next(c for c in wl.configs if c.name == config)
        res = measure_config(wl, cfg, opts, check=True)
        row["status"] = res.status
        if res.status != "ok":
            row["error"] = (res.error or "")[:300]
            print(f"  {label}: {res.status} {row['error']}", flush=True)
            continue
        row["samples_ms"] = [res.stats.median]
        row["bytes"] = wl.bytes(cfg)
        live.append((label, wl, cfg, row))
    for r in range(1, args.rounds):           # interleaved rounds: drift hits every variant alike
        for label, wl, cfg, row in (live if r % 2 else live[::-1]):
            res = measure_config(wl, cfg, opts, check=False)
            if res.status == "ok":
                row["samples_ms"].append(res.stats.median)
    base = next((row for label, *_rest, row in live if label in ("base", "F loads")), None)
    for label, wl, cfg, row in live:
        row["median_ms"] = statistics.median(row["samples_ms"])
        row["spread_pct"] = 100 * (max(row["samples_ms"]) - min(row["samples_ms"])) / row["median_ms"]
        row["tb_s"] = row["bytes"] / row["median_ms"] / 1e9
        if base:
            row["vs_base"] = statistics.median(base["samples_ms"]) / row["median_ms"]
        print(f"  {label:20s} {row['median_ms']:.5f} ms  {row['tb_s']:.2f} TB/s  "
              f"x{row.get('vs_base', 0):.2f} (spread {row['spread_pct']:.1f} %)", flush=True)


def write(args, rows, wall):
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "wall_s": round(wall, 1),
            "command": "python " + " ".join(sys.argv), "python": platform.python_version(),
            "dry_run": args.dry_run, "rounds": args.rounds, "rep_ms": args.rep_ms}
    try:
        import torch
        import cuda.tile
        meta |= {"torch": torch.__version__, "cuda.tile": getattr(cuda.tile, "__version__", "?")}
        if torch.cuda.is_available():
            meta["gpu"] = torch.cuda.get_device_name()
    except Exception:
        pass
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# Row-kernel variants, side by side ({meta['date']})", "",
             f"- {meta.get('gpu', 'no GPU')}; torch {meta.get('torch')}; cuda.tile {meta.get('cuda.tile')}; "
             f"{args.rounds} interleaved rounds, rep {args.rep_ms} ms each; wall {meta['wall_s']} s",
             f"- command: `{meta['command']}`", "",
             "| kernel | config | variant | status | median ms | TB/s | vs base | spread | threads/regs/smem/TMA ops |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = f"{r['median_ms']:.5f}" if "median_ms" in r else ""
        lines.append(f"| {r['kernel']} | {r['config']} | {r['variant']} | {r.get('status', '')} | {ms} | "
                     f"{r.get('tb_s', 0):.2f} | {r.get('vs_base', 0):.2f}x | {r.get('spread_pct', 0):.1f} % | "
                     + ("/".join(str(r.get(k)) for k in ("threads", "regs", "smem", "tma")) if "regs" in r else "")
                     + " |")
    (args.out / "results.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
