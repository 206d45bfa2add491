"""Diagnose the example kernels and TileGym ops with GPU evidence; write the results for the repo.

Run on a GPU machine (the H200)::

    python bench/gpu/diagnose_suite.py --out bench/results/diagnose

For every target it runs ``cutile-diag diagnose <target> --json`` and the rich form in a
subprocess (so one failure does not stop the rest), writes ``<name>.json`` / ``<name>.txt``,
and a ``summary.md`` with the bottleneck, % of roof and the first recommendations, plus the
exact commands.  Measured ceilings are taken (and measured once if missing) first, so % of
roof is against this GPU's real ceiling.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path

TARGETS = ["examples:vector_add", "examples:vector_add_persistent", "examples:gather_scale", "examples:softmax",
           "examples:matmul", "examples:matmul_f32", "examples:matmul_tuned", "tilegym:softmax", "tilegym:matmul",
           "tilegym:rms_norm"]


def _cmd(target: str, json_out: bool) -> list[str]:
    c = [sys.executable, "-m", "cutile_diag", "diagnose", target]
    return c + (["--json"] if json_out else ["--all"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/diagnose")
    ap.add_argument("--target", action="append", help="only these targets (default: all)")
    ap.add_argument("--timeout", type=float, default=900.0, help="per target, seconds")
    ap.add_argument("--no-text", action="store_true", help="skip the rich rendering run (halves GPU time)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    env["COLUMNS"] = "160"
    try:   # measured ceilings once, so every diagnosis compares against them
        from cutile_diag.roofline.device import live_device
        from cutile_diag.measure.ceilings import device_ceilings
        device_ceilings(live_device(), measure=True)
    except Exception as e:  # no GPU / no peaks: the diagnoses then say so themselves
        print(f"ceilings: {type(e).__name__}: {e}", file=sys.stderr)
    rows = []
    for target in args.target or TARGETS:
        name = target.replace(":", "-")
        row = {"target": target, "commands": [" ".join(["cutile-diag", "diagnose", target, "--json"])]}
        try:
            r = subprocess.run(_cmd(target, True), capture_output=True, text=True, timeout=args.timeout, env=env)
            (out / f"{name}.json").write_text(r.stdout)
            if r.returncode != 0:
                row["error"] = (r.stderr.strip().splitlines() or ["?"])[-1]
            else:
                doc = json.loads(r.stdout)
                facts = {f["key"]: f["value"] for f in doc.get("evidence", [])}
                row.update(bottleneck=doc["bottleneck"], confidence=doc["confidence"],
                           pct=facts.get("gpu.pct_of_roof"), latency_ms=facts.get("gpu.latency_ms"),
                           recs=[f"{x['id']}: {x['reason']}" for x in doc["recommendations"][:3]],
                           escalate=doc.get("escalate"))
            if args.no_text:
                rows.append(row)
                print(f"{target}: {row.get('bottleneck') or row.get('error')}", file=sys.stderr)
                continue
            t = subprocess.run(_cmd(target, False), capture_output=True, text=True, timeout=args.timeout, env=env)
            (out / f"{name}.txt").write_text(t.stdout + (("\n" + t.stderr) if t.returncode else ""))
        except subprocess.TimeoutExpired:
            row["error"] = f"timed out after {args.timeout:g} s"
        rows.append(row)
        print(f"{target}: {row.get('bottleneck') or row.get('error')}", file=sys.stderr)
    lines = [f"# cutile-diag diagnose with GPU evidence — {_dt.date.today().isoformat()}", "",
             "Produced by `python bench/gpu/diagnose_suite.py --out " + str(out) + "`; per target the JSON "
             "and the rich output are next to this file.", "",
             "| target | bottleneck | % of roof | latency ms | first recommendations |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| `{r['target']}` | error: {r['error']} | | | |")
            continue
        pct = f"{r['pct']:.0f}%" if isinstance(r.get("pct"), (int, float)) else "-"
        lat = f"{r['latency_ms']:.4f}" if isinstance(r.get("latency_ms"), (int, float)) else "-"
        esc = " (escalate)" if r.get("escalate") else ""
        lines.append(f"| `{r['target']}` | {r['bottleneck']} ({r['confidence']}){esc} | {pct} | {lat} | "
                     + "<br>".join(x.replace("|", "/") for x in r["recs"]) + " |")
    lines += ["", "Commands:", ""] + [f"    {c}" for r in rows for c in r["commands"]]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/summary.md", file=sys.stderr)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
